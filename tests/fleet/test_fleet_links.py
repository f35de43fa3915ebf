"""`gpufleet check --level facts` over sshd hosts with issue 9's profiles: the nccl.conf host
(a real /etc/nccl.conf in the host's mount namespace) and the downtrained-link host are named
with their rules and nothing else new; the H100 PCIe pair with 12 NVLinks by design, the 8-GPU
PCIe-only host and the host whose ssh environment sets harmless NCCL_* stay silent, and the
environment's settings arrive as facts."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fleetlib import DESIRED_STATE, Fleet, make_fleet

pytestmark = [pytest.mark.fleet, pytest.mark.slow]

HOSTS: dict[str, tuple[str, str]] = {
    "ok-1": ("h200x2", "gpu"),
    "ok-2": ("h200x2", "gpu"),
    "slow-link": ("nvlink-slow", "gpu"),
    "nccl-conf": ("nccl-conf", "gpu"),
    "nccl-env": ("nccl-env", "gpu"),
    "h100-nv12": ("h100-pcie-nv12", "h100"),
    "l40s-pcie": ("pcie-only-8gpu", "l40s"),
}
EXPECTED = {("GF413", "slow-link"), ("GF701", "nccl-conf")}


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("links-fleet")
    with make_fleet(
        root, [(name, profile) for name, (profile, _) in HOSTS.items()],
        groups={name: group for name, (_, group) in HOSTS.items()},
        group_vars={"gpu": {**DESIRED_STATE, "gpufleet_expected_gpu_count": 2},
                    "h100": {**DESIRED_STATE, "gpufleet_expected_gpu_count": 2},
                    "l40s": {**DESIRED_STATE, "gpufleet_expected_gpu_count": 8}},
    ) as fleet:
        yield _check(fleet)


def _check(fleet: Fleet) -> dict[str, Any]:
    return fleet.check_json(rc=(0, 1))


def test_only_the_injected_configuration_and_link_faults_are_named(
        report: dict[str, Any]) -> None:
    assert all(h["status"] == "ok" for h in report["hosts"].values()), report["hosts"]
    got = {(f["rule"], h) for f in report["findings"] if f["severity"] != "info"
           for h in f["hosts"]}
    assert got == EXPECTED, sorted(got)


def test_the_nccl_finding_names_the_setting_and_its_file(report: dict[str, Any]) -> None:
    (f,) = [f for f in report["findings"] if f["rule"] == "GF701"]
    assert f["evidence"]["name"] == "NCCL_P2P_DISABLE" and f["evidence"]["value"] == "1"
    assert f["evidence"]["source"] == "/etc/nccl.conf"
    assert "remove the NCCL_P2P_DISABLE line from /etc/nccl.conf" in f["remediation"]


def test_the_downtrained_link_is_named_by_gpu_and_speed(report: dict[str, Any]) -> None:
    (f,) = [f for f in report["findings"] if f["rule"] == "GF413"]
    assert f["message"] == "slow-link: GPU 1: NVLink(s) 5 at 13.281 GB/s (normal 26.562)"


def test_ssh_environment_settings_are_facts(report: dict[str, Any]) -> None:
    conf = report["hosts"]["nccl-env"]["facts"]["nccl_config"]
    eff = {s["name"]: (s["value"], s["source"]) for s in conf["effective"]}
    assert eff["NCCL_DEBUG"] == ("WARN", "environment")
    assert eff["NCCL_IB_HCA"] == ("mlx5_0", "environment")
    ok = report["hosts"]["ok-1"]["facts"]["nccl_config"]
    assert ok["files"]["/etc/nccl.conf"] == "absent" or ok["effective"] == [], ok
