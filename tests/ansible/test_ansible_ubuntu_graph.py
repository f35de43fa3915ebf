"""The roles against NVIDIA's and Docker's apt repositories as they really are (issue 11).

A second debootstrap target with an Ubuntu 24.04 identity (/etc/os-release; apt and dpkg are Debian
12's) gets local repositories that reproduce NVIDIA's CUDA repository and Docker's package graphs
(tests/ansible/graphs/ubuntu2404.toml: names, versions, Depends with >=, Conflicts, pinning
packages) and the sources a host set up the documented way already has (cuda-keyring's list,
nvidia-container-toolkit.list, docker.sources, each with its own Signed-By). Then: --check on the
new host, converge the full driver at 580.A (its closure holds NVIDIA's EGL platform libraries at
versions of their own), a busy host refused before anything changes, upgrade_driver.yml to 580.B
(revision -1ubuntu1, expectations refreshed), to 580.N that has no pinning package (the role writes
the pin itself), and to 590 with the compute-only set; exact versions, holds and the fabric manager
checked. Every package an assertion names is one whose asserted facts are sourced in the graph.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pkggraph
import pytest
import roletarget as tg
import yaml

from conftest import PlayResult, _write_inventory, run_playbook
from harness.processes import stop_pid
from paths import COLLECTION

pytestmark = [pytest.mark.ansible, pytest.mark.slow]

SITE = "playbooks/site.yml"
UPGRADE = "playbooks/upgrade_driver.yml"
REINSTALL = "playbooks/remediate_reinstall.yml"
TAGS = ("--tags", "nvidia_driver,container_runtime,nvidia_container_toolkit")
GRAPH = pkggraph.load("ubuntu2404")
# A and B have version pinning packages (from 580.105.08 on); N has none; B carries -1ubuntu1.
A, B, N, C = "580.105.08", "580.126.09", "580.95.05", "590.44.01"
EGL = {"libnvidia-egl-wayland1": "1:1.1.20-1ubuntu1", "libnvidia-egl-gbm1": "1.1.2.1-1ubuntu1",
       "libnvidia-egl-xcb1": "1.0.3-1ubuntu1", "libnvidia-egl-xlib1": "1.0.3-1ubuntu1"}


@dataclass
class GraphLab:
    target: tg.Target
    repos: pkggraph.GraphRepos
    inventory: Path
    logdir: Path

    def play(self, playbook: str, name: str, *args: str, **extra: object) -> PlayResult:
        return run_playbook(
            COLLECTION / playbook,
            self.inventory,
            self.logdir,
            name,
            *args,
            extra_vars=self.vars() | extra,
        )

    def vars(self) -> dict[str, object]:
        return {
            "nvidia_driver_source": "cuda_repo",
            "nvidia_driver_cuda_repo_url": self.repos.cuda_url.rstrip("/"),
            "nvidia_driver_cuda_repo_key_url": self.repos.key_url,
            "nvidia_driver_branch": "580",
            "nvidia_driver_version": A,
            "nvidia_driver_kernel_modules": "open",
            "nvidia_driver_package_set": "full",
            "nvidia_driver_fabricmanager": "enabled",
            "nvidia_driver_kernel_headers_required": False,
            "nvidia_driver_kernel_headers_install": False,
            "container_runtime_engine": "docker",
            "container_runtime_source": "docker_repo",
            "container_runtime_docker_repo_url": self.repos.docker_url,
            "container_runtime_docker_repo_key_url": self.repos.key_url,
            "nvidia_container_toolkit_repo_url": self.repos.toolkit_url,
            "nvidia_container_toolkit_repo_key_url": self.repos.key_url,
            "nvidia_container_toolkit_version": "1.19.1",
        }

    def dpkg(self) -> dict[str, str]:
        out = self.target.chroot(
            "dpkg-query", "-W", "-f=${db:Status-Abbrev} ${Package} ${Version}\n"
        ).stdout
        return {f[1]: f[2] for f in (line.split() for line in out.splitlines()) if f[0][1] == "i"}

    def holds(self) -> set[str]:
        return set(self.target.chroot("apt-mark", "showhold").stdout.split())


@pytest.fixture(scope="module")
def graph_lab() -> Iterator[GraphLab]:
    if os.geteuid() != 0 or shutil.which("debootstrap") is None:
        pytest.fail("role tests need root and debootstrap (scripts/setup.sh installs it)")
    workdir = Path(f"/var/tmp/gpufleet-graph-tests-{os.getpid()}")
    shutil.rmtree(workdir, ignore_errors=True)
    logdir = workdir / "logs"
    logdir.mkdir(parents=True)
    gnupg = workdir / "gnupg"
    t: tg.Target | None = None
    mirror: tg.Mirror | None = None
    try:
        addr = tg.free_address()
        mirror = tg.build_mirror(workdir / "mirror", gnupg, addr)
        gpg = ["gpg", "--homedir", str(gnupg), "--batch", "--yes"]
        repos = pkggraph.build(workdir / "mirror", mirror, gpg, "ubuntu2404", "noble")
        tg.serve_mirror(mirror, logdir / "mirror-http.log")
        t = tg.prepare_target(workdir, addr)
        # Every package comes from the local repositories: Debian's archive stays out (fast).
        (t.root / "etc/apt/sources.list").write_text("")
        (t.root / "etc/os-release").unlink(missing_ok=True)
        (t.root / "usr/lib/os-release").write_text(pkggraph.OS_RELEASE["ubuntu2404"])
        (t.root / "etc/os-release").symlink_to("../usr/lib/os-release")
        pkggraph.documented_sources(t, repos, "noble", mirror.root / "key.asc")
        # A DGX OS package the role did not install (and must not hold).
        dgx = t.root / "tmp/nvidia-system-core.deb"
        shutil.copy(repos.debs["nvidia-system-core=25.09.1"], dgx)
        t.chroot("dpkg", "-i", "/tmp/nvidia-system-core.deb")
        tg.start_sshd(t, logdir / "sshd.log")
        inventory = workdir / "inventory.json"
        _write_inventory(inventory, t)
        yield GraphLab(t, repos, inventory, logdir)
    finally:
        if t is not None:
            t.stop()
            tg.release_address(t.addr)
        if mirror is not None:
            mirror.stop()
        if gnupg.exists():
            subprocess.run(["gpgconf", "--homedir", str(gnupg), "--kill", "gpg-agent"], check=False)
        keep = Path(os.environ.get("GPUFLEET_GRAPH_TEST_LOGS", "/var/tmp/gpufleet-graph-test-logs"))
        shutil.rmtree(keep, ignore_errors=True)
        if logdir.exists():
            shutil.copytree(logdir, keep)
        shutil.rmtree(workdir, ignore_errors=True)


def test_check_mode_on_a_new_host_succeeds(graph_lab: GraphLab) -> None:
    """Defect 13: --check on a host without NVIDIA's repository: the role's source is not written in
    check mode, so there is no candidate yet; the package checks must wait, not fail."""
    cuda_list = graph_lab.target.root / "etc/apt/sources.list.d/cuda-ubuntu2404-x86_64.list"
    aside = cuda_list.with_suffix(".aside")
    cuda_list.rename(aside)
    try:
        res = graph_lab.play(SITE, "check-new-host", "--check", "--tags", "nvidia_driver")
    finally:
        aside.rename(cuda_list)
    assert res.rc == 0 and res.host()["failed"] == 0, res.tail()
    assert "SKIPPED package checks and installation" in res.flat, res.tail()
    assert "nvidia-open-580" not in graph_lab.dpkg()
    assert not (cuda_list.parent / "gpufleet-nvidia-driver.sources").exists()


STALE_CDI = "---\ncdiVersion: 0.5.0\nkind: nvidia.com/gpu\n# generated for driver 570.124.06\n"


@pytest.fixture(scope="module")
def converged(graph_lab: GraphLab) -> PlayResult:
    # A static CDI spec as an older gpufleet (or nvidia-ctk cdi generate by hand) left it.
    cdi = graph_lab.target.root / "etc/cdi"
    cdi.mkdir(parents=True, exist_ok=True)
    (cdi / "nvidia.yaml").write_text(STALE_CDI)
    return graph_lab.play(SITE, "converge-580a", *TAGS)


def _want(version: str, names: list[str]) -> dict[str, str]:
    """name -> version NVIDIA's repo gives it, for packages whose name and version are sourced."""
    for name in names:
        assert pkggraph.sourced(GRAPH, name, "name", "version"), f"{name}: an inferred fact"
    fm = {n: f"{version}-1" for n in ("nvidia-fabricmanager", "libnvidia-nscq", "nvidia-imex")}
    return {n: fm.get(n, pkggraph._revision(GRAPH, version)) for n in names}


