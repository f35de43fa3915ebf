"""pytorch_workspace on a real engine: two workspaces converge with real ansible-playbook runs,
Jupyter and sshd answer real requests through docker-proxy, idempotence, recreation of only
the changed workspace, refusals, simulated GPUs (device requests) and the agent's GF8xx rules.

The tests run in file order and share one world (engine, registry, image, inventory)."""

from __future__ import annotations

import json
import shutil
import ssl
import stat
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import dockerlib
import pytest
from workspacelab import (
    HOST,
    WorkspaceWorld,
    fake_nvidia_ctk,
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
    # a leaves bind_address to the role's default (loopback: F9/M13)
    a = {k: v for k, v in w.workspace("a", A["jupyter"], A["ssh"]).items() if k != "bind_address"}
    return [a, w.workspace("b", B["jupyter"], B["ssh"], **b_extra)]


def _ids(w: WorkspaceWorld) -> dict[str, str]:
    return {n: str(w.inspect(f"gpufleet-ws-{n}")["Id"]) for n in ("a", "b")}


def test_two_workspaces_converge_and_serve_jupyter_and_ssh(world: WorkspaceWorld) -> None:
    play = world.play("converge", _two(world), verbose=3)
    assert play.rc == 0, play.tail()
    assert play.host(HOST)["changed"] > 0
    for token in world.tokens.values():
        assert token not in play.output, "a Jupyter token reached the play's -vvv output"
    for name, ports in (("a", A), ("b", B)):
        info = world.inspect(f"gpufleet-ws-{name}")
        state, host_cfg, cfg = info["State"], info["HostConfig"], info["Config"]
        assert isinstance(state, dict) and state["Running"], state
        assert isinstance(host_cfg, dict) and isinstance(cfg, dict)
        assert host_cfg["Memory"] == 512 * 1024 * 1024
        assert host_cfg["NanoCpus"] == 1_500_000_000
        assert host_cfg["DeviceRequests"] is None  # gpus: [] (and this host has none)
        # ... and no GPU either where nvidia is the default runtime and the image says "all"
        assert "NVIDIA_VISIBLE_DEVICES=void" in cfg["Env"], cfg["Env"]  # type: ignore[operator]
        assert host_cfg["SecurityOpt"] == ["no-new-privileges"]
        assert host_cfg["CapDrop"] == ["ALL"]
        assert sorted(host_cfg["CapAdd"]) == [  # type: ignore[call-overload]
            "CAP_AUDIT_WRITE", "CAP_CHOWN", "CAP_FOWNER", "CAP_KILL", "CAP_SETGID", "CAP_SETUID",
            "CAP_SYS_CHROOT"]  # fmt: skip
        assert host_cfg["PidsLimit"] == 4096
        assert host_cfg["ShmSize"] == 8 * 1024**3
        assert {u["Name"]: u["Soft"] for u in host_cfg["Ulimits"]} == {  # type: ignore[union-attr]
            "stack": 67108864}
        assert host_cfg["PortBindings"] == {
            "8888/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(ports["jupyter"])}],
            "2222/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(ports["ssh"])}]}
        assert cfg["Image"] == f"{world.repo}@{world.digest}"
        assert cfg["Labels"][LABEL] == name  # type: ignore[index]
        assert world.tokens[name] not in json.dumps(info), "token visible in docker inspect"
        # the token file and host key stay root's on the host (any host account may hold the
        # workspace's uid); the user reads its copy in the container's private tmpfs
        for secret in ("jupyter_server_config.json", "ssh_host_ed25519_key"):
            mode = (world.config_dir / name / secret).stat()
            assert (stat.S_IMODE(mode.st_mode), mode.st_uid, mode.st_gid) == (0o600, 0, 0), secret
        uid = str(cfg["Labels"][f"{LABEL}.uid"])  # type: ignore[index]
        inside = world.lab.docker("exec", "--user", uid, f"gpufleet-ws-{name}", "stat", "-c",
                                  "%u %a", "/run/gpufleet-workspace/jupyter_server_config.json")
        assert inside.stdout.split() == [uid, "600"]
        # root in the container (no DAC_OVERRIDE) cannot read the user's copy
        peek = world.lab.docker("exec", f"gpufleet-ws-{name}", "cat",
                                "/run/gpufleet-workspace/jupyter_server_config.json", check=False)
        assert peek.returncode != 0 and world.tokens[name] not in peek.stdout

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
        world.trust_host_key(name, ports["ssh"])
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
        fwd = world.ssh(ports["ssh"], f"u{name}", "true", options=(
            "-o", "ExitOnForwardFailure=yes", "-R", "127.0.0.1:0:127.0.0.1:9"))
        assert fwd.returncode == 255 and "forwarding failed" in fwd.stderr, fwd.stderr


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
    # the recreated sshd shows the host key known_hosts already holds (L5, F19)
    wait_ssh_banner(B["ssh"])
    again = world.ssh(B["ssh"], "ub", "true")
    assert again.returncode == 0, again.stderr


def test_a_failed_create_prints_no_token_at_vvv_nor_in_runner_events(
        world: WorkspaceWorld) -> None:
    """F1: a name taken by a container the role did not make fails `docker create`; the real
    play's -vvv output and ansible-runner's job events (what AWX stores) hold no token."""
    world.lab.docker("create", "--name", "gpufleet-ws-f", "--entrypoint", "/bin/true",
                     f"{world.repo}@{world.digest}")
    ws = [world.workspace("f", 28701, 28722)]
    try:
        play = world.play("create-fails", ws, verbose=3)
        assert play.rc != 0 and "is already in use" in play.output, play.tail()
        assert "failed: [ws-host] (item=gpufleet-ws-f)" in play.output, play.tail()
        assert world.tokens["f"] not in play.output
        events = world.runner_events("create-fails", ws)
        failed = [e for e in events if e.get("event") == "runner_item_on_failed"]
        assert failed, sorted({str(e.get("event")) for e in events})
        for e in events:
            assert world.tokens["f"] not in json.dumps(e), e.get("event_data", {})
    finally:
        world.lab.docker("rm", "-f", "gpufleet-ws-f", check=False)


def test_an_image_with_the_uid_taken_still_serves_the_user(world: WorkspaceWorld) -> None:
    """M14: images built on ubuntu:24.04 hold ubuntu:x:1000 (locked password); a workspace
    with uid 1000 takes that account over, stays up, and its key login works."""
    dockerfile = (f"FROM {world.repo}@{world.digest}\n"
                  "RUN useradd -m -u 1000 -s /bin/bash ubuntu && passwd -l ubuntu\n")
    world.lab.docker("build", "-q", "-t", f"{world.repo}:uid1000", "-", input=dockerfile)
    world.lab.docker("push", f"{world.repo}:uid1000")
    digests = json.loads(world.lab.docker("image", "inspect", "--format", "{{json .RepoDigests}}",
                                          f"{world.repo}:uid1000").stdout)  # fmt: skip
    digest = str(digests[0]).split("@", 1)[1]
    ws = world.workspace("u", 28801, 28822, uid=1000, image_digest=digest)
    try:
        play = world.play("uid1000", [ws])
        assert play.rc == 0, play.tail()
        state = world.inspect("gpufleet-ws-u")["State"]
        assert isinstance(state, dict) and state["Running"] and state["Restarting"] is False
        wait_ssh_banner(28822)
        world.trust_host_key("u", 28822)
        who = world.ssh(28822, "uu", "id -un; id -u")
        assert who.returncode == 0 and who.stdout.split() == ["uu", "1000"], who.stderr
    finally:
        world.lab.docker("rm", "-f", "gpufleet-ws-u", check=False)


def test_jupyter_serves_tls_with_a_certificate(world: WorkspaceWorld) -> None:
    """F9/M13: with tls_certfile/tls_keyfile Jupyter answers HTTPS (the key stays root's on the
    host; the user gets a copy in the container's tmpfs)."""
    cert, key = world.workdir / "tls.crt", world.workdir / "tls.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj",
                    "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    key.chmod(0o600)
    ws = world.workspace("s", 28851, 28872, tls_certfile=str(cert), tls_keyfile=str(key))
    try:
        play = world.play("tls", [ws])
        assert play.rc == 0, play.tail()
        ctx = ssl.create_default_context(cafile=str(cert))
        deadline = time.monotonic() + 90
        while True:
            try:
                urllib.request.urlopen("https://127.0.0.1:28851/api/contents", context=ctx,
                                       timeout=5)
                raise AssertionError("Jupyter answered /api/contents without a token")
            except urllib.error.HTTPError as e:
                assert e.code == 403
                break
            except (OSError, urllib.error.URLError):
                assert time.monotonic() < deadline, world.lab.docker("logs", "gpufleet-ws-s").stderr
                time.sleep(1)
        req = urllib.request.Request("https://127.0.0.1:28851/api/contents",
                                     headers={"Authorization": f"token {world.tokens['s']}"})
        with urllib.request.urlopen(req, context=ctx, timeout=5) as r:
            assert r.status == 200
    finally:
        world.lab.docker("rm", "-f", "gpufleet-ws-s", check=False)


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
        # by UUID (F18): index 0 may name another GPU after one drops off the bus
        assert requests == [{"Driver": "", "Count": 0, "DeviceIDs": [uuids[0], uuids[1]],
                             "Capabilities": [["gpu"]], "Options": {}}], requests
        labels = world.inspect("gpufleet-ws-g")["Config"]["Labels"]  # type: ignore[index]
        assert labels[f"{LABEL}.gpus"] == f"0,{uuids[1]}"  # type: ignore[index]  (as written)
    finally:
        world.lab.docker("rm", "-f", "gpufleet-ws-g", check=False)


def test_gpus_go_in_as_cdi_devices_where_the_spec_names_them(world: WorkspaceWorld) -> None:
    """M12: with the toolkit's CDI spec naming the GPUs by UUID (a stand-in `nvidia-ctk cdi
    list`), the role asks for `--device nvidia.com/gpu=UUID`: the real engine records a "cdi"
    device request, and (no CDI driver in this engine) refuses to start it, reported plainly."""
    smi, ctk = world.workdir / "nvidia-smi", world.workdir / "nvidia-ctk"
    uuids = fake_nvidia_smi(smi)
    fake_nvidia_ctk(ctk, uuids)
    ws = world.workspace("k", 28311, 28332, gpus=[0, uuids[1]])
    play = world.play("cdi", [ws], pytorch_workspace_nvidia_smi_command=str(smi),
                      pytorch_workspace_nvidia_ctk_command=str(ctk))
    try:
        assert play.rc != 0, play.tail()
        assert "gpufleet-ws-k was created but the engine could not start it" in play.flat
        requests = world.inspect("gpufleet-ws-k")["HostConfig"]["DeviceRequests"]  # type: ignore[index]
        assert requests == [{"Driver": "cdi", "Count": 0, "DeviceIDs": [
            f"nvidia.com/gpu={uuids[0]}", f"nvidia.com/gpu={uuids[1]}"],
            "Capabilities": None, "Options": None}], requests
    finally:
        world.lab.docker("rm", "-f", "gpufleet-ws-k", check=False)


def test_refusals_before_anything_runs(world: WorkspaceWorld) -> None:
    smi = world.workdir / "nvidia-smi"
    uuids = fake_nvidia_smi(smi)
    bad = [
        world.workspace("r1", 28401, 28422, gpus=[0]),
        world.workspace("r2", 28501, 28422, gpus=[uuids[0]]),  # GPU 0 again, ssh port again
        world.workspace("r3", 28601, 28622, gpus=[7]),  # no such GPU
        {**world.workspace("r4", 28701, 28722), "jupyter_token": "short-token"},
        {**world.workspace("r5", 28801, 28822), "user": "root", "uid": 0},
        world.workspace("r6", 28901, 28922, bind_address="0.0.0.0"),
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
    assert ("workspace 'r6': bind_address 0.0.0.0 publishes Jupyter beyond loopback over plain "
            "HTTP") in text
    assert "short-token" not in text
    assert world.lab.docker("ps", "-a", "-q").stdout.split() == before
    assert not any((world.config_dir / f"r{n}").exists() for n in range(1, 7))


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
    # b (healthy, on its declared digest) and the rest of the host give no GF8xx finding; a,
    # made by hand without NVIDIA_VISIBLE_DEVICES=void under the nvidia default runtime,
    # reaches every GPU the image's Env names (all) though it was given none (F10: GF810)
    assert [(f["rule"], f["hosts"]) for f in ws_findings] == [("GF801", [HOST]),
                                                               ("GF810", [HOST])], ws_findings
    assert "workspace a runs " + stale in ws_findings[0]["message"]
    assert ws_findings[1]["evidence"]["gpu_env"] == "all", ws_findings[1]
    facts = report["hosts"][HOST]["facts"]
    by_ws = {c["workspace"]: c for c in facts["containers"] if c["workspace"]}
    assert set(by_ws) == {"a", "b"}
    for c in by_ws.values():
        assert c["jupyter_status"] == 403 and c["ssh_password_auth"] is False
        assert c["memory_bytes"] == 512 * 1024 * 1024 and 0 not in c["jupyter_uids"]
        assert c["user"] in ("ua", "ub") and c["pids"]
    assert by_ws["b"]["ports"] == ["127.0.0.1:28222->2222/tcp", "127.0.0.1:28201->8888/tcp"]
    assert (by_ws["b"]["runtime"], by_ws["b"]["gpu_env"]) == ("nvidia", "void")
    assert (by_ws["a"]["runtime"], by_ws["a"]["gpu_env"]) == ("nvidia", "all")


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
        # a and c, made by hand without NVIDIA_VISIBLE_DEVICES=void under the nvidia default
        # runtime, both reach "all" (GF810 each, and GF802: the same GPUs twice)
        assert found == [("GF801", "a"), ("GF802", None), ("GF804", "c"), ("GF805", "c"),
                         ("GF806", "c"), ("GF807", "c"), ("GF810", "a"), ("GF810", "c")], found
    finally:
        world.lab.docker("rm", "-f", "gpufleet-ws-c", check=False)


def test_the_inside_check_runs_nothing_the_tenant_planted(world: WorkspaceWorld) -> None:
    """F2: a workspace whose tenant (uid 2901) planted json.py in the image's WORKDIR and titled
    a process like an sshd listener, with no real sshd running. The check (as the workspace's
    uid, python3 -I, -w /) runs neither; before the fix both ran as root."""
    plant = world.workdir / "plant-d"
    plant.mkdir()
    marker = "import os\nopen('/tmp/pwned-json-%d' % os.getuid(), 'w').close()\n"
    (plant / "json.py").write_text(marker + "from _json import *  # noqa\n")
    (plant / "sshd").write_text("#!/bin/sh\nid -u > /tmp/pwned-sshd\n")
    (plant / "sshd").chmod(0o755)
    decoy = 'exec -a "sshd: /plant/sshd [listener]" sleep 600'
    world.lab.docker("run", "-d", "--name", "gpufleet-ws-d", "--label", f"{LABEL}=d",
                     "--label", f"{LABEL}.uid=2901", "--label", f"{LABEL}.jupyter=8888",
                     "-v", f"{plant}:/plant:ro", "-w", "/plant", "--entrypoint", "/bin/bash",
                     f"{world.repo}@{world.digest}", "-c",
                     f"setpriv --reuid=2901 --regid=2901 --clear-groups bash -c '{decoy}'")
    try:
        report = json.loads(world.cli("check", "--level", "facts", "--format", "json").stdout)
        ls = world.lab.docker("exec", "gpufleet-ws-d", "sh", "-c", "ls /tmp").stdout.split()
        assert not [f for f in ls if f.startswith("pwned")], ls
        d = [f for f in report["findings"] if f["evidence"].get("workspace") == "d"]
        assert [(f["rule"], f["evidence"]["error"]) for f in d if f["rule"] == "GF809"] == [
            ("GF809", "jupyter: URLError; no running sshd found")], d
    finally:
        world.lab.docker("rm", "-f", "gpufleet-ws-d", check=False)
