"""Issue 23's systemd-backed items, run for real: one target where systemd is PID 1
(systemdtarget.py), real systemctl, a real dockerd under docker.service, the toolkit's CDI refresh
units as v1.19.1 ships them, the NVIDIA kernel driver simulated (tests/ansible/standin/systemd).

The tests share the one container and run in file order, each leaving the state the next starts
from: M10 (docker reloaded, not restarted), the toolkit converged (M2's enable), the stale CDI spec
after an upgrade without a reload (the refresh service gives up: review M1's mechanism), the driver
role's reload (M3 daemons stopped and started, M4 the same modules back, M1 the spec regenerated),
a reboot (M2: the spec written again at boot), and last the persistenced drop-in over a unit
under a /lib that is not merged into /usr (L3). The toolkit converge fetches its key and packages
through a real HTTP proxy named by nvidia_container_toolkit_environment (L11)."""

from __future__ import annotations

import shlex
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import roletarget as tg
from dockerlib import scratch_workdir
from systemdtarget import COLLECTION, PlayResult, SystemdTarget, play_path, start_systemd_target

from harness.proxy import HttpProxy, start_http_proxy

pytestmark = [pytest.mark.docker, pytest.mark.ansible, pytest.mark.slow]

OLD, NEW = "580.65.06", "580.95.05"
MODULES = {"nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm", "nvidia_peermem"}
SPEC = "/var/run/cdi/nvidia.yaml"
INNER = {"bridge": "none", "iptables": False, "ip-masq": False, "live-restore": True}


@pytest.fixture(scope="module")
def sd() -> Iterator[SystemdTarget]:
    with scratch_workdir("gpufleet-systemd-target", "GPUFLEET_SYSTEMD_TEST_LOGS",
                         "/var/tmp/gpufleet-systemd-logs") as workdir, \
            start_systemd_target(workdir) as t:
        yield t


def show(sd: SystemdTarget, unit: str, prop: str) -> str:
    return sd.ssh("systemctl", "show", "-p", prop, "--value", unit).stdout.strip()


def daemon_json(sd: SystemdTarget, options: dict[str, object], name: str) -> PlayResult:
    res = sd.play(play_path("systemd_daemon_json.yml"), name,
                  extra_vars={"container_runtime_daemon_options": options})  # fmt: skip
    assert res.rc == 0 and res.host()["failed"] == 0, res.tail()
    return res


def test_daemon_json_reloadable_change_reloads_docker_and_the_container_lives(
    sd: SystemdTarget,
) -> None:
    """M10: a change of reloadable keys only (labels) -> `systemctl reload docker`: the same
    dockerd (MainPID) re-reads daemon.json (its labels show it), a running container is untouched;
    a key only a restart applies (log-level) -> docker restarted (new MainPID)."""
    sd.ssh("tar -C / -chf /root/tiny.tar usr/bin/sleep usr/lib/x86_64-linux-gnu/libc.so.6 "
           "lib64/ld-linux-x86-64.so.2 && docker import /root/tiny.tar gpufleet/tiny:1")
    box = sd.ssh("docker", "run", "-d", "--network", "none", "gpufleet/tiny:1",
                 "/usr/bin/sleep", "infinity").stdout.strip()  # fmt: skip
    started = sd.ssh("docker", "inspect", "-f", "{{.State.StartedAt}}", box).stdout.strip()
    pid = show(sd, "docker", "MainPID")
    daemon_json(sd, {**INNER, "labels": ["gpufleet.m10=reload"]}, "m10-reload")
    assert show(sd, "docker", "MainPID") == pid, "dockerd was restarted for a reloadable key"
    labels = sd.ssh("docker", "info", "--format", shlex.quote("{{json .Labels}}")).stdout
    assert "gpufleet.m10=reload" in labels, f"dockerd did not re-read daemon.json: {labels}"
    fmt = shlex.quote("{{.State.Running}} {{.State.StartedAt}}")
    state = sd.ssh("docker", "inspect", "-f", fmt, box)
    assert state.stdout.split() == ["true", started], state.stdout
    daemon_json(sd, {**INNER, "labels": ["gpufleet.m10=reload"], "log-level": "warn"},
                "m10-restart")  # fmt: skip
    assert show(sd, "docker", "MainPID") not in ("", "0", pid), "log-level needs a restart"
    sd.ssh("docker", "rm", "-f", box)


@pytest.fixture(scope="module")
def proxy(sd: SystemdTarget) -> Iterator[HttpProxy]:
    """tinyproxy on the run's address (the target shares this network namespace)."""
    with start_http_proxy(sd.logdir / "proxy", sd.addr) as p:
        yield p


