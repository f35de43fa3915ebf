"""Workspace container facts: the real capture of probe.sh's `containers` and `workspace_checks`
sections (tests/fixtures/workspaces/) parses to its golden file; the shapes the capture lacks
(device requests, `--gpus all`, a failed inside check) from small literal inspect lines."""

from __future__ import annotations

import json
import os
from pathlib import Path

from gpufleet.model import to_jsonable
from gpufleet.probes import parse_probe_output
from gpufleet.probes.containers import parse_containers, parse_workspace_checks

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CAPTURE = FIXTURES / "workspaces" / "probe-workspaces.txt"
GOLDEN = FIXTURES / "golden" / "workspaces" / "probe-workspaces.txt.json"


def test_real_capture_matches_its_golden_file() -> None:
    facts = parse_probe_output(CAPTURE.read_text())
    got = json.loads(json.dumps(to_jsonable(facts.containers)))
    if os.environ.get("GPUFLEET_UPDATE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps(got, indent=2, sort_keys=True) + "\n")
    assert got == json.loads(GOLDEN.read_text())


def test_real_capture_reads_digest_ports_user_and_inside_checks() -> None:
    a, b = parse_probe_output(CAPTURE.read_text()).containers
    assert (a.workspace, a.name, a.user, a.uid) == ("a", "gpufleet-ws-a", "ua", 2001)
    assert a.image_digest == ("sha256:d2867574bc7dc1d1fdf8bc531eb60fb1b63d529299b048b6b944733614"
                              "a180d4")
    assert b.ports == ("127.0.0.1:28222->2222/tcp", "127.0.0.1:28201->8888/tcp")
    assert (b.memory_bytes, b.nano_cpus, b.gpus) == (512 << 20, 1_500_000_000, ())
    assert a.jupyter_status == 403 and a.jupyter_uids == (2001,)
    assert a.ssh_password_auth is False and a.ssh_root_login == "no"
    assert a.pids == (27412, 27524) and a.check_error is None


def test_device_requests_gpus_all_and_foreign_containers() -> None:
    lines = [
        {"Id": "1" * 64, "Name": "/gpufleet-ws-g", "Image": "reg/pt:1",
         "Labels": {"gpufleet.workspace": "g"}, "User": "", "Memory": 0,
         "DeviceRequests": [{"Driver": "", "Count": 0, "DeviceIDs": ["0", "GPU-d7b9"],
                             "Capabilities": [["gpu"]], "Options": {}}], "PortBindings": {}},
        {"Id": "2" * 64, "Name": "/trainer", "Image": "other:latest", "Labels": None,
         "User": "1000", "DeviceRequests": [{"Driver": "", "Count": -1, "DeviceIDs": None,
                                             "Capabilities": [["gpu"]]}], "PortBindings": None},
        {"Id": "3" * 64, "Name": "/web", "Image": "nginx", "Labels": {},
         "DeviceRequests": [{"Driver": "", "Count": 0, "Capabilities": [["tpu"]]}]},
    ]
    g, trainer, web = parse_containers("\n".join(json.dumps(x) for x in lines) + "\nnot json\n")
    assert (g.workspace, g.gpus, g.image_digest, g.memory_bytes) == ("g", ("0", "GPU-d7b9"),
                                                                      None, 0)
    assert (trainer.workspace, trainer.user, trainer.gpus) == (None, "1000", ("all",))
    assert web.gpus == ()


def test_cdi_requests_runtime_and_the_visible_devices_env() -> None:
    """probe.sh's template adds Runtime and GpuEnv (only the NVIDIA_VISIBLE_DEVICES entries of
    Config.Env, then the null that closes the list); CDI names come as a "cdi" request."""
    lines = [
        {"Id": "4" * 64, "Name": "/gpufleet-ws-c", "Labels": {"gpufleet.workspace": "c",
                                                              "gpufleet.workspace.gpus": ""},
         "DeviceRequests": None, "Runtime": "nvidia",
         "GpuEnv": ["NVIDIA_VISIBLE_DEVICES=all", None]},
        {"Id": "5" * 64, "Name": "/gpufleet-ws-d", "Labels": {"gpufleet.workspace": "d",
                                                              "gpufleet.workspace.gpus": "0,1"},
         "DeviceRequests": [{"Driver": "cdi", "DeviceIDs": ["nvidia.com/gpu=GPU-d7b9",
                                                           "vendor.example/x=1"]}],
         "Runtime": "runc", "GpuEnv": [None]},
    ]
    c, d = parse_containers("\n".join(json.dumps(x) for x in lines))
    assert (c.gpus, c.runtime, c.gpu_env, c.assigned_gpus) == ((), "nvidia", "all", ())
    assert (d.gpus, d.runtime, d.gpu_env, d.assigned_gpus) == (("GPU-d7b9",), "runc", None,
                                                              ("0", "1"))


def test_failed_inside_check_is_kept_as_an_error() -> None:
    text = (f"container={'4' * 64} rc=126\nOCI runtime exec failed: python3 not found\n"
            f"pids= 11 12\ncontainer={'5' * 64} rc=0\n"
            '{"jupyter_error": "URLError", "jupyter_uids": []}\n')
    checks = parse_workspace_checks(text)
    assert checks["4" * 64] == {"check_error": "check exited 126", "pids": (11, 12)}
    five = checks["5" * 64]
    assert five["check_error"] == "jupyter: URLError; no running sshd found"
    assert five["jupyter_status"] is None and "ssh_password_auth" not in five


def test_a_container_gone_between_ps_and_inspect_keeps_the_others() -> None:
    text = CAPTURE.read_text().replace("==gpufleet== containers rc=0",
                                       "==gpufleet== containers rc=1", 1)
    text = text.replace("==gpufleet== workspace_checks", "==gpufleet-stderr==\nError: No such "
                        "object: 0123abcd\n==gpufleet== workspace_checks", 1)
    facts = parse_probe_output(text)
    assert [c.workspace for c in facts.containers] == ["a", "b"]
    assert "containers" not in facts.errors
