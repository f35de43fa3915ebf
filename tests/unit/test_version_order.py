"""Issue 38.7 (review S08): versions compare as their projects order them, a pre-release before
its release, for every security floor's component (rules/base.py vkey, on packaging.version)."""

from __future__ import annotations

import pytest

from gpufleet.rules.base import vkey, vless
from gpufleet.rules.security import fixed_for, parse_floors

# (lower, higher, where the project writes versions that way)
ORDER = [
    ("1.2.0-rc.1", "1.2.0", "https://github.com/opencontainers/runc/releases/tag/v1.2.0-rc.1"),
    ("1.4.0-rc.2", "1.4.0-rc.3", "https://github.com/opencontainers/runc/releases/tag/v1.4.0-rc.3"),
    ("1.17.0~rc.1", "1.17.0",  # the toolkit's Debian packages: apt's "1.17.0~rc.1-1"
     "https://github.com/NVIDIA/nvidia-container-toolkit/releases/tag/v1.17.0-rc.1"),
    ("1.17.0-rc.1", "1.17.0",
     "https://github.com/NVIDIA/nvidia-container-toolkit/releases/tag/v1.17.0-rc.1"),
    ("28.0.0-rc.1", "28.0.0", "https://github.com/moby/moby/releases/tag/v28.0.0-rc.1"),
    ("25.0.0-beta.1", "25.0.0-rc.1", "https://github.com/moby/moby/releases/tag/v25.0.0-beta.1"),
    ("2.0.0-rc.1", "2.0.0", "https://github.com/containerd/containerd/releases/tag/v2.0.0-rc.1"),
    ("2.0.0-beta.2", "2.0.0-rc.1",
     "https://github.com/containerd/containerd/releases/tag/v2.0.0-beta.2"),
    # driver: numbers compare as numbers, not text (580.9.x is an invented lower release)
    ("580.9.1", "580.65.06", "https://docs.nvidia.com/datacenter/tesla/drivers/index.html"),
    ("580.159.03", "580.159.04", "https://docs.nvidia.com/datacenter/tesla/drivers/index.html"),
]


@pytest.mark.parametrize("lower, higher, source", ORDER)
def test_a_pre_release_sorts_before_its_release(lower: str, higher: str, source: str) -> None:
    assert vless(lower, higher), f"{lower} < {higher} ({source})"
    assert not vless(higher, lower)


@pytest.mark.parametrize("built, upstream", [
    ("1.1.5+ds1-1+deb12u1", "1.1.5"),  # Debian's runc (rules/security_floors.yaml's comment)
    ("24.0.7-0ubuntu2~22.04.1", "24.0.7"),  # Ubuntu's docker.io: a revision, not a pre-release
])
def test_a_distribution_suffix_is_not_a_pre_release(built: str, upstream: str) -> None:
    assert vkey(built) == vkey(upstream)


def _floor(component: str, fixed: str) -> object:
    _, floors = parse_floors({
        "component": {component: {"rule": "GF3xx", "what": component}},
        "floors": [{"component": component, "advisory": "a", "date": "2026-01-01",
                    "source": "https://example.invalid/advisory", "severity": "error",
                    "fixed": {"0": fixed}, "cves": ["CVE-0000-0000"]}]})
    return floors[0]


@pytest.mark.parametrize("component, fixed, running", [
    ("runc", "1.2.0", "1.2.0-rc.1"),
    ("toolkit", "1.17.0", "1.17.0~rc.1"),
    ("docker", "28.0.0", "28.0.0-rc.1"),
    ("containerd", "2.0.0", "2.0.0-rc.1"),
])
def test_a_pre_release_is_below_its_releases_floor(component: str, fixed: str,
                                                   running: str) -> None:
    floor = _floor(component, fixed)
    assert fixed_for(floor, running) == fixed  # type: ignore[arg-type]
    assert fixed_for(floor, fixed) is None  # type: ignore[arg-type]
