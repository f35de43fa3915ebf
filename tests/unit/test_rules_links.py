"""GF408/GF413 and the expectation on the simulated profiles, read by the real probe.

Hand-derived numbers as in test_bandwidth.py: 4 GiB ratio 343.7 / 478.116 = 0.718863.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from test_rules_captures import DESIRED, NOW, _probe

from gpufleet.model import Expectations, Facts, HostResult, HostSpec, Report
from gpufleet.rules import evaluate
from gpufleet.sku import bandwidth as expect
from gpufleet.sku.bandwidth import GIB, MIB

NAMES = ("h200x2", "nvlink-slow", "nvlink-down", "h100-pcie-nv12", "pcie-only-8gpu",
         "nccl-conf", "nccl-env")


@pytest.fixture(scope="module")
def parsed() -> dict[str, Facts]:
    with ThreadPoolExecutor(4) as pool:
        return dict(zip(NAMES, pool.map(_probe, NAMES), strict=True))


def _alone(name: str, f: Facts, **desired: Any) -> list[str]:
    """Findings above info for one host judged against the healthy desired state."""
    e = Expectations(**{**DESIRED, **desired})
    r = Report(hosts={name: HostResult(name, "ok", None, f, None)},
               specs={name: HostSpec(name, name, groups=("gpu",), expect=e)}, level="facts")
    return sorted(f"{x.rule} {x.message}" for x in evaluate(r, now=NOW)
                  if x.severity != "info")


def test_downtrained_link_is_gf413_and_lowers_the_expectation(parsed: dict[str, Facts]) -> None:
    assert _alone("nvlink-slow", parsed["nvlink-slow"]) == [
        "GF413 nvlink-slow: GPU 1: NVLink(s) 5 at 13.281 GB/s (normal 26.562)"]
    e = expect.expect_host(expect.links_from_facts(parsed["nvlink-slow"]), 2)
    # 17 x 26.562 + 13.281 = 464.835 GB/s; x 0.718863 = 334.152 at 4 GiB
    assert e is not None and e.busbw_gbps[4 * GIB] == pytest.approx(334.152, abs=1e-3)


def test_h100_pcie_with_12_links_by_design_is_silent(parsed: dict[str, Facts]) -> None:
    assert _alone("h100-pcie-nv12", parsed["h100-pcie-nv12"]) == []
    e = expect.expect_host(expect.links_from_facts(parsed["h100-pcie-nv12"]), 2)
    # 12 x 26.562 = 318.744; x 0.718863 = 229.133 at 4 GiB
    assert e is not None and e.issues == ()
    assert e.busbw_gbps[4 * GIB] == pytest.approx(229.133, abs=1e-3)


def test_h100_nvl_with_12_links_is_silent(parsed: dict[str, Facts]) -> None:
    # The H100 NVL has 12 NVLinks (skus.json H100-NVL, source azure-162): the same 12-of-18
    # capture as the H100 PCIe profile, named as nvidia-smi names the NVL. The old second table
    # in bandwidth.py matched "H100" and said 18: "12 of 18 NVLinks active".
    pcie = parsed["h100-pcie-nv12"]
    f = dataclasses.replace(pcie, gpus=tuple(dataclasses.replace(g, name="NVIDIA H100 NVL")
                                             for g in pcie.gpus))
    assert [x for x in _alone("h100-nvl", f) if x.split()[0] in ("GF408", "GF413", "GF504")] == []
    e = expect.expect_host(expect.links_from_facts(f), 2)
    assert e is not None and e.issues == ()
    assert e.busbw_gbps[4 * GIB] == pytest.approx(229.133, abs=1e-3)  # 12 x 26.562 x 0.718863


def test_links_down_stay_gf408(parsed: dict[str, Facts]) -> None:
    found = _alone("nvlink-down", parsed["nvlink-down"])
    assert [x.split()[0] for x in found] == ["GF408", "GF408"]
    e = expect.expect_host(expect.links_from_facts(parsed["nvlink-down"]), 2)
    # 16 x 26.562 = 424.992; x 0.718863 = 305.511
    assert e is not None and e.busbw_gbps[4 * GIB] == pytest.approx(305.511, abs=1e-3)


def test_pcie_only_8gpu_is_silent_and_expects_pcie(parsed: dict[str, Facts]) -> None:
    assert _alone("pcie-only-8gpu", parsed["pcie-only-8gpu"], gpu_count=8) == []
    e = expect.expect_host(expect.links_from_facts(parsed["pcie-only-8gpu"]), 8)
    # Gen4 x16 = 31.507 GB/s; 64 MiB x 0.42530 = 13.400, 4 GiB x 0.54584 = 17.198
    assert e is not None and e.basis == "pcie"
    assert e.busbw_gbps[64 * MIB] == pytest.approx(13.400, abs=1e-3)
    assert e.busbw_gbps[4 * GIB] == pytest.approx(17.198, abs=1e-3)


def test_healthy_capture_expects_the_measured_table(parsed: dict[str, Facts]) -> None:
    assert _alone("h200x2", parsed["h200x2"]) == []
    e = expect.expect_host(expect.links_from_facts(parsed["h200x2"]), 2)
    assert e is not None and e.busbw_gbps[4 * GIB] == 343.7