@pytest.fixture(scope="module")
def toolkit(sd: SystemdTarget, proxy: HttpProxy) -> PlayResult:
    """Driver OLD installed and loaded, DCGM holding the GPU; then the toolkit role (1.19.1 from
    the mirror, docker engine) converged: it enables the CDI refresh units and writes the spec.
    The role's environment names the proxy, as behind a site proxy (L11); the Debian archive the
    target's apt also updates from stays direct (no_proxy), as it is without a proxy."""
    sd.ssh(f"gpufleet-sim-driver install {OLD} && modprobe -a {' '.join(sorted(MODULES))} "
           "&& systemctl restart nvidia-dcgm")
    archives = sorted({urlsplit(u).hostname or "" for u in tg.host_debian_archives().values()})
    extra = {**toolkit_vars(sd), "nvidia_container_toolkit_environment": {
        "http_proxy": proxy.url, "no_proxy": ",".join(archives)}}
    return sd.play(COLLECTION / "playbooks/site.yml", "toolkit", "--tags",
                   "nvidia_container_toolkit", extra_vars=extra)  # fmt: skip


def toolkit_vars(sd: SystemdTarget) -> dict[str, object]:
    return {
        "container_runtime_engine": "docker",
        "container_runtime_daemon_options": INNER,
        "nvidia_container_toolkit_source": "mirror",
        "nvidia_container_toolkit_mirror_url": sd.mirror.url,
        "nvidia_container_toolkit_mirror_key_url": sd.mirror.key_url,
        "nvidia_container_toolkit_version": "1.19.1",
    }


def spec_version(sd: SystemdTarget) -> str:
    proc = sd.ssh("cat", SPEC, check=False)
    if proc.returncode != 0:
        return "(no spec)"
    flag = "--host-driver-version="
    found = [w.removeprefix(flag) for w in proc.stdout.split() if w.startswith(flag)]
    assert f"libnvidia-ml.so.{found[0]}" in proc.stdout, proc.stdout
    return found[0]


def test_toolkit_enables_the_cdi_refresh_and_the_spec_names_the_driver(
    sd: SystemdTarget, toolkit: PlayResult
) -> None:
    """M2 (part): both units enabled by the role (the stand-in packages, like NVIDIA's postinst in
    an image build, enable nothing); the service ran and wrote the spec for the loaded driver."""
    assert toolkit.rc == 0 and toolkit.host()["failed"] == 0, (
        f"{toolkit.tail()}\n{sd.journal('nvidia-cdi-refresh.service')}")
    enabled = sd.ssh("systemctl", "is-enabled", "nvidia-cdi-refresh.path",
                     "nvidia-cdi-refresh.service", check=False).stdout.split()  # fmt: skip
    assert enabled == ["enabled", "enabled"], enabled
    assert spec_version(sd) == OLD


def test_the_toolkit_fetches_its_key_and_packages_through_the_roles_proxy(
    sd: SystemdTarget, proxy: HttpProxy, toolkit: PlayResult
) -> None:
    """L11: with nvidia_container_toolkit_environment naming an HTTP proxy, the signing key
    download (ansible.builtin.uri on the target) and apt's fetches from the mirror go through it:
    the proxy's log has the requests (without the role's `environment` both go direct)."""
    assert toolkit.rc == 0, "toolkit converge failed"
    seen = proxy.requests()
    assert f"GET {sd.mirror.key_url} HTTP/1.1" in seen, seen
    apt = [r for r in seen if r.startswith(f"GET {sd.mirror.url}") and sd.mirror.key_url not in r]
    assert apt, f"apt fetched nothing from {sd.mirror.url} through the proxy: {seen}"


def test_the_toolkit_role_alone_restarts_a_dockerd_that_started_without_the_hook(
    sd: SystemdTarget, toolkit: PlayResult
) -> None:
    """Issue 39 N3: the toolkit role on its own (no container_runtime in the play, as its README
    offers) on a host whose dockerd started while nvidia-container-runtime-hook was absent: the
    role restarts docker (a new MainPID), it does not abort on "The requested handler ... was not
    found" (it did: the notify came before the role's first include of container_runtime)."""
    assert toolkit.rc == 0, "toolkit converge failed"
    hook = "/usr/bin/nvidia-container-runtime-hook"
    sd.ssh(f"mv {hook} {hook}.away && systemctl restart docker && mv {hook}.away {hook}")
    pid = show(sd, "docker", "MainPID")
    res = sd.play(play_path("toolkit_alone.yml"), "toolkit-alone", extra_vars=toolkit_vars(sd))
    assert res.rc == 0 and res.host()["failed"] == 0, res.tail()
    assert show(sd, "docker", "MainPID") not in ("", "0", pid), "dockerd was not restarted"


