"""p2p_gbps and nic_gbps expectations for the repository's simulated profiles, against the cited
public floors (issue 25 item 4; ../shared/reviews/anchors-2026-12-01.md 1A).

P2P (nvbandwidth device_to_device_memcpy_read_ce): Azure's health checks fail an H100/H200 node
below 335 GB/s and an A100 80GB node below 238; the catalog's floor is expected x 0.76 for
every SKU (the H100/H200 one, the looser), so on A100 it sits below Azure's by at most
P2P_MARGIN. NIC: gpud's thresholds (>= 8 ports at >= 400 Gb/s on H100/H200/B200/GB200, >= 1 at
200 on A100). Profiles: tests/fixtures/golden/profiles (h200x8 NVSwitch, h200x2 NV18,
pcie-only-8gpu, a100x8, b200x8), with the SKU's names and links put in where no profile has it
(8xH100, as test_fabric_classes.py); ports: the kernel's rate format (capture-free, as
tests/fixtures/families/ib_ports).
"""

from __future__ import annotations

import dataclasses

import pytest
from test_fabric_classes import _as_sku, _facts
from test_rules_builders import fleet

from gpufleet.model import Facts, IbPort
from gpufleet.rules import evaluate
from gpufleet.sku.expect import host_expectations

P2P_MARGIN = 0.15  # the catalog's one floor ratio vs Azure's per-SKU floors (A100: -11.9 %)
NDR = "400 Gb/sec (4X NDR)"


def p2p(f: Facts) -> list[tuple[float, float, str]]:
    return [(e.expected, e.floor, e.basis) for e in host_expectations(f) if e.metric == "p2p_gbps"]


@pytest.mark.parametrize(("profile", "name", "links", "speed", "azure"), [
    ("h200x8", None, 18, 26.562, 335.0),  # 8xH200 NVSwitch: ND96isr_H200_v5 >= 335
    ("h200x2", None, 18, 26.562, 335.0),  # 2xH200 NV18
    ("h200x8", "NVIDIA H100 80GB HBM3", 18, 26.562, 335.0),  # ND96isr_H100_v5 >= 335
    ("a100x8", None, 12, 25.0, 238.0),  # the a100x8 profile: ND96amsr_A100_v4 >= 238
])
def test_p2p_floor_meets_azures_for_the_same_fabric(profile: str, name: str | None,
                                                    links: int, speed: float,
                                                    azure: float) -> None:
    f = _facts(profile) if name is None else _as_sku(_facts(profile), name, links, speed)
    lines = p2p(f)
    assert len(lines) == len(f.gpus), "one line per GPU"
    expected, floor, basis = lines[0]
    assert expected == round(links * speed * 0.92, 1)
    assert floor <= azure * 1.005, "never stricter than the public floor (beyond rounding)"
    assert floor >= azure * (1 - P2P_MARGIN), (floor, azure)
    assert ("none measured for" in basis) == (profile != "a100x8"), basis


# NVIDIA's HGX B200 figure (skus.json nv-hgx-b200): 14.4 TB/s of NVLink over 8 GPUs = 1.8 TB/s
# per GPU both ways, 900 GB/s each way; nvbandwidth reaches 0.92 of the link rate on A100.
B200_NVLINK_EACH_WAY = 900.0


def test_b200_has_a_borrowed_p2p_expectation_and_pcie_and_cpu_hosts_none() -> None:
    lines = p2p(_facts("b200x8"))
    assert len(lines) == 8
    expected, floor, basis = lines[0]
    assert expected == round(18 * 53.125 * 0.92, 1) and "none measured for blackwell" in basis
    assert 0.9 * B200_NVLINK_EACH_WAY <= expected <= B200_NVLINK_EACH_WAY, expected
    assert floor <= 0.76 * B200_NVLINK_EACH_WAY, "the floor sits where Azure's sits on H100/H200"
    assert p2p(_facts("pcie-only-8gpu")) == [], "no NVLink: PCIe P2P is not in the catalog"
    assert p2p(dataclasses.replace(_facts("h200x8"), gpus=())) == []


def ports(*rates: float) -> tuple[IbPort, ...]:
    return tuple(IbPort(f"mlx5_{i}", "1", f"{r:g} Gb/sec", r) for i, r in enumerate(rates))


@pytest.mark.parametrize(("rates", "fires"), [
    ((400.0,) * 8, False),
    ((400.0,) * 8 + (100.0,), False),  # a frontend NIC beside the 8 rails (Azure's mlx5_an0)
    ((400.0,) * 7 + (200.0,), True),  # one rail trained at half rate
    ((400.0,) * 7, True),  # a rail missing
])
def test_nic_rate_against_the_sku_on_8x_h200(rates: tuple[float, ...], fires: bool) -> None:
    f = dataclasses.replace(_facts("h200x8"), ib_ports=ports(*rates))
    [line] = [e for e in host_expectations(f) if e.metric == "nic_gbps"]
    assert (line.expected, line.floor) == (50.0, 50.0)
    r = fleet({"gpu02": {"facts": f}}, with_expect=False)
    found = [x for x in evaluate(r) if x.rule == "GF545"]
    assert bool(found) == fires, found
    if fires:
        assert found[0].hosts == ("gpu02",) and "8 fastest RDMA port(s)" in found[0].message


def test_an_a100_host_needs_one_200_gbit_port_and_no_port_means_no_line() -> None:
    a100 = _facts("a100x8")
    [line] = [e for e in host_expectations(dataclasses.replace(a100, ib_ports=ports(200.0)))
              if e.metric == "nic_gbps"]
    assert (line.expected, line.measured) == (25.0, 25.0)
    assert [e for e in host_expectations(a100) if e.metric == "nic_gbps"] == []


def test_a_group_override_moves_the_nic_floor() -> None:
    f = dataclasses.replace(_facts("h200x8"), ib_ports=ports(*(200.0,) * 8))
    [line] = [e for e in host_expectations(f, floors={"nic_gbps": 25.0})
              if e.metric == "nic_gbps"]
    assert line.floor == 25.0 and line.measured == 25.0


# SuperBench's NDmv4 (8 x A100 80GB) fleet baselines (skus.json superbench-a100, via anchors 1A):
# a healthy A100 host at those medians must pass every floor of the a100x8 profile.
SUPERBENCH_NDMV4 = {("matmul_tflops", "bf16"): 261.2, ("matmul_tflops", "fp16"): 275.4,
                    ("matmul_tflops", "tf32"): 127.4, ("matmul_tflops", "fp64"): 18.95,
                    ("h2d_gbps", None): 25.90, ("d2h_gbps", None): 25.95}


def test_a100x8_floors_pass_superbenchs_healthy_fleet_medians() -> None:
    lines = {(e.metric, e.dtype): e for e in host_expectations(_facts("a100x8")) if e.gpu == 0}
    for key, median in SUPERBENCH_NDMV4.items():
        assert lines[key].floor <= median, (key, lines[key].floor, median)
    # Azure's H2D floor on ND A100 v4 (>= 21 GB/s) sits 11 % under ours: ours is the stricter
    assert 21.0 <= lines[("h2d_gbps", None)].floor <= 21.0 / 0.85