# Issue 23 L7: NSCQ and IMEX are pinned and held next to the fabric manager.
FULL_580 = ["nvidia-open-580", "nvidia-driver-580-open", "libnvidia-compute-580",
            "libnvidia-gl-580", "nvidia-utils-580", "nvidia-dkms-580-open", "nvidia-fabricmanager",
            "libnvidia-nscq", "nvidia-imex"]


def _driver_580(version: str) -> dict[str, str]:
    return _want(version, FULL_580)


def test_converge_reuses_the_documented_sources(converged: PlayResult, graph_lab: GraphLab) -> None:
    """Defect 1: cuda-keyring's list, nvidia-container-toolkit.list and docker.sources are reused,
    so apt never sees one URI with two Signed-By values."""
    assert converged.rc == 0 and converged.host()["failed"] == 0, converged.tail()
    lists = graph_lab.target.root / "etc/apt/sources.list.d"
    assert sorted(p.name for p in lists.iterdir() if p.name.startswith("gpufleet-")) == []
    graph_lab.target.chroot("apt-get", "-qq", "update")
    assert graph_lab.dpkg()["docker-ce"] == "5:29.6.1-1~ubuntu.24.04~noble"
    assert graph_lab.dpkg()["containerd.io"] == "2.2.6-1~ubuntu.24.04~noble"


