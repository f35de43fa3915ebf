"""The pytorch_workspace role's plan (its filter plugin, pure): refusals, argv and the config hash.
The same code runs in the role; tests/docker/test_workspaces.py runs it on a real engine."""

from __future__ import annotations

import importlib.util
import itertools
import json
from typing import Any

import pytest

from paths import COLLECTION

_PLUGIN = COLLECTION / "plugins/filter/pytorch_workspace.py"
_spec = importlib.util.spec_from_file_location("pytorch_workspace_filters", _PLUGIN)
assert _spec is not None and _spec.loader is not None
pw = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pw)

IMAGE = "registry.example/pytorch:2.13.0"
DIGEST = "sha256:" + "a" * 64
U0, U1 = "GPU-e0ec50b6-f483-68ed-fb7b-ecc8879a76a1", "GPU-d7b915ba-0fcc-7de5-ad60-046e8236bde5"
GPUS = [f"0, {U0}", f"1, {U1}"]
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGd4c2VjcmV0a2V5c3R1ZmZoZXJlMTIzNDU2Nzg5MA user@x"
TOKEN = "f" * 48
OPTS = {"token_min_length": 32, "bind_address": "127.0.0.1", "ssh_port": 2222, "memory": "16g",
        "cpus": "", "pids_limit": 4096, "shm_size": "8g", "ssh_forwarding": False,
        "tls_certfile": "", "tls_keyfile": "", "config_dir": "/etc/gpufleet/workspaces",
        "container_prefix": "gpufleet-ws-",
        "restart_policy": "unless-stopped", "sshd_command": "/usr/sbin/sshd",
        "jupyter_command": "jupyter-server", "docker_command": "docker"}


def ws(name: str, jupyter: int, **extra: Any) -> dict[str, Any]:
    return {"name": name, "user": "alice", "uid": 1000, "jupyter_port": jupyter,
            "jupyter_token": TOKEN, "ssh_authorized_keys": [KEY], **extra}


def plan(*items: dict[str, Any], gpus: list[str] | None = None) -> dict[str, Any]:
    return pw.pytorch_workspace_plan(list(items), GPUS if gpus is None else gpus, IMAGE, DIGEST,
                                     OPTS)


def test_argv_is_a_list_with_limits_ports_gpus_and_the_pinned_image() -> None:
    out = plan(ws("a", 8888, gpus=[0, U1], cpus=4, volumes=["/data/a:/workspace"]))
    assert out["errors"] == []
    (a,) = out["workspaces"]
    argv = a["argv"]
    assert argv[:4] == ["docker", "create", "--name", "gpufleet-ws-a"]
    assert argv[argv.index("--memory") + 1] == "16g" and argv[argv.index("--cpus") + 1] == "4"
    # quoted so that the docker CLI's CSV parser keeps both devices in one field; by UUID (F18)
    assert argv[argv.index("--gpus") + 1] == f'"device={U0},{U1}"'
    ports = [argv[i + 1] for i, x in enumerate(argv) if x == "-p"]
    assert ports == ["127.0.0.1:8888:8888", "127.0.0.1:2222:2222"]  # ssh_port defaults to 2222
    assert "/data/a:/workspace" in argv
    assert argv[-2:] == [f"registry.example/pytorch@{DIGEST}", "/etc/gpufleet-workspace/start.sh"]
    assert not any(TOKEN in x for x in argv), "the token must not be on the command line"
    assert "NVIDIA_VISIBLE_DEVICES=void" not in argv
    assert TOKEN in out["files"]["a"]["jupyter_server_config.json"]
    assert TOKEN not in json.dumps(out["workspaces"]), "loop items must not carry the token (F1)"
    sshd = out["files"]["a"]["sshd_config"]
    assert "PasswordAuthentication no" in sshd and "PermitRootLogin no" in sshd
    for opt in ("AllowTcpForwarding", "AllowAgentForwarding", "PermitTunnel", "X11Forwarding"):
        assert f"{opt} no" in sshd  # L6
    assert "HostKey /etc/gpufleet-workspace/ssh_host_ed25519_key" in sshd  # L5


