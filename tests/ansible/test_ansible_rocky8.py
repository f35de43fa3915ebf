"""The nvidia_driver role on Rocky Linux 8 (issue 24): the Rocky 9 lab of test_ansible_rocky.py
with an EL8 identity and repositories (rhel8 paths, el8 releases, CRB named powertools): facts,
one converge at an exact version with EPEL enabled by the role, and issue 26's reinstall rung on
it. The rest of the dnf paths are the same tasks and are proven on Rocky 9."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import rheltarget as rt
from test_ansible_rocky import DRIVER, OWNED, A, RockyLab, _at, _installed, _reinstall, lab

from conftest import PlayResult

pytestmark = [pytest.mark.ansible, pytest.mark.slow]


@pytest.fixture(scope="module")
def rocky8_lab() -> Iterator[RockyLab]:
    yield from lab(8)


@pytest.fixture(scope="module")
def converged8(rocky8_lab: RockyLab) -> PlayResult:
    return rocky8_lab.play("converge-8-580a")


def test_rocky8_converges_at_the_exact_version_with_powertools(
    converged8: PlayResult, rocky8_lab: RockyLab
) -> None:
    """Facts say Rocky 8 / RedHat / dnf; the role enables powertools (Rocky 8's CRB) and EPEL,
    installs every driver subpackage at 580.A from nvidia-driver:580-open, and locks them."""
    assert converged8.rc == 0 and converged8.host()["failed"] == 0, converged8.tail()
    assert "config-manager --set-enabled powertools" in converged8.flat, converged8.tail()
    have = rocky8_lab.rpms()
    assert {n: have.get(n) for n in DRIVER} == _at(A, DRIVER, "el8")
    assert "nvidia-fs" not in str(rt.locks(rocky8_lab.target))
    release = rocky8_lab.target.chroot("rpm", "-q", "--provides", "rocky-release").stdout
    assert "system-release(releasever) = 8" in release, release


def test_rocky8_reinstall_rung_restores_the_driver_and_fabric_manager(
    converged8: PlayResult, rocky8_lab: RockyLab
) -> None:
    """Issue 26 on EL8's dnf 4 and its module streams: with nvidia-smi deleted from the
    converged host, remediate_reinstall.yml reinstalls exactly the packages the role owns, the
    fabric manager among them, at 580.A (each one's INSTALLTIME moves, no other package's); the
    file is back, rpm -V is clean, the versionlock entries are unchanged."""
    assert converged8.rc == 0, converged8.tail()
    smi = rocky8_lab.target.root / "usr/bin/nvidia-smi"
    smi.unlink()
    before, locks = _installed(rocky8_lab), rt.locks(rocky8_lab.target)
    res = _reinstall(rocky8_lab, "reinstall-8")
    assert res.rc == 0 and res.host()["failed"] == 0, res.tail()
    assert smi.exists(), res.tail()
    assert f"rpm -V {' '.join(sorted(OWNED))}: every file matches its package" in res.flat
    after = _installed(rocky8_lab)
    moved = {p for p in after.keys() | before.keys() if after.get(p) != before.get(p)}
    assert moved == {f"{n}-{A}-1.el8" for n in OWNED}, moved
    assert rocky8_lab.target.chroot("rpm", "-V", *OWNED).stdout == ""  # raises on non-zero
    assert rt.locks(rocky8_lab.target) == locks