def test_exact_version_pins_every_driver_package(
    converged: PlayResult, graph_lab: GraphLab
) -> None:
    """Defect 4 and H1: the pinning package holds the driver's packages at the requested version;
    the EGL platform libraries the full driver pulls in keep their own versions, and the role's
    version check (only packages built from the driver's source) accepts that."""
    assert converged.rc == 0, converged.tail()
    have = graph_lab.dpkg()
    assert {n: have.get(n) for n in _driver_580(A)} == _driver_580(A)
    for name in EGL:
        assert pkggraph.sourced(GRAPH, name, "version")
    assert {n: have.get(n) for n in EGL} == EGL
    assert have.get(f"nvidia-driver-pinning-{A}") == f"{A}-1"
    assert (graph_lab.target.root / "etc/apt/preferences.d/nvidia-driver-pin").exists()


def test_holds_only_what_the_role_installed(converged: PlayResult, graph_lab: GraphLab) -> None:
    """Defect 10: the role's packages are held, DGX OS's nvidia-system-core is not."""
    assert converged.rc == 0, converged.tail()
    holds = graph_lab.holds()
    assert "nvidia-system-core" not in holds
    assert set(_driver_580(A)) <= holds, holds


def test_persistence_mode_is_turned_on(converged: PlayResult, graph_lab: GraphLab) -> None:
    """Defect 9: the packaged unit's --no-persistence-mode is overridden by a drop-in."""
    assert converged.rc == 0, converged.tail()
    dropin = graph_lab.target.root / (
        "etc/systemd/system/nvidia-persistenced.service.d/gpufleet-persistence-mode.conf"
    )
    lines = dropin.read_text().splitlines()
    assert "ExecStart=" in lines
    daemon = "/usr/bin/nvidia-persistenced --user nvidia-persistenced"
    assert f"ExecStart={daemon} --persistence-mode --verbose" in lines


def test_toolkit_refreshes_cdi_itself(converged: PlayResult, graph_lab: GraphLab) -> None:
    """Defect 14: toolkit >= 1.18 keeps /var/run/cdi/nvidia.yaml current (nvidia-cdi-refresh); a
    static /etc/cdi/nvidia.yaml would go stale after the driver upgrades below."""
    assert converged.rc == 0, converged.tail()
    assert not (graph_lab.target.root / "etc/cdi/nvidia.yaml").exists()
    assert (graph_lab.target.root / "etc/systemd/system/nvidia-cdi-refresh.path").exists()
    assert "SKIPPED enabling nvidia-cdi-refresh.path" in converged.flat, converged.tail()


