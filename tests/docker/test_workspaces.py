"""pytorch_workspace on a real engine: two workspaces converge with real ansible-playbook runs,
Jupyter and sshd answer real requests through docker-proxy, idempotence, recreation of only
the changed workspace, refusals, simulated GPUs (device requests) and the agent's GF8xx rules.

The tests run in file order and share one world (engine, registry, image, inventory)."""

from __future__ import annotations

import json
import shutil
import stat
import time
from collections.abc import Iterator

import dockerlib
import pytest
from workspacelab import (
    HOST,
    WorkspaceWorld,
    fake_nvidia_smi,
    http,
    wait_http,
    wait_ssh_banner,
    workspace_world,
)

pytestmark = [pytest.mark.docker, pytest.mark.slow]

LABEL = "gpufleet.workspace"  # the role's label
A = {"jupyter": 28101, "ssh": 28122}
B = {"jupyter": 28201, "ssh": 28222}


@pytest.fixture(scope="module")
def world() -> Iterator[WorkspaceWorld]:
    with workspace_world() as w:
        yield w


def _two(w: WorkspaceWorld, **b_extra: object) -> list[dict[str, object]]:
    return [w.workspace("a", A["jupyter"], A["ssh"]),
            w.workspace("b", B["jupyter"], B["ssh"], **b_extra)]


def _ids(w: WorkspaceWorld) -> dict[str, str]:
    return {n: str(w.inspect(f"gpufleet-ws-{n}")["Id"]) for n in ("a", "b")}