def test_hardening_defaults() -> None:
    argv = plan(ws("a", 8888))["workspaces"][0]["argv"]
    pairs = list(itertools.pairwise(argv))
    for pair in (("--security-opt", "no-new-privileges"), ("--cap-drop", "ALL"),
                 ("--pids-limit", "4096"), ("--shm-size", "8g"), ("--ulimit", "stack=67108864"),
                 ("--env", "NVIDIA_VISIBLE_DEVICES=void")):
        assert pair in pairs, pair
    assert ("--cap-add", "DAC_OVERRIDE") not in pairs and ("--cap-add", "SETUID") in pairs


def test_loopback_by_default_and_tls_beyond_it() -> None:
    argv = plan(ws("a", 8888))["workspaces"][0]["argv"]
    assert "127.0.0.1:8888:8888" in argv
    errors = plan(ws("a", 8888, bind_address="10.0.0.11"))["errors"]
    assert errors and "publishes Jupyter beyond loopback over plain HTTP" in errors[0]
    out = plan(ws("a", 8888, bind_address="10.0.0.11", tls_certfile="/etc/pki/ws.crt",
                  tls_keyfile="/etc/pki/ws.key"))
    assert out["errors"] == []
    argv = out["workspaces"][0]["argv"]
    assert "/etc/pki/ws.key:/etc/gpufleet-workspace-tls/tls.key:ro" in argv
    server = json.loads(out["files"]["a"]["jupyter_server_config.json"])["ServerApp"]
    assert server["keyfile"] == "/run/gpufleet-workspace/tls.key"
    assert "one is empty" in plan(ws("a", 8888, tls_certfile="/x.crt"))["errors"][0]


def test_start_script_takes_over_an_image_account_with_the_uid() -> None:
    start = plan(ws("a", 8888))["files"]["a"]["start.sh"]
    assert 'usermod -l "$user" -p "*"' in start  # M14
    assert '--config="$run/jupyter_server_config.json"' in start  # F20: the user's own copy


def test_no_gpus_means_no_device_request_and_the_hash_follows_every_setting() -> None:
    (a,) = plan(ws("a", 8888))["workspaces"]
    assert "--gpus" not in a["argv"]
    assert a["argv"][a["argv"].index("--env") + 1] == "NVIDIA_VISIBLE_DEVICES=void"  # F10/M11
    assert plan(ws("a", 8888))["workspaces"][0]["config"] == a["config"]
    for change in ({"memory": "8g"}, {"jupyter_token": "e" * 48}, {"ssh_port": 2223},
                   {"image_digest": "sha256:" + "b" * 64}, {"ssh_authorized_keys": [KEY + "2"]}):
        assert plan(ws("a", 8888, **change))["workspaces"][0]["config"] != a["config"], change


@pytest.mark.parametrize(("items", "message"), [
    ((ws("a", 8888, gpus=[0]), ws("b", 8889, ssh_port=2223, gpus=[U0])),
     f"workspace 'b': GPU {U0} is also assigned to workspace 'a'"),
    ((ws("a", 8888), ws("b", 8888, ssh_port=2223)),
     "workspace 'b': port 8888 (jupyter_port) on 127.0.0.1 is already used by workspace 'a'"),
    ((ws("a", 8888), ws("b", 8889)),
     "workspace 'b': port 2222 (ssh_port) on 127.0.0.1 is already used by workspace 'a'"),
    ((ws("a", 8888, ssh_port=8888),),
     "workspace 'a': port 8888 (ssh_port) on 127.0.0.1 is already"),
    ((ws("a", 8888, gpus=[2]),),
     "workspace 'a': GPU 2 does not exist on this host (it has 2 GPU(s), indices 0, 1)"),
    ((ws("a", 8888, gpus=["GPU-00000000-0000-0000-0000-000000000000"]),),
     "workspace 'a': GPU GPU-00000000-0000-0000-0000-000000000000 is not on this host"),
    ((ws("a", 8888, jupyter_token="x" * 31),),
     "workspace 'a': jupyter_token is 31 characters, shorter than the minimum 32"),
    ((ws("a", 8888, user="root", uid=0),), "workspace 'a': runs as root"),
    ((ws("a", 8888, uid=0),), "workspace 'a': runs as root"),
    ((ws("a", 8888, ssh_authorized_keys=[]),), "ssh_authorized_keys must list at least one"),
    ((ws("a", 8888, memory="lots"),), "memory must be a size like 16g"),
])
def test_refusals(items: tuple[dict[str, Any], ...], message: str) -> None:
    out = plan(*items)
    assert out["workspaces"] == []
    assert any(message in e for e in out["errors"]), out["errors"]
    assert not any(TOKEN in e or "x" * 31 in e for e in out["errors"])