def test_a_busy_host_is_refused_before_any_package_changes(
    converged: PlayResult, graph_lab: GraphLab
) -> None:
    """H3: GPU work runs and reboots are not allowed (site.yml): the version change is refused up
    front, not after the new userspace met the old kernel module."""
    assert converged.rc == 0, converged.tail()
    gpu = tg.start_gpu_process(graph_lab.target)
    try:
        res = graph_lab.play(SITE, "busy-580b", *TAGS, nvidia_driver_version=B)
    finally:
        stop_pid(gpu)
    assert res.rc != 0 and res.host()["failed"] == 1, res.tail()
    assert "Refused before installing: " in res.flat, res.tail()
    assert f"GPU processes: {gpu.pid} sleep" in res.flat, res.tail()
    assert 'fail with "Driver/library version mismatch"' in res.flat, res.tail()
    have = graph_lab.dpkg()
    assert {n: have.get(n) for n in _driver_580(A)} == _driver_580(A)
    assert f"nvidia-driver-pinning-{B}" not in have


def test_reinstall_rung_restores_the_driver_and_fabric_manager(
    converged: PlayResult, graph_lab: GraphLab
) -> None:
    """Issue 26: playbooks/remediate_reinstall.yml, the ladder's rung after a reboot. A driver
    library gone from disk (a crash mid-update, a full disk) comes back from its package; every
    driver package and the fabric manager are reinstalled at the driver's version (dpkg's own
    log); versions and holds stay. A busy host and check mode change nothing."""
    assert converged.rc == 0, converged.tail()
    lib = graph_lab.target.root / f"usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{A}"
    lib.unlink()
    dpkg_log = graph_lab.target.root / "var/log/dpkg.log"
    logged = len(dpkg_log.read_text().splitlines())
    gpu = tg.start_gpu_process(graph_lab.target)
    try:
        busy = graph_lab.play(REINSTALL, "reinstall-busy")
    finally:
        stop_pid(gpu)
    assert busy.rc != 0 and f"still runs GPU processes ({gpu.pid} sleep)" in busy.flat, busy.tail()
    dry = graph_lab.play(REINSTALL, "reinstall-check", "--check")
    assert dry.rc == 0 and dry.host()["failed"] == 0, dry.tail()
    assert not lib.exists() and len(dpkg_log.read_text().splitlines()) == logged
    res = graph_lab.play(REINSTALL, "reinstall")
    assert res.rc == 0 and res.host()["failed"] == 0, res.tail()
    assert lib.read_text() == "stand-in\n"
    assert "no NVIDIA GPU on the PCI bus" in res.flat, res.tail()
    again = [line.split()[3:] for line in dpkg_log.read_text().splitlines()[logged:]
             if line.split()[2:3] == ["upgrade"]]
    want = _driver_580(A)
    for name in ("libnvidia-compute-580", "nvidia-fabricmanager"):
        assert [f"{name}:amd64", want[name], want[name]] in again, again
    have = graph_lab.dpkg()
    assert {n: have.get(n) for n in want} == want
    assert set(want) <= graph_lab.holds()


def test_upgrade_within_the_branch_moves_every_held_package(
    converged: PlayResult, graph_lab: GraphLab
) -> None:
    """Defect 3 and H6: 580.A -> 580.B (a -1ubuntu1 revision) through upgrade_driver.yml, with the
    dependencies held, and the health check's expectations follow the new version. Issue 23 L2: the
    record of the role's holds is gone (a host converged by an older gpufleet), so only the driver's
    installed closure is released; an administrator's hold on nvidia-system-core stays."""
    assert converged.rc == 0, converged.tail()
    expect = graph_lab.target.root / "etc/gpufleet/expect.yml"
    expect.parent.mkdir(parents=True, exist_ok=True)
    expect.write_text(f"nvidia_driver_version: {A}\n")
    (graph_lab.target.root / "var/lib/gpufleet/nvidia-driver-held").unlink()
    graph_lab.target.chroot("apt-mark", "hold", "nvidia-system-core")
    try:
        res = graph_lab.play(UPGRADE, "upgrade-580b", nvidia_driver_version=B)
        admin_hold_kept = "nvidia-system-core" in graph_lab.holds()
    finally:
        graph_lab.target.chroot("apt-mark", "unhold", "nvidia-system-core")
    assert admin_hold_kept, res.tail()
    assert res.rc == 0 and res.host()["failed"] == 0, res.tail()
    have = graph_lab.dpkg()
    assert {n: have.get(n) for n in _driver_580(B)} == _driver_580(B)
    assert _driver_580(B)["libnvidia-compute-580"] == f"{B}-1ubuntu1"
    assert f"nvidia-driver-pinning-{A}" not in have
    assert have[f"nvidia-driver-pinning-{B}"] == f"{B}-1"
    assert set(_driver_580(B)) <= graph_lab.holds()
    assert yaml.safe_load(expect.read_text())["nvidia_driver_version"] == B


