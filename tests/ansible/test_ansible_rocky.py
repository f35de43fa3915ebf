"""The nvidia_driver role on Rocky Linux 9 where dnf really runs (issue 24; review items H4, H5,
M19, M20): a target whose facts say os_family RedHat / pkg_mgr dnf (tests/ansible/rheltarget.py),
rpm repositories shaped like NVIDIA's cuda-rhel9-x86_64 (module streams, driver subpackages at one
epoch:version, meta-packages requiring the driver with ">="), EPEL 9 and Rocky's repos
(tests/ansible/graphs/rpm/rocky9.toml, built by rpmgraph.py), reached over SSH by ansible-playbook.
Issue 26's reinstall rung (playbooks/remediate_reinstall.yml) runs on the converged host too.
Assertions name only packages whose asserted facts are sourced (rpmgraph.sourced).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import rheltarget as rt
import roletarget as tg
import rpmgraph

from conftest import PlayResult, _write_inventory, run_playbook
from harness.processes import stop_pid
from paths import COLLECTION

pytestmark = [pytest.mark.ansible, pytest.mark.slow]

SITE = "playbooks/site.yml"
UPGRADE = "playbooks/upgrade_driver.yml"
REINSTALL = "playbooks/remediate_reinstall.yml"
TAGS = ("--tags", "nvidia_driver")
ENGINE_TAGS = ("--tags", "container_runtime,nvidia_container_toolkit")
GRAPH = rpmgraph.load()
A, B, C = "580.95.05", "580.105.08", "590.44.01"
DRIVER = ["nvidia-open", "nvidia-driver", "nvidia-driver-libs", "nvidia-driver-cuda",
          "nvidia-driver-cuda-libs", "nvidia-kmod-common", "kmod-nvidia-open-dkms"]
# What the role owns and locks at the driver's version: DRIVER's closure adds nvidia-persistenced.
OWNED = [*DRIVER, "nvidia-persistenced", "nvidia-fabricmanager"]


@dataclass
class RockyLab:
    target: tg.Target
    repos: rpmgraph.RpmRepos
    inventory: Path
    logdir: Path

    def play(self, name: str, *args: str, **extra: object) -> PlayResult:
        """site.yml, the driver role only unless args name other --tags."""
        tags = () if "--tags" in args else TAGS
        return run_playbook(COLLECTION / SITE, self.inventory,
                            self.logdir, name, *tags, *args, extra_vars=self.vars() | extra)

    def vars(self) -> dict[str, object]:
        return {
            "nvidia_driver_source": "cuda_repo",
            "nvidia_driver_cuda_repo_url": self.repos.url("cuda").rstrip("/"),
            "nvidia_driver_cuda_repo_key_url": f"{self.repos.base}/key.asc",
            "nvidia_driver_branch": "580",
            "nvidia_driver_version": A,
            "nvidia_driver_kernel_modules": "open",
            "nvidia_driver_fabricmanager": "enabled",
            "nvidia_driver_kernel_headers_required": False,
            "nvidia_driver_kernel_headers_install": False,
            "nvidia_driver_epel_enabled": True,
            "container_runtime_engine": "docker",
            "container_runtime_source": "docker_repo",
            "container_runtime_docker_repo_url": f"{self.repos.base}/docker/linux/rhel",
            "container_runtime_docker_repo_key_url": f"{self.repos.base}/key.asc",
            "nvidia_container_toolkit_repo_url": self.repos.url("toolkit").rstrip("/"),
            "nvidia_container_toolkit_repo_key_url": f"{self.repos.base}/key.asc",
            "nvidia_container_toolkit_version": "1.19.1",
        }

    def rpms(self) -> dict[str, str]:
        return rt.rpms(self.target)


@pytest.fixture(scope="module")
def rocky_lab() -> Iterator[RockyLab]:
    yield from lab(9)


def lab(major: int) -> Iterator[RockyLab]:
    """A Rocky `major` target and its repositories; everything started is stopped by PID on every
    exit path (the fixture's generator is closed on failure and Ctrl-C too)."""
    if os.geteuid() != 0 or not all(shutil.which(t) for t in ("debootstrap", "rpmbuild")):
        pytest.fail("RHEL role tests need root, debootstrap, rpmbuild (scripts/setup.sh)")
    workdir = Path(f"/var/tmp/gpufleet-rocky{major}-tests-{os.getpid()}")
    shutil.rmtree(workdir, ignore_errors=True)
    logdir = workdir / "logs"
    logdir.mkdir(parents=True)
    gnupg = workdir / "gnupg"
    t: tg.Target | None = None
    mirror: tg.Mirror | None = None
    addr = ""
    try:
        addr = tg.free_address()
        mirror = rpmgraph.new_mirror(workdir / "mirror", gnupg, addr)
        repos = rpmgraph.build(workdir / "mirror", mirror, gnupg, major)
        tg.serve_mirror(mirror, logdir / "mirror-http.log")
        t = rt.prepare(workdir, addr, repos, mirror.root / "key.asc")
        # GPUDirect Storage's nvidia-fs, installed by someone else: the role must not lock it (M19).
        t.chroot("dnf", "-q", "-y", "--repofrompath", f"cuda,{repos.url('cuda')}", "install",
                 "nvidia-fs")
        # Rocky's podman (with runc), which Docker's RHEL guide removes before docker-ce.
        t.chroot("dnf", "-q", "-y", "install", "podman")
        tg.start_sshd(t, logdir / "sshd.log")
        inventory = workdir / "inventory.json"
        _write_inventory(inventory, t)
        yield RockyLab(t, repos, inventory, logdir)
    finally:
        if t is not None:
            t.stop()
        if addr:
            tg.release_address(addr)
        if mirror is not None:
            mirror.stop()
        if gnupg.exists():
            subprocess.run(["gpgconf", "--homedir", str(gnupg), "--kill", "gpg-agent"], check=False)
        keep = Path(os.environ.get("GPUFLEET_ROCKY_TEST_LOGS", "/var/tmp/gpufleet-rocky-test-logs"))
        keep = keep.with_name(f"{keep.name}-{major}")
        shutil.rmtree(keep, ignore_errors=True)
        if logdir.exists():
            shutil.copytree(logdir, keep)
        shutil.rmtree(workdir, ignore_errors=True)


def _at(version: str, names: list[str], el: str = "el9") -> dict[str, str]:
    for name in names:
        assert rpmgraph.sourced(GRAPH, name, "name", "version"), f"{name}: an inferred fact"
    return {n: f"3:{version}-1.{el}" for n in names}


def test_facts_say_rocky_with_dnf(rocky_lab: RockyLab) -> None:
    """The target is what the roles' RHEL branch expects: Ansible says RedHat/dnf."""
    res = run_playbook(Path(__file__).resolve().parent / "playbooks" / "facts_platform.yml",
                       rocky_lab.inventory, rocky_lab.logdir, "facts")
    assert res.rc == 0, res.tail()
    assert "GPUFLEET_FACTS Rocky 9 RedHat dnf" in res.flat, res.tail()


def test_check_mode_on_a_new_host_succeeds(rocky_lab: RockyLab) -> None:
    """M20: --check before NVIDIA's repo exists: repo and stream are not written in check mode,
    so the package tasks wait and say so instead of failing on "no package nvidia-open-580.*"."""
    res = rocky_lab.play("check-new-host", "--check")
    assert res.rc == 0 and res.host()["failed"] == 0, res.tail()
    assert "SKIPPED package checks and installation" in res.flat, res.tail()
    assert "nvidia-open" not in rocky_lab.rpms()
    assert not (rocky_lab.target.root / "etc/yum.repos.d/gpufleet-nvidia-driver.repo").exists()


def test_check_mode_toolkit_and_docker_on_a_new_host(rocky_lab: RockyLab) -> None:
    """M20 for the toolkit and the engine: their repositories are not written in check mode; the
    installs wait and say so, nothing is removed (podman stays)."""
    res = rocky_lab.play("check-new-host-engine", "--check", *ENGINE_TAGS)
    assert res.rc == 0 and res.host()["failed"] == 0, res.tail()
    assert "SKIPPED engine installation" in res.flat, res.tail()
    assert "SKIPPED toolkit installation" in res.flat, res.tail()
    have = rocky_lab.rpms()
    assert "podman" in have and "docker-ce" not in have, have


def test_without_epel_the_role_refuses_naming_epel_and_crb(rocky_lab: RockyLab) -> None:
    """H5: the DKMS stream needs dkms from EPEL (and EPEL needs CRB); without them the role stops
    before the transaction, naming both, and installs nothing."""
    res = rocky_lab.play("no-epel", nvidia_driver_epel_enabled=False)
    assert res.rc != 0 and res.host()["failed"] == 1, res.tail()
    assert "needs the dkms package from EPEL" in res.flat and "CRB" in res.flat, res.tail()
    assert "nvidia_driver_epel_enabled=true" in res.flat, res.tail()
    have = rocky_lab.rpms()
    assert not [n for n in DRIVER if n in have], have


@pytest.fixture(scope="module")
def converged(rocky_lab: RockyLab) -> PlayResult:
    return rocky_lab.play("converge-580a")


def test_converge_enables_crb_and_epel(converged: PlayResult, rocky_lab: RockyLab) -> None:
    """H5: with nvidia_driver_epel_enabled the role enables CRB (dnf config-manager) and installs
    EPEL's release package; dkms then comes from EPEL."""
    assert converged.rc == 0 and converged.host()["failed"] == 0, converged.tail()
    repo = (rocky_lab.target.root / "etc/yum.repos.d/rocky.repo").read_text()
    crb = repo[repo.index("[crb]"):]
    assert "enabled=1" in crb.split("\n[")[0], crb
    have = rocky_lab.rpms()
    assert "epel-release" in have and "dkms" in have, have


def test_exact_version_installs_every_subpackage_at_it(
    converged: PlayResult, rocky_lab: RockyLab
) -> None:
    """H4: nvidia-open-580.A requires the driver with ">=", and the stream has 580.B: every driver
    subpackage and the fabric manager end at 580.A, not the newest of the stream."""
    assert converged.rc == 0, converged.tail()
    have = rocky_lab.rpms()
    assert {n: have.get(n) for n in DRIVER} == _at(A, DRIVER)
    assert rpmgraph.sourced(GRAPH, "nvidia-fabricmanager", "name", "version")
    assert have.get("nvidia-fabricmanager") == f"{A}-1.el9"


def test_locks_only_what_the_role_installed(converged: PlayResult, rocky_lab: RockyLab) -> None:
    """M19: versionlock entries for the driver's closure, by exact name; GDS's nvidia-fs (matching
    nvidia-*) is not locked."""
    assert converged.rc == 0, converged.tail()
    locks = rt.locks(rocky_lab.target)
    names = {rpmgraph.lock_name(e) for e in locks}
    assert set(DRIVER) | {"nvidia-fabricmanager", "nvidia-persistenced"} <= names, locks
    assert "nvidia-fs" not in names, locks
    assert all(A in e for e in locks), locks


def test_second_run_changes_nothing(converged: PlayResult, rocky_lab: RockyLab) -> None:
    assert converged.rc == 0, converged.tail()
    res = rocky_lab.play("idempotence-580a")
    assert res.rc == 0 and res.host()["changed"] == 0, res.tail()


def test_a_busy_host_is_refused_before_any_package_changes(
    converged: PlayResult, rocky_lab: RockyLab
) -> None:
    """H3 on dnf: GPU work runs and site.yml may not reboot: the version change is refused before
    the stream or any package moves, not after new userspace met the old kernel module."""
    assert converged.rc == 0, converged.tail()
    gpu = tg.start_gpu_process(rocky_lab.target)
    try:
        res = rocky_lab.play("busy-580b", nvidia_driver_version=B)
    finally:
        stop_pid(gpu)
    assert res.rc != 0 and res.host()["failed"] == 1, res.tail()
    assert "Refused before installing: " in res.flat, res.tail()
    assert f"GPU processes: {gpu.pid} sleep" in res.flat, res.tail()
    have = rocky_lab.rpms()
    assert {n: have.get(n) for n in DRIVER} == _at(A, DRIVER)


@dataclass(frozen=True)
class Damaged:
    """The converged host with a driver file deleted, and what was there before any reinstall."""

    path: Path
    installed: dict[str, str]  # NAME-VERSION-RELEASE -> INSTALLTIME
    locks: list[str]


def _installed(rocky_lab: RockyLab) -> dict[str, str]:
    out = rocky_lab.target.chroot(
        "rpm", "-qa", "--queryformat", "%{NAME}-%{VERSION}-%{RELEASE} %{INSTALLTIME}\n").stdout
    return dict(line.split() for line in out.splitlines())


@pytest.fixture(scope="module")
def damaged(converged: PlayResult, rocky_lab: RockyLab) -> Damaged:
    """nvidia-smi deleted from the converged host (a crash mid-update, a full disk): the file
    nvidia-driver-cuda ships (driver-spec), which the stand-in ships at the same path."""
    assert converged.rc == 0, converged.tail()
    assert rpmgraph.sourced(GRAPH, "nvidia-driver-cuda", "name", "files")
    smi = rocky_lab.target.root / "usr/bin/nvidia-smi"
    smi.unlink()
    return Damaged(smi, _installed(rocky_lab), rt.locks(rocky_lab.target))


def _reinstall(rocky_lab: RockyLab, name: str, *args: str) -> PlayResult:
    return run_playbook(COLLECTION / REINSTALL, rocky_lab.inventory, rocky_lab.logdir, name,
                        *args, extra_vars=rocky_lab.vars())


def test_reinstall_rung_refuses_a_busy_host(damaged: Damaged, rocky_lab: RockyLab) -> None:
    """Issue 26 on dnf: a process holds /dev/nvidia0, so remediate_reinstall.yml stops before the
    role runs: no package is reinstalled, the deleted file stays deleted, the locks stay."""
    gpu = tg.start_gpu_process(rocky_lab.target)
    try:
        res = _reinstall(rocky_lab, "reinstall-busy")
    finally:
        stop_pid(gpu)
    assert res.rc != 0 and f"still runs GPU processes ({gpu.pid} sleep)" in res.flat, res.tail()
    assert "TASK [Reinstall the driver" not in res.output, res.tail()
    assert _installed(rocky_lab) == damaged.installed
    assert not damaged.path.exists()
    assert rt.locks(rocky_lab.target) == damaged.locks


def test_reinstall_rung_does_not_count_dcgm_exporter_and_imex_as_gpu_work(
    damaged: Damaged, rocky_lab: RockyLab
) -> None:
    """Issue 39 N6: dcgm-exporter and nvidia-imex hold /dev/nvidia0 (the driver role stops both
    around a reload): the rung's busy check passes them (--check: nothing changes), where it
    refused them as "still runs GPU processes"."""
    procs = [tg.start_gpu_process(rocky_lab.target, c) for c in ("dcgm-exporter", "nvidia-imex")]
    try:
        res = _reinstall(rocky_lab, "reinstall-device-daemons", "--check")
    finally:
        for p in procs:
            stop_pid(p)
    assert "still runs GPU processes" not in res.flat, res.tail()
    assert res.rc == 0 and res.host()["failed"] == 0, res.tail()
    assert _installed(rocky_lab) == damaged.installed


def test_reinstall_rung_check_mode_changes_nothing(damaged: Damaged, rocky_lab: RockyLab) -> None:
    """--check runs the role up to its dnf reinstall, which check mode skips: no package is
    reinstalled, the deleted file stays deleted, the locks stay."""
    res = _reinstall(rocky_lab, "reinstall-check", "--check")
    assert res.rc == 0 and res.host()["failed"] == 0, res.tail()
    task = "TASK [gpufleet.gpu.nvidia_driver : Reinstall the driver packages]"
    assert task in res.output, res.tail()
    shown = [line for line in res.output.split(task, 1)[1].splitlines()[1:] if line.strip()]
    assert shown[0].startswith("skipping: "), shown[:3]
    assert _installed(rocky_lab) == damaged.installed
    assert not damaged.path.exists()
    assert rt.locks(rocky_lab.target) == damaged.locks


def test_reinstall_rung_restores_the_driver_and_fabric_manager(
    damaged: Damaged, rocky_lab: RockyLab
) -> None:
    """Issue 26 on dnf: remediate_reinstall.yml reinstalls exactly the packages the role owns,
    the fabric manager among them, at 580.A (each one's INSTALLTIME moves, no other package's);
    nvidia-smi is back, rpm -V is clean (the play's own check names every one), the versionlock
    entries are unchanged. Issue 39 N1: the DKMS package's scriptlets are NVIDIA's (%preun runs
    `dkms remove --all`, after the new copy's %post on a reinstall); DKMS still has the module
    installed for the running kernel, and a reboot of the target (a new boot with a GPU on its
    bus) loads the driver's module at 580.A. With a plain `dnf reinstall` the new boot has none."""
    res = _reinstall(rocky_lab, "reinstall")
    assert res.rc == 0 and res.host()["failed"] == 0, res.tail()
    assert damaged.path.exists(), res.tail()
    checked = f"rpm -V {' '.join(sorted(OWNED))}: every file matches its package"
    assert checked in res.flat, res.tail()
    assert "no NVIDIA GPU on the PCI bus" in res.flat, res.tail()
    after = _installed(rocky_lab)
    moved = {p for p in after.keys() | damaged.installed.keys()
             if after.get(p) != damaged.installed.get(p)}
    assert rpmgraph.sourced(GRAPH, "nvidia-fabricmanager", "name", "version")
    assert moved == {f"{n}-{A}-1.el9" for n in OWNED}, moved
    have = rocky_lab.rpms()
    assert {n: have.get(n) for n in DRIVER} == _at(A, DRIVER)
    assert have.get("nvidia-fabricmanager") == f"{A}-1.el9"
    assert rocky_lab.target.chroot("rpm", "-V", *OWNED).stdout == ""  # raises on a non-zero exit
    assert rt.locks(rocky_lab.target) == damaged.locks
    # Issue 39 N1: the reinstall ran the old kmod package's %preun (dkms remove --all) after the
    # new one's %post; the rung builds the module again, checks it, and the next boot loads it.
    assert rpmgraph.sourced(GRAPH, "kmod-nvidia-open-dkms", "scripts")
    kernel = os.uname().release
    built = f"DKMS module nvidia-open/{A} installed for {kernel} (modinfo -k)"
    assert built in res.flat, res.tail()
    status = rocky_lab.target.chroot("dkms", "status").stdout
    assert status == f"nvidia-open/{A}, {kernel}, x86_64: installed\n", status
    try:
        rt.boot(rocky_lab.target, rocky_lab.logdir / "sshd-boot-gpu.log", gpu=True)
        loaded = rt.loaded_driver(rocky_lab.target)
    finally:
        rt.boot(rocky_lab.target, rocky_lab.logdir / "sshd-boot-again.log")
    assert f"Kernel Module for x86_64  {A}  " in loaded, f"the next boot loaded: {loaded!r}"


def _upgrade(rocky_lab: RockyLab, name: str, **extra: object) -> PlayResult:
    return run_playbook(COLLECTION / UPGRADE, rocky_lab.inventory,
                        rocky_lab.logdir, name, extra_vars=rocky_lab.vars() | extra)


def test_upgrade_within_the_branch_moves_the_locks(
    converged: PlayResult, rocky_lab: RockyLab
) -> None:
    """upgrade_driver.yml 580.A -> 580.B: the role's locks are released and set again at B for
    exactly its packages; the fabric manager follows the driver; nvidia-fs stays unlocked."""
    assert converged.rc == 0, converged.tail()
    res = _upgrade(rocky_lab, "upgrade-580b", nvidia_driver_version=B)
    assert res.rc == 0 and res.host()["failed"] == 0, res.tail()
    have = rocky_lab.rpms()
    assert {n: have.get(n) for n in DRIVER} == _at(B, DRIVER)
    assert have.get("nvidia-fabricmanager") == f"{B}-1.el9"
    locks = rt.locks(rocky_lab.target)
    assert all(B in e for e in locks) and "nvidia-fs" not in str(locks), locks


def test_upgrade_to_590_switches_the_module_stream(
    converged: PlayResult, rocky_lab: RockyLab
) -> None:
    """upgrade_driver.yml to 590: nvidia-driver:580-open is reset and 590-open enabled; every
    driver package and the fabric manager move to 590.C and the locks follow."""
    assert converged.rc == 0, converged.tail()
    res = _upgrade(rocky_lab, "upgrade-590", nvidia_driver_version=C, nvidia_driver_branch="590")
    assert res.rc == 0 and res.host()["failed"] == 0, res.tail()
    streams = rocky_lab.target.chroot("dnf", "-q", "module", "list", "--enabled",
                                      "nvidia-driver").stdout
    assert "590-open" in streams and "580-open" not in streams, streams
    have = rocky_lab.rpms()
    assert {n: have.get(n) for n in DRIVER} == _at(C, DRIVER)
    assert have.get("nvidia-fabricmanager") == f"{C}-1.el9"
    locks = rt.locks(rocky_lab.target)
    assert all(C in e for e in locks) and "nvidia-fs" not in str(locks), locks


def test_toolkit_and_docker_from_their_repos(converged: PlayResult, rocky_lab: RockyLab) -> None:
    """Docker CE from /linux/rhel with podman and runc removed first; the toolkit's four packages at
    1.19.1 from NVIDIA's repo (signed metadata, repo_gpgcheck as NVIDIA's repo file: L4), locked;
    nvidia-ctk's runtime handed to the engine's daemon.json; a second run changes nothing."""
    res = rocky_lab.play("converge-engine", *ENGINE_TAGS)
    assert res.rc == 0 and res.host()["failed"] == 0, res.tail()
    have = rocky_lab.rpms()
    assert "podman" not in have and "runc" not in have, have
    for name in ("docker-ce", "containerd.io", "nvidia-container-toolkit"):
        assert rpmgraph.sourced(GRAPH, name, "name"), name
    assert have.get("docker-ce") == "29.6.1-1.el9" and "containerd.io" in have, have
    toolkit = ["nvidia-container-toolkit", "nvidia-container-toolkit-base",
               "libnvidia-container-tools", "libnvidia-container1"]
    assert {n: have.get(n) for n in toolkit} == {n: "1.19.1-1" for n in toolkit}
    names = {rpmgraph.lock_name(e) for e in rt.locks(rocky_lab.target)}
    assert set(toolkit) <= names, names
    daemon = json.loads((rocky_lab.target.root / "etc/docker/daemon.json").read_text())
    assert daemon["runtimes"]["nvidia"]["path"].endswith("nvidia-container-runtime"), daemon
    again = rocky_lab.play("converge-engine-again", *ENGINE_TAGS)
    assert again.rc == 0 and again.host()["changed"] == 0, again.tail()