def test_a_replaced_hook_does_not_restart_a_dockerd_that_started_with_it(
    sd: SystemdTarget, toolkit: PlayResult
) -> None:
    """Issue 39 N4: after the role restarted dockerd (the test above), the hook is replaced as a
    package update replaces it (a new inode renamed over the old one, so a new ctime, as dpkg's
    unpack does): the toolkit role leaves the same dockerd (MainPID) alone (with live-restore
    off its restart would stop every container); moby needs the hook only to exist when dockerd
    starts. (It restarted dockerd on every toolkit update: the hook's ctime was newer than
    dockerd's start.) Runs after the test above, in file order, as every test of this file."""
    assert toolkit.rc == 0, "toolkit converge failed"
    hook = "/usr/bin/nvidia-container-runtime-hook"
    pid = show(sd, "docker", "MainPID")
    sd.ssh(f"cp -p {hook} {hook}.new && mv {hook}.new {hook}")
    res = sd.play(play_path("toolkit_alone.yml"), "toolkit-updated", extra_vars=toolkit_vars(sd))
    assert "RUNNING HANDLER [gpufleet.gpu.container_runtime : Restart docker" not in res.output, (
        res.tail())
    assert res.rc == 0 and res.host()["failed"] == 0, res.tail()
    assert show(sd, "docker", "MainPID") == pid, "dockerd was restarted for a replaced hook"


@pytest.fixture(scope="module")
def upgraded(sd: SystemdTarget, toolkit: PlayResult) -> str:
    """The new driver's packages land (DKMS rewrites modules.dep) while OLD stays loaded: the path
    unit starts the service, whose `nvidia-smi -L` fails on the mismatch until systemd's start
    limit ends the retries. Returns the service's final result."""
    assert toolkit.rc == 0, "toolkit converge failed"
    sd.ssh(f"gpufleet-sim-driver install {NEW}")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if show(sd, "nvidia-cdi-refresh.service", "ActiveState") == "failed":
            break
        time.sleep(0.5)
    return show(sd, "nvidia-cdi-refresh.service", "Result")


def test_an_upgrade_without_reload_leaves_the_cdi_spec_stale(
    sd: SystemdTarget, upgraded: str
) -> None:
    """Review M1's mechanism, with real systemd and v1.19.1's units: the refresh gives up and the
    spec keeps naming the old driver's libraries."""
    assert upgraded in ("start-limit-hit", "exit-code"), upgraded
    assert spec_version(sd) == OLD


@pytest.fixture(scope="module")
def reloaded(sd: SystemdTarget, upgraded: str) -> PlayResult:
    return sd.play(play_path("systemd_driver_runtime.yml"), "driver-reload", extra_vars={
        "nvidia_driver_persistenced_enabled": False, "nvidia_driver_reboot_allowed": False})


def test_module_reload_stops_dcgm_reloads_every_module_and_refreshes_the_spec(
    sd: SystemdTarget, reloaded: PlayResult
) -> None:
    """M3: with nvidia-dcgm holding /dev/nvidia0 the unload succeeds only because the role stops
    it (else kmod's "Module nvidia is in use" -> a reboot it may not do -> failure); it runs again
    afterwards. M4: every nvidia* module loaded before is loaded again, nvidia_peermem included.
    M1: the CDI spec names the new driver. nvidia-smi answers with the new version.
    The role reads /proc/modules: the simulated list is bound over the kernel's file, or, on a
    kernel without module support (no such file, as on the 2-core dev VM), opened in its place by
    a preloaded shim (standin/systemd/procmodules.c, built with gcc, which scripts/setup.sh
    installs); neither working is a failure of the harness, never a skip."""
    assert sd.ssh("cat", "/proc/modules", check=False).returncode == 0, (
        "the target has no /proc/modules: neither the bind over the kernel's file nor the "
        "gcc-built shim (tests/ansible/standin/systemd/procmodules.c) is in place")
    assert reloaded.rc == 0 and reloaded.host()["failed"] == 0, (
        f"{reloaded.tail()}\n{sd.journal('nvidia-cdi-refresh.service', 'nvidia-dcgm')}")
    assert "-> action: reload" in reloaded.flat, reloaded.tail()
    version = sd.ssh("cat", "/proc/driver/nvidia/version").stdout
    assert f"  {NEW}  " in version, version
    loaded = {line.split()[0] for line in sd.ssh("cat", "/proc/modules").stdout.splitlines()}
    assert loaded == MODULES, f"modules after the reload: {sorted(loaded)}"
    assert show(sd, "nvidia-dcgm", "ActiveState") == "active"
    holders = sd.ssh("sh", "-c", "'ls -l /proc/[0-9]*/fd 2>/dev/null | grep -c /dev/nvidia0'",
                     check=False).stdout.strip()  # fmt: skip
    assert holders == "1", f"nv-hostengine should hold the new /dev/nvidia0 again: {holders}"
    assert spec_version(sd) == NEW
    smi = sd.ssh("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader")
    assert smi.stdout.strip() == NEW, smi.stdout