def test_a_version_without_pinning_package_gets_the_equivalent_pin(
    converged: PlayResult, graph_lab: GraphLab
) -> None:
    """M18: NVIDIA has no pinning package for 580.N: the role writes the pin itself (a downgrade
    here, which the pin's priority 1000 allows) instead of failing on a missing package."""
    assert converged.rc == 0, converged.tail()
    res = graph_lab.play(UPGRADE, "upgrade-580n", nvidia_driver_version=N)
    assert res.rc == 0 and res.host()["failed"] == 0, res.tail()
    assert f"NO PINNING PACKAGE nvidia-driver-pinning-{N}" in res.flat, res.tail()
    have = graph_lab.dpkg()
    assert {n: have.get(n) for n in _driver_580(N)} == _driver_580(N)
    assert not [n for n in have if n.startswith("nvidia-driver-pinning-")], have
    pin = graph_lab.target.root / "etc/apt/preferences.d/gpufleet-nvidia-driver-pin"
    assert f"Pin: version {N}-*" in pin.read_text().splitlines()


def test_upgrade_to_590_renames_the_packages(converged: PlayResult, graph_lab: GraphLab) -> None:
    """Defect 8: 590 drops the branch from the names; FM follows exactly; the role's own pin gives
    way to the pinning package."""
    assert converged.rc == 0, converged.tail()
    res = graph_lab.play(UPGRADE, "upgrade-590", nvidia_driver_version=C,
                         nvidia_driver_branch="590")
    assert res.rc == 0 and res.host()["failed"] == 0, res.tail()
    have = graph_lab.dpkg()
    want = _want(C, ["nvidia-open", "nvidia-driver-open", "libnvidia-compute", "libnvidia-gl",
                     "nvidia-utils", "nvidia-dkms-open", "nvidia-fabricmanager", "libnvidia-nscq",
                     "nvidia-imex"])
    assert {n: have.get(n) for n in want} == want
    assert have[f"nvidia-driver-pinning-{C}"] == f"{C}-1"
    assert not (graph_lab.target.root / "etc/apt/preferences.d/gpufleet-nvidia-driver-pin").exists()
    holds = graph_lab.holds()
    assert set(want) <= holds and "nvidia-system-core" not in holds, holds


def test_compute_only_is_the_default_and_installs_no_desktop_stack(
    converged: PlayResult, graph_lab: GraphLab
) -> None:
    """H1: NVIDIA's compute-only ("headless") set, the default, on a host without a driver: no
    GL/EGL/X packages, every driver package at the requested version."""
    assert converged.rc == 0, converged.tail()
    graph_lab.target.chroot("sh", "-c", "apt-get -qq -y --allow-change-held-packages purge "
                            "$(dpkg-query -W -f='${Package}\\n' 'nvidia-*' 'libnvidia-*' "
                            "'xserver-xorg-video-nvidia*' | grep -v '^nvidia-system-core$')")
    (graph_lab.target.root / "var/lib/gpufleet/nvidia-driver-held").unlink(missing_ok=True)
    extra = {k: v for k, v in graph_lab.vars().items() if k != "nvidia_driver_package_set"}
    extra |= {"nvidia_driver_version": C, "nvidia_driver_branch": "590"}
    res = run_playbook(COLLECTION / SITE, graph_lab.inventory,
                       graph_lab.logdir, "compute-590", "--tags", "nvidia_driver", extra_vars=extra)
    assert res.rc == 0 and res.host()["failed"] == 0, res.tail()
    have = graph_lab.dpkg()
    want = _want(C, ["libnvidia-compute", "nvidia-dkms-open", "nvidia-utils",
                     "nvidia-compute-utils", "nvidia-fabricmanager"])
    assert {n: have.get(n) for n in want} == want
    desktop = [n for n in have if n.startswith(("libnvidia-gl", "libnvidia-egl", "xserver-xorg"))]
    assert desktop == [] and "nvidia-open" not in have, desktop