def test_gpu_on_a_host_without_gpus_is_refused() -> None:
    errors = plan(ws("a", 8888, gpus=[0]), gpus=[])["errors"]
    assert errors == ["workspace 'a': GPU 0 does not exist on this host (it has no GPUs)"]


def test_same_port_on_two_addresses_is_fine() -> None:
    out = plan(ws("a", 8888, bind_address="127.0.0.1"), ws("b", 8888, bind_address="127.0.0.2"))
    assert out["errors"] == []


def test_actions_recreate_only_the_changed_workspace() -> None:
    p = plan(ws("a", 8888), ws("b", 8889, ssh_port=2223), {"name": "c", "state": "absent"})
    a, b = p["workspaces"][0], p["workspaces"][1]
    ps = [f"gpufleet-ws-a|a|{a['config']}|running", "gpufleet-ws-b|b|old|running",
          "gpufleet-ws-c|c|x|exited"]
    assert pw.pytorch_workspace_actions(p, ps) == {
        "remove": ["gpufleet-ws-b", "gpufleet-ws-c"], "create": ["b"], "start": []}
    ps = [f"gpufleet-ws-a|a|{a['config']}|exited", f"gpufleet-ws-b|b|{b['config']}|running"]
    assert pw.pytorch_workspace_actions(p, ps) == {
        "remove": [], "create": [], "start": ["gpufleet-ws-a"]}


def test_no_workspaces_plan_nothing_even_without_an_image() -> None:
    assert pw.pytorch_workspace_plan([], [], "", "", OPTS) == {"errors": [], "workspaces": [],
                                                                "files": {}}
    errors = pw.pytorch_workspace_plan([ws("a", 8888)], [], "no-tag", "sha256:x", OPTS)["errors"]
    assert errors == ["pytorch_image must be repository:tag, not 'no-tag'",
                      "pytorch_image_digest must be sha256:<64 hex>, not 'sha256:x'"]


def test_cdi_devices_by_uuid_where_the_spec_names_them_else_gpus() -> None:
    """M12: `nvidia-ctk cdi list` lines (one name per line: NVIDIA/nvidia-container-toolkit
    cmd/nvidia-ctk/cdi/list/list.go) that name both GPUs by UUID -> --device per GPU."""
    cdi = ["nvidia.com/gpu=0", f"nvidia.com/gpu={U0}", f"nvidia.com/gpu={U1}", "nvidia.com/gpu=all"]
    out = pw.pytorch_workspace_plan([ws("a", 8888, gpus=[0, 1])], GPUS, IMAGE, DIGEST,
                                    {**OPTS, "cdi_devices": cdi})
    argv = out["workspaces"][0]["argv"]
    assert [argv[i + 1] for i, x in enumerate(argv) if x == "--device"] == [
        f"nvidia.com/gpu={U0}", f"nvidia.com/gpu={U1}"]
    assert "--gpus" not in argv
    # a spec named by index only: legacy --gpus by UUID
    out = pw.pytorch_workspace_plan([ws("a", 8888, gpus=[0])], GPUS, IMAGE, DIGEST,
                                    {**OPTS, "cdi_devices": ["nvidia.com/gpu=0"]})
    argv = out["workspaces"][0]["argv"]
    assert "--device" not in argv and argv[argv.index("--gpus") + 1] == f'"device={U0}"'
