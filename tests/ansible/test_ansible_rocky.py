"""The nvidia_driver role on Rocky Linux 9 where dnf really runs (issue 24; review items H4, H5,
M19, M20): a target whose facts say os_family RedHat / pkg_mgr dnf (tests/ansible/rheltarget.py),
rpm repositories shaped like NVIDIA's cuda-rhel9-x86_64 (module streams, driver subpackages at one
epoch:version, meta-packages requiring the driver with ">="), EPEL 9 and Rocky's repos
(tests/ansible/graphs/rpm/rocky9.toml, built by rpmgraph.py), reached over SSH by ansible-playbook.
Assertions name only packages whose asserted facts are sourced (rpmgraph.sourced).
"""

from __future__ import annotations

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

pytestmark = [pytest.mark.ansible, pytest.mark.slow]

SITE = "playbooks/site.yml"
TAGS = ("--tags", "nvidia_driver")
GRAPH = rpmgraph.load()
A, B, C = "580.95.05", "580.105.08", "590.44.01"
DRIVER = ["nvidia-open", "nvidia-driver", "nvidia-driver-libs", "nvidia-driver-cuda",
          "nvidia-driver-cuda-libs", "nvidia-kmod-common", "kmod-nvidia-open-dkms"]


@dataclass
class RockyLab:
    target: tg.Target
    repos: rpmgraph.RpmRepos
    inventory: Path
    logdir: Path

    def play(self, name: str, *args: str, **extra: object) -> PlayResult:
        return run_playbook(Path(__file__).resolve().parents[2] / SITE, self.inventory,
                            self.logdir, name, *TAGS, *args, extra_vars=self.vars() | extra)

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
        }

    def rpms(self) -> dict[str, str]:
        return rt.rpms(self.target)


@pytest.fixture(scope="module")
def rocky_lab() -> Iterator[RockyLab]:
    if os.geteuid() != 0 or not all(shutil.which(t) for t in ("debootstrap", "rpmbuild")):
        pytest.fail("RHEL role tests need root, debootstrap, rpmbuild (scripts/setup.sh)")
    workdir = Path(f"/var/tmp/gpufleet-rocky-tests-{os.getpid()}")
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
        repos = rpmgraph.build(workdir / "mirror", mirror, gnupg)
        tg.serve_mirror(mirror, logdir / "mirror-http.log")
        t = rt.prepare(workdir, addr, repos, mirror.root / "key.asc")
        # GPUDirect Storage's nvidia-fs, installed by someone else: the role must not lock it (M19).
        t.chroot("dnf", "-q", "-y", "--repofrompath", f"cuda,{repos.url('cuda')}", "install",
                 "nvidia-fs")
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
        shutil.rmtree(keep, ignore_errors=True)
        if logdir.exists():
            shutil.copytree(logdir, keep)
        shutil.rmtree(workdir, ignore_errors=True)


def _at(version: str, names: list[str]) -> dict[str, str]:
    for name in names:
        assert rpmgraph.sourced(GRAPH, name, "name", "version"), f"{name}: an inferred fact"
    return {n: f"3:{version}-1.el9" for n in names}


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


def test_branch_change_switches_the_module_stream(
    converged: PlayResult, rocky_lab: RockyLab
) -> None:
    """A move to 590 resets nvidia-driver:580-open and enables 590-open; every driver package and
    the fabric manager move to 590.C and the locks follow."""
    assert converged.rc == 0, converged.tail()
    res = rocky_lab.play("switch-590", nvidia_driver_version=C, nvidia_driver_branch="590")
    assert res.rc == 0 and res.host()["failed"] == 0, res.tail()
    streams = rocky_lab.target.chroot("dnf", "-q", "module", "list", "--enabled",
                                      "nvidia-driver").stdout
    assert "590-open" in streams and "580-open" not in streams, streams
    have = rocky_lab.rpms()
    assert {n: have.get(n) for n in DRIVER} == _at(C, DRIVER)
    assert have.get("nvidia-fabricmanager") == f"{C}-1.el9"
    locks = rt.locks(rocky_lab.target)
    assert all(C in e for e in locks) and "nvidia-fs" not in str(locks), locks