def test_the_cdi_spec_is_written_again_at_boot(sd: SystemdTarget, upgraded: str) -> None:
    """M2: /run is a tmpfs; after a reboot (container restart) the enabled service writes the spec
    again, for the driver the boot loaded (the new one, reloaded or not before)."""
    sd.reboot()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and spec_version(sd) == "(no spec)":
        time.sleep(0.5)
    assert spec_version(sd) == NEW
    # A oneshot without RemainAfterExit: inactive again once it succeeded.
    result = show(sd, "nvidia-cdi-refresh.service", "Result")
    assert result == "success", result


# A tree where /lib is not /usr/lib (as on a system without merged /usr), made in place from the
# merged tree: /lib and /lib/systemd hold links to what /usr/lib has, /lib/systemd/system is a
# directory of its own. Debian 12's systemd 252 searches /lib/systemd/system after /usr/lib's
# (built with split-usr: its libsystemd-shared names /lib/systemd/system-preset and
# /lib/systemd/system-generators), and drops it only while it resolves to /usr/lib/systemd/system.
SPLIT_LIB = """
import os, sys
os.mkdir("/lib.split")
for parent, keep in (("", "systemd"), ("/systemd", "system")):
    for e in os.listdir("/usr/lib" + parent):
        if e != keep:
            os.symlink("/usr/lib" + parent + "/" + e, "/lib.split" + parent + "/" + e)
    os.mkdir("/lib.split" + parent + "/" + keep)
os.rename(sys.argv[1], "/lib.split/systemd/system/nvidia-persistenced.service")
os.unlink("/lib")
os.rename("/lib.split", "/lib")
"""
MERGE_LIB = """
import os, shutil
os.rename("/lib", "/lib.split")
os.symlink("usr/lib", "/lib")
shutil.rmtree("/lib.split")
"""
UNIT = "nvidia-persistenced.service"


def test_persistence_mode_drop_in_takes_effect_over_a_unit_under_lib(sd: SystemdTarget) -> None:
    """L3: the packaged unit (stand-in: tests/ansible/standin/systemd/nvidia-persistenced.service,
    sources in it) lies only in /lib/systemd/system, which is not /usr/lib/systemd/system; the
    role finds it through systemd (FragmentPath), writes the drop-in, and after its daemon-reload
    systemd runs nvidia-persistenced with --persistence-mode. Runs last: /lib is merged again
    afterwards."""
    sd.lab.docker("cp", str(Path(__file__).parents[1] / "ansible/standin/systemd" / UNIT),
                  f"{sd.container}:/root/{UNIT}")  # fmt: skip
    sd.ssh("python3", "-c", shlex.quote(SPLIT_LIB), f"/root/{UNIT}")
    try:
        sd.ssh("systemctl", "daemon-reload")
        where = show(sd, UNIT, "FragmentPath")
        assert where == f"/lib/systemd/system/{UNIT}", (
            f"systemd should read the unit from /lib/systemd/system: {where!r}")
        usr = sd.ssh("test", "-e", f"/usr/lib/systemd/system/{UNIT}", check=False)
        assert usr.returncode != 0, "the unit must not be under /usr/lib/systemd/system too"
        res = sd.play(play_path("systemd_persistenced.yml"), "persistenced")
        assert res.rc == 0 and res.host()["failed"] == 0, res.tail()
        argv = show(sd, UNIT, "ExecStart")
        want = ("argv[]=/usr/bin/nvidia-persistenced --user nvidia-persistenced "
                "--persistence-mode --verbose ;")  # fmt: skip
        assert want in argv, f"ExecStart after the role: {argv}"
        dropins = show(sd, UNIT, "DropInPaths")
        assert "gpufleet-persistence-mode.conf" in dropins, dropins
    finally:
        sd.ssh("python3", "-c", shlex.quote(MERGE_LIB), check=False)
        sd.ssh("rm", "-rf", f"/etc/systemd/system/{UNIT}.d", check=False)
        sd.ssh("systemctl", "daemon-reload", check=False)