def test_two_workspaces_converge_and_serve_jupyter_and_ssh(world: WorkspaceWorld) -> None:
    play = world.play("converge", _two(world))
    assert play.rc == 0, play.tail()
    assert play.host(HOST)["changed"] > 0
    for token in world.tokens.values():
        assert token not in play.output, "a Jupyter token reached the play's output"
    for name, ports in (("a", A), ("b", B)):
        info = world.inspect(f"gpufleet-ws-{name}")
        state, host_cfg, cfg = info["State"], info["HostConfig"], info["Config"]
        assert isinstance(state, dict) and state["Running"], state
        assert isinstance(host_cfg, dict) and isinstance(cfg, dict)
        assert host_cfg["Memory"] == 512 * 1024 * 1024
        assert host_cfg["NanoCpus"] == 1_500_000_000
        assert host_cfg["DeviceRequests"] is None  # gpus: [] (and this host has none)
        assert host_cfg["PortBindings"] == {
            "8888/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(ports["jupyter"])}],
            "2222/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(ports["ssh"])}]}
        assert cfg["Image"] == f"{world.repo}@{world.digest}"
        assert cfg["Labels"][LABEL] == name  # type: ignore[index]
        assert world.tokens[name] not in json.dumps(info), "token visible in docker inspect"
        jupyter_cfg = world.config_dir / name / "jupyter_server_config.json"
        mode = jupyter_cfg.stat()
        assert stat.S_IMODE(mode.st_mode) == 0o600 and mode.st_uid == int(cfg["Labels"][
            f"{LABEL}.uid"])  # type: ignore[index]

        # Jupyter through docker-proxy: no token -> 403 (API), the login page; token -> 200
        wait_http(ports["jupyter"])
        assert http(ports["jupyter"], "/api/contents")[0] == 403
        assert http(ports["jupyter"], "/api/kernels")[0] == 403
        assert http(ports["jupyter"], "/login")[0] == 200
        assert http(ports["jupyter"], "/api/contents", token="wrong" * 10)[0] == 403
        assert http(ports["jupyter"], "/api/contents", token=world.tokens[name])[0] == 200
        assert http(ports["jupyter"], f"/api/kernels?token={world.tokens[name]}")[0] == 200

        # sshd on the published port: the key works, the user is not root, no passwords
        wait_ssh_banner(ports["ssh"])
        world.trust_host_key(f"gpufleet-ws-{name}", ports["ssh"])
        who = world.ssh(ports["ssh"], f"u{name}", "id -un; id -u")
        assert who.returncode == 0, who.stderr
        user, uid = who.stdout.split()
        assert user == f"u{name}" and uid != "0"
        pw = world.ssh(ports["ssh"], f"u{name}", "true", options=(
            "-o", "PubkeyAuthentication=no",
            "-o", "PreferredAuthentications=password,keyboard-interactive"))
        assert pw.returncode == 255
        assert "Permission denied (publickey)" in pw.stderr, pw.stderr  # the only method offered
        root = world.ssh(ports["ssh"], "root", "true")
        assert root.returncode == 255 and "Permission denied" in root.stderr


def test_second_run_changes_nothing(world: WorkspaceWorld) -> None:
    before = _ids(world)
    play = world.play("idempotent", _two(world))
    assert play.rc == 0, play.tail()
    assert play.host(HOST)["changed"] == 0, play.tail()
    assert _ids(world) == before


def test_changed_digest_recreates_only_that_workspace(world: WorkspaceWorld) -> None:
    before = _ids(world)
    other = world.push_variant("variant-b")
    play = world.play("digest-b", _two(world, image_digest=other))
    assert play.rc == 0, play.tail()
    after = _ids(world)
    assert after["a"] == before["a"], "workspace a was recreated though only b changed"
    assert after["b"] != before["b"]
    assert world.inspect("gpufleet-ws-b")["Config"]["Image"] == f"{world.repo}@{other}"  # type: ignore[index]


def test_gpu_subsets_become_device_requests(world: WorkspaceWorld) -> None:
    """Simulated 2-GPU host (nvidia-smi from the real capture): the role asks the engine for
    `--gpus "device=0,1"`; the real engine records the DeviceRequests, and — without the NVIDIA
    runtime on this machine — refuses to start it, which the role reports plainly."""
    smi = world.workdir / "nvidia-smi"
    uuids = fake_nvidia_smi(smi)
    ws = world.workspace("g", 28301, 28322, gpus=[0, uuids[1]])
    play = world.play("gpus", [ws], pytorch_workspace_nvidia_smi_command=str(smi))
    try:
        assert play.rc != 0, play.tail()
        assert "gpufleet-ws-g was created but the engine could not start it" in play.flat
        assert "device driver" in play.flat and "nvidia_container_toolkit" in play.flat
        requests = world.inspect("gpufleet-ws-g")["HostConfig"]["DeviceRequests"]  # type: ignore[index]
        assert requests == [{"Driver": "", "Count": 0, "DeviceIDs": ["0", uuids[1]],
                             "Capabilities": [["gpu"]], "Options": {}}], requests
    finally:
        world.lab.docker("rm", "-f", "gpufleet-ws-g", check=False)


def test_refusals_before_anything_runs(world: WorkspaceWorld) -> None:
    smi = world.workdir / "nvidia-smi"
    uuids = fake_nvidia_smi(smi)
    bad = [
        world.workspace("r1", 28401, 28422, gpus=[0]),
        world.workspace("r2", 28501, 28422, gpus=[uuids[0]]),  # GPU 0 again, ssh port again
        world.workspace("r3", 28601, 28622, gpus=[7]),  # no such GPU
        {**world.workspace("r4", 28701, 28722), "jupyter_token": "short-token"},
        {**world.workspace("r5", 28801, 28822), "user": "root", "uid": 0},
    ]
    before = world.lab.docker("ps", "-a", "-q").stdout.split()
    play = world.play("refusals", bad, pytorch_workspace_nvidia_smi_command=str(smi))
    assert play.rc != 0
    text = play.flat
    assert "pytorch_workspaces refused, nothing changed" in text
    assert f"workspace 'r2': GPU {uuids[0]} is also assigned to workspace 'r1'" in text
    assert ("workspace 'r2': port 28422 (ssh_port) on 127.0.0.1 is already used by "
            "workspace 'r1'") in text
    assert "workspace 'r3': GPU 7 does not exist on this host" in text
    assert "workspace 'r4': jupyter_token is 11 characters, shorter than the minimum 32" in text
    assert "workspace 'r5': runs as root" in text
    assert "short-token" not in text
    assert world.lab.docker("ps", "-a", "-q").stdout.split() == before
    assert not any((world.config_dir / f"r{n}").exists() for n in range(1, 6))


def test_check_names_a_workspace_on_a_stale_digest(world: WorkspaceWorld) -> None:
    """Hand-broken: workspace a restarted by hand from another digest (labels copied)."""
    b_digest = str(world.inspect("gpufleet-ws-b")["Config"]["Image"]).split("@")[1]  # type: ignore[index]
    declared = _two(world, image_digest=b_digest)
    world.write_inventory(declared)
    stale = world.push_variant("stale-a")
    info = world.inspect("gpufleet-ws-a")
    labels = info["Config"]["Labels"]  # type: ignore[index]
    world.lab.docker("rm", "-f", "gpufleet-ws-a")
    argv = ["run", "-d", "--name", "gpufleet-ws-a", "--memory", "512m",
            "-p", f"127.0.0.1:{A['jupyter']}:8888", "-p", f"127.0.0.1:{A['ssh']}:2222",
            "-v", f"{world.config_dir / 'a'}:/etc/gpufleet-workspace:ro",
            "--entrypoint", "/bin/sh"]
    for k, v in labels.items():  # type: ignore[union-attr]
        argv += ["--label", f"{k}={v}"]
    world.lab.docker(*argv, f"{world.repo}@{stale}", "/etc/gpufleet-workspace/start.sh")
    wait_ssh_banner_inside(world)
    proc = world.cli("check", "--level", "facts", "--format", "json", "--save-raw",
                     str(world.workdir / "raw"))
    report = json.loads(proc.stdout)
    ws_findings = [f for f in report["findings"] if f["rule"].startswith("GF8")]
    # b (healthy, on its declared digest) and the rest of the host give no GF8xx finding
    assert [(f["rule"], f["hosts"]) for f in ws_findings] == [("GF801", [HOST])], ws_findings
    assert "workspace a runs " + stale in ws_findings[0]["message"]
    facts = report["hosts"][HOST]["facts"]
    by_ws = {c["workspace"]: c for c in facts["containers"] if c["workspace"]}
    assert set(by_ws) == {"a", "b"}
    for c in by_ws.values():
        assert c["jupyter_status"] == 403 and c["ssh_password_auth"] is False
        assert c["memory_bytes"] == 512 * 1024 * 1024 and 0 not in c["jupyter_uids"]
        assert c["user"] in ("ua", "ub") and c["pids"]
    assert by_ws["b"]["ports"] == ["127.0.0.1:28222->2222/tcp", "127.0.0.1:28201->8888/tcp"]


def wait_ssh_banner_inside(world: WorkspaceWorld) -> None:
    wait_ssh_banner(A["ssh"])
    wait_http(A["jupyter"])


def test_an_image_without_sshd_and_jupyter_is_refused(world: WorkspaceWorld) -> None:
    """A tiny image (this machine's /bin/sh and sleep, `docker import`) in the registry: the
    role pulls it by digest, looks for both tools and refuses before creating anything."""
    tiny = dockerlib.tiny_image(world.lab, "gpufleet/tiny:1")
    ref = f"{world.lab.registry}/gpufleet/tiny:1"
    world.lab.docker("tag", tiny, ref)
    world.lab.docker("push", ref)
    digests = json.loads(world.lab.docker("image", "inspect", "--format", "{{json .RepoDigests}}",
                                          ref).stdout)  # fmt: skip
    world.lab.docker("image", "rm", tiny, ref)
    digest = str(digests[0]).split("@", 1)[1]
    play = world.play("no-tools", [world.workspace("t", 28901, 28922)],
                      pytorch_image=ref, pytorch_image_digest=digest)
    assert play.rc != 0
    assert (f"{world.lab.registry}/gpufleet/tiny@{digest} cannot serve workspaces: missing in "
            "the image: /usr/sbin/sshd, jupyter-server") in play.flat, play.tail()
    assert world.lab.docker("ps", "-a", "-q", "--filter", "name=gpufleet-ws-t").stdout == ""


def test_check_names_an_unsafe_hand_made_workspace(world: WorkspaceWorld) -> None:
    """A workspace container made by hand from the pinned image: Jupyter without a token and
    as root, sshd with passwords, no memory limit. The agent's inside checks see each fault."""
    broken = world.workdir / "broken-c"
    shutil.copytree(world.config_dir / "a", broken)
    jcfg = broken / "jupyter_server_config.json"
    data = json.loads(jcfg.read_text())
    data["ServerApp"].update(token="", allow_root=True)
    jcfg.write_text(json.dumps(data))
    sshd = broken / "sshd_config"
    sshd.write_text(sshd.read_text().replace("PasswordAuthentication no",
                                             "PasswordAuthentication yes"))
    start = broken / "start.sh"
    start.write_text(start.read_text().replace(
        'setpriv --reuid="$uid" --regid="$uid" --init-groups env', "env"))
    world.lab.docker("run", "-d", "--name", "gpufleet-ws-c", "--label", f"{LABEL}=c",
                     "--label", f"{LABEL}.jupyter=8888", "-v",
                     f"{broken}:/etc/gpufleet-workspace:ro", "--entrypoint", "/bin/sh",
                     f"{world.repo}@{world.digest}", "/etc/gpufleet-workspace/start.sh")
    try:
        probe = ["exec", "gpufleet-ws-c", "python3", "-c", "import urllib.request as u; "
                 "u.urlopen('http://127.0.0.1:8888/api/status', timeout=2)"]
        deadline = time.monotonic() + 90
        while world.lab.docker(*probe, check=False).returncode != 0:
            assert time.monotonic() < deadline, world.lab.docker("logs", "gpufleet-ws-c").stderr
            time.sleep(1)
        report = json.loads(world.cli("check", "--level", "facts", "--format", "json").stdout)
        found = sorted((f["rule"], f["evidence"].get("workspace")) for f in report["findings"]
                       if f["rule"].startswith("GF8") and f["hosts"] == [HOST])
        assert found == [("GF801", "a"), ("GF804", "c"), ("GF805", "c"), ("GF806", "c"),
                         ("GF807", "c")], found
    finally:
        world.lab.docker("rm", "-f", "gpufleet-ws-c", check=False)
