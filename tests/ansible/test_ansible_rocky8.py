"""The nvidia_driver role on Rocky Linux 8 (issue 24): the Rocky 9 lab of test_ansible_rocky.py
with an EL8 identity and repositories (rhel8 paths, el8 releases, CRB named powertools): facts,
and one converge at an exact version with EPEL enabled by the role. The rest of the dnf paths are
the same tasks and are proven on Rocky 9."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import rheltarget as rt
from test_ansible_rocky import DRIVER, A, RockyLab, _at, lab

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
