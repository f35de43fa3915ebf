"""The roles against NVIDIA's and Docker's apt repositories as they really are (issue 11).

A second debootstrap target with an Ubuntu 24.04 identity (/etc/os-release; apt and dpkg are Debian
12's) gets local repositories that reproduce NVIDIA's CUDA repository and Docker's package graphs
(tests/ansible/graphs/ubuntu2404.toml: names, versions, Depends with >=, Conflicts, pinning
packages) and the sources a host set up the documented way already has (cuda-keyring's list,
nvidia-container-toolkit.list, docker.sources, each with its own Signed-By). Then: --check on the
new host, converge at 580.A, and upgrade_driver.yml to 580.B and to 590 with exact versions, holds
and the fabric manager checked.
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

from conftest import PlayResult, _write_inventory, run_playbook

pytestmark = [pytest.mark.ansible, pytest.mark.slow]

SITE = "playbooks/site.yml"
UPGRADE = "playbooks/upgrade_driver.yml"
TAGS = ("--tags", "nvidia_driver,container_runtime,nvidia_container_toolkit")
A, B, C = "580.65.06", "580.95.05", "590.44.01"


@dataclass
class GraphLab:
    target: tg.Target
    repos: pkggraph.GraphRepos
    inventory: Path
    logdir: Path

    def play(self, playbook: str, name: str, *args: str, **extra: object) -> PlayResult:
        return run_playbook(
            Path(__file__).resolve().parents[2] / playbook,
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


def _driver_580(version: str) -> dict[str, str]:
    v = f"{version}-0ubuntu1"
    names = [
        "nvidia-open-580",
        "nvidia-driver-580-open",
        "libnvidia-compute-580",
        "nvidia-utils-580",
        "nvidia-compute-utils-580",
        "nvidia-dkms-580-open",
        "nvidia-fabricmanager",
    ]
    return {n: v for n in names}


def test_converge_reuses_the_documented_sources(converged: PlayResult, graph_lab: GraphLab) -> None:
    """Defect 1: cuda-keyring's list, nvidia-container-toolkit.list and docker.sources are reused,
    so apt never sees one URI with two Signed-By values."""
    assert converged.rc == 0 and converged.host()["failed"] == 0, converged.tail()
    lists = graph_lab.target.root / "etc/apt/sources.list.d"
    assert sorted(p.name for p in lists.iterdir() if p.name.startswith("gpufleet-")) == []
    graph_lab.target.chroot("apt-get", "-qq", "update")
    assert graph_lab.dpkg()["docker-ce"] == "5:28.5.1-1~ubuntu.24.04~noble"


def test_exact_version_pins_every_driver_package(
    converged: PlayResult, graph_lab: GraphLab
) -> None:
    """Defect 4: the pinning package holds every dependency at the requested version."""
    assert converged.rc == 0, converged.tail()
    have = graph_lab.dpkg()
    assert {n: have.get(n) for n in _driver_580(A)} == _driver_580(A)
    assert have.get(f"nvidia-driver-pinning-{A}") == f"{A}-1ubuntu1"


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


def test_upgrade_within_the_branch_moves_every_held_package(
    converged: PlayResult, graph_lab: GraphLab
) -> None:
    """Defect 3: 580.A -> 580.B through upgrade_driver.yml, with the dependencies held."""
    assert converged.rc == 0, converged.tail()
    res = graph_lab.play(UPGRADE, "upgrade-580b", nvidia_driver_version=B)
    assert res.rc == 0 and res.host()["failed"] == 0, res.tail()
    have = graph_lab.dpkg()
    assert {n: have.get(n) for n in _driver_580(B)} == _driver_580(B)
    assert f"nvidia-driver-pinning-{A}" not in have
    assert set(_driver_580(B)) <= graph_lab.holds()


def test_upgrade_to_590_renames_the_packages(converged: PlayResult, graph_lab: GraphLab) -> None:
    """Defect 8: 590 drops the branch from the names; the 580 packages go, FM follows exactly."""
    assert converged.rc == 0, converged.tail()
    res = graph_lab.play(
        UPGRADE, "upgrade-590", nvidia_driver_version=C, nvidia_driver_branch="590"
    )
    assert res.rc == 0 and res.host()["failed"] == 0, res.tail()
    have = graph_lab.dpkg()
    v = f"{C}-0ubuntu1"
    want = [
        "nvidia-open",
        "nvidia-driver-open",
        "libnvidia-compute",
        "nvidia-utils",
        "nvidia-compute-utils",
        "nvidia-dkms-open",
        "nvidia-fabricmanager",
    ]
    assert {n: have.get(n) for n in want} == dict.fromkeys(want, v)
    assert not [n for n in have if n.endswith("-580") or "-580-" in n], have
    holds = graph_lab.holds()
    assert set(want) <= holds and "nvidia-system-core" not in holds, holds
