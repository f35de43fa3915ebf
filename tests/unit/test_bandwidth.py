"""The expectation model on every simulated topology, numbers derived by hand.

Calibration (REFERENCE.md, 2xH200 NV18, nccl-tests): raw = 18 x 26.562 = 478.116 GB/s one way
per GPU; 4 GiB 343.7 (ratio 0.71887), 256 MiB 298.3 (0.62391), 64 MiB 267.8 (0.56012).
PCIe: 26.8 GB/s at 64 MiB through host memory on Gen5 x16 (16 x 3.9385 = 63.016 GB/s), ratio
0.42530; the NVLink curve scaled by 0.42530 / 0.56012, so at 4 GiB 0.71887 x 0.75930 = 0.54584.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.model import Facts, GpuNvLinks, IbPort, NvLink
from gpufleet.probes.topology import parse_nvlink_status, parse_topo_m
from gpufleet.sku import bandwidth as expect
from gpufleet.sku.bandwidth import GIB, MIB, HostLinks

NV4 = 26.562


def _nv(n_gpus: int, active: int = 18, listed: int = 18, speed: float = NV4,
        slow: dict[tuple[int, int], float] | None = None) -> tuple[GpuNvLinks, ...]:
    slow = slow or {}
    return tuple(GpuNvLinks(g, tuple(
        NvLink(k, k < active, slow.get((g, k), speed) if k < active else None)
        for k in range(listed))) for g in range(n_gpus))


def _matrix(n: int, link: str) -> dict[str, dict[str, str]]:
    return {f"GPU{a}": {f"GPU{b}": ("X" if a == b else link) for b in range(n)} for a in range(n)}


def test_real_h200_capture_is_the_measured_table(fixtures_dir: Path) -> None:
    cap = fixtures_dir / "h200x2-2026-11-30"
    links = HostLinks(gpu_names=("NVIDIA H200",) * 2,
                      nvlink=parse_nvlink_status((cap / "nvlink-s.txt").read_text()),
                      gpu_links=parse_topo_m((cap / "topo-m.txt").read_text()).links)
    e = expect.expect_host(links, 2)
    assert e is not None and e.basis == "nvlink" and e.issues == ()
    assert e.raw_gbps == pytest.approx(478.116)  # 18 x 26.562
    assert e.busbw_gbps[4 * GIB] == 343.7 and e.busbw_gbps[256 * MIB] == 298.3
    assert e.ratio[4 * GIB] == pytest.approx(0.71887, abs=1e-5)  # "72 % of raw"
    assert e.ratio[256 * MIB] == pytest.approx(0.62391, abs=1e-5)  # "62 %"
    assert "measured" in e.calibration
    assert set(e.judged()) == {64 * MIB, 256 * MIB, 1 * GIB, 2 * GIB, 4 * GIB, 8 * GIB}


def test_h200x8_nvswitch_uses_the_ratio_curve() -> None:
    # 8 GPUs on NVSwitch, Hopper: NCCL turns NVLS on by default, so the class is nvswitch_nvls:
    # the NV18 curve's shape scaled to 480 GB/s at 4 GiB (nccl-tests#212), i.e. each point
    # x 480 / 343.7: 256 MiB 298.3 -> 416.6; 2 GiB (log-linear halfway, 337.0) -> 470.6.
    e = expect.expect_host(HostLinks(gpu_names=("NVIDIA H200",) * 8, nvlink=_nv(8),
                                     gpu_links=_matrix(8, "NV18"), nvswitch=True), 8)
    assert e is not None and e.basis == "nvswitch" and e.fabric == "nvswitch_nvls"
    assert e.nvls == "NVLS on: NCCL's default on NVSwitch with hopper GPUs"
    assert e.busbw_gbps[4 * GIB] == pytest.approx(480.0)
    assert e.busbw_gbps[256 * MIB] == pytest.approx(416.6, abs=0.05)
    assert e.busbw_gbps[2 * GIB] == pytest.approx(470.6, abs=0.05)
    assert e.busbw_gbps[8 * GIB] == pytest.approx(480.0)  # flat beyond the last point
    assert e.fraction == 0.95 and e.evidence()["fraction_required"] == 0.95


def test_nvls_off_in_the_nccl_config_is_the_ring_class() -> None:
    # NCCL_NVLS_ENABLE=0 (an /etc/nccl.conf like the lent H200's): rings, 370 GB/s at 4 GiB.
    e = expect.expect_host(HostLinks(gpu_names=("NVIDIA H200",) * 8, nvlink=_nv(8),
                                     gpu_links=_matrix(8, "NV18"), nvswitch=True,
                                     nvls_setting=("0", "/etc/nccl.conf")), 8)
    assert e is not None and e.fabric == "nvswitch"
    assert e.nvls == "NVLS off: NCCL_NVLS_ENABLE=0 in /etc/nccl.conf"
    assert e.busbw_gbps[4 * GIB] == pytest.approx(370.0)


def test_pcie_only_8_gpus() -> None:
    # 8 x L40S, Gen4 x16 each, no NVLink (topo PIX/NODE/SYS): raw = 16 x 1.9692 = 31.507 GB/s;
    # 64 MiB: 31.507 x 0.42530 = 13.400; 4 GiB: 31.507 x 0.54584 = 17.198.
    matrix = _matrix(8, "NODE")
    links = HostLinks(gpu_names=("NVIDIA L40S",) * 8, nvlink=(), gpu_links=matrix,
                      pcie={i: (4, 16) for i in range(8)})
    e = expect.expect_host(links, 8)
    assert e is not None and e.basis == "pcie"
    assert e.raw_gbps == pytest.approx(31.507, abs=1e-3)
    assert e.busbw_gbps[64 * MIB] == pytest.approx(13.400, abs=1e-3)
    assert e.busbw_gbps[4 * GIB] == pytest.approx(17.198, abs=1e-3)
    assert expect.link_issues(links) == ()  # an L40S has no NVLink to miss


def test_pcie_slowest_gpu_bounds_the_world() -> None:
    # GPU 1 trained down to Gen4 x8 (8 x 1.9692 = 15.754): the world runs at its pace.
    links = HostLinks(gpu_names=("NVIDIA L40S",) * 2, gpu_links=_matrix(2, "SYS"),
                      pcie={0: (4, 16), 1: (4, 8)})
    e = expect.expect_host(links, 2)
    assert e is not None and e.raw_gbps == pytest.approx(15.754, abs=1e-3)


def test_h100_pcie_pair_with_12_links_by_design_is_not_degraded() -> None:
    # nvidia-smi lists 18 links, 12 active (links 12-17 <inactive>), topo NV12.
    # raw = 12 x 26.562 = 318.744; 4 GiB: 343.7 x 12/18 = 229.133; 256 MiB: 298.3 x 12/18 = 198.867.
    links = HostLinks(gpu_names=("NVIDIA H100 PCIe",) * 2, nvlink=_nv(2, active=12),
                      gpu_links=_matrix(2, "NV12"))
    assert expect.link_issues(links) == ()
    e = expect.expect_host(links, 2)
    assert e is not None and e.basis == "nvlink" and e.issues == ()
    assert e.busbw_gbps[4 * GIB] == pytest.approx(229.133, abs=1e-3)
    assert e.busbw_gbps[256 * MIB] == pytest.approx(198.867, abs=1e-3)


def test_a_downtrained_link_lowers_the_expectation_and_is_its_own_issue() -> None:
    # GPU 1 link 5 at half speed: 17 x 26.562 + 13.281 = 464.835 GB/s < GPU 0's 478.116.
    # 4 GiB: 464.835 x 0.71887 = 334.152 (not the table: the links are not the measured ones).
    links = HostLinks(gpu_names=("NVIDIA H200",) * 2, nvlink=_nv(2, slow={(1, 5): 13.281}),
                      gpu_links=_matrix(2, "NV18"))
    e = expect.expect_host(links, 2)
    assert e is not None and e.raw_gbps == pytest.approx(464.835)
    assert e.busbw_gbps[4 * GIB] == pytest.approx(334.152, abs=1e-3)
    assert [(i.gpu, i.kind) for i in e.issues] == [(1, "slow")]
    assert e.issues[0].detail == "GPU 1: NVLink(s) 5 at 13.281 GB/s (normal 26.562)"
    assert e.evidence()["lowered_by"] == [e.issues[0].detail]


def test_two_links_down_lower_the_expectation() -> None:
    # nvlink-down profile: links 3 and 11 inactive on both GPUs, topo NV16:
    # raw = 16 x 26.562 = 424.992; 4 GiB: 343.7 x 16/18 = 305.511.
    nv = tuple(GpuNvLinks(g, tuple(NvLink(k, k not in (3, 11), None if k in (3, 11) else NV4)
                                   for k in range(18))) for g in range(2))
    e = expect.expect_host(HostLinks(gpu_names=("NVIDIA H200",) * 2, nvlink=nv,
                                     gpu_links=_matrix(2, "NV16")), 2)
    assert e is not None and e.busbw_gbps[4 * GIB] == pytest.approx(305.511, abs=1e-3)
    assert [i.kind for i in e.issues] == ["inactive", "inactive"]


def test_no_expectation_without_facts_or_with_one_rank() -> None:
    links = HostLinks(gpu_names=("NVIDIA H200",) * 2)
    assert expect.expect_host(links, 2) is None  # neither NVLink nor PCIe known
    assert expect.expect_host(HostLinks(gpu_names=("NVIDIA H200",), nvlink=_nv(1)), 1) is None


def test_multinode_world_is_bounded_by_the_nics() -> None:
    # Two 8xH200 hosts, 8 x 400 Gb/s IB each = 8 x 50 = 400 GB/s per host < 478.116 NVLink:
    # network basis, 4 GiB: 400 x 343.7 / 478.116 = 400 x 0.718863 = 287.545.
    ports = tuple(IbPort(f"mlx5_{i}", "1", "400 Gb/sec (4X NDR)", 400.0) for i in range(8))
    nics = expect.links_from_facts(Facts(ib_ports=ports)).nic_gbps
    assert nics == (50.0,) * 8
    links = HostLinks(gpu_names=("NVIDIA H200",) * 8, nvlink=_nv(8),
                      gpu_links=_matrix(8, "NV18"), nvswitch=True, nic_gbps=nics)
    own = expect.expect_host(links, 8)
    world = expect.expect_world([(own, links), (own, links)])
    assert world is not None and world.basis == "network" and world.gpus == 16
    assert world.busbw_gbps[4 * GIB] == pytest.approx(287.545, abs=1e-3)
    # One 100 Gb/s RoCE port (12.5 GB/s) bounds it lower; a rate without "Gb/sec" adds none.
    roce = (IbPort("mlx5_0", "1", "100 Gb/sec (4X EDR)", 100.0), IbPort("mlx5_1", "1", "?"))
    slow = HostLinks(**{**links.__dict__,
                        "nic_gbps": expect.links_from_facts(Facts(ib_ports=roce)).nic_gbps})
    world = expect.expect_world([(own, links), (own, slow)])
    assert world is not None and world.raw_gbps == 12.5
    assert expect.expect_world([(own, links), (None, links)]) is None


def test_runner_expects_the_nic_bound_for_a_multinode_world(fixtures_dir: Path) -> None:
    """Two hosts with the facts of the real 2xH200 capture, 1 x 100 Gb/s IB each (ib_ports)
    (12.5 GB/s < 478.116 NVLink): the world's expectation is the network's, 12.5 x 0.718863 =
    8.986 GB/s at 4 GiB, and it is what the command passes to the script."""
    from gpufleet.model import Facts, Gpu, HostSpec  # noqa: PLC0415
    from gpufleet.probes.topology import parse_nvlink_status, parse_topo_m  # noqa: PLC0415
    from gpufleet.smoke import runner  # noqa: PLC0415
    from gpufleet.smoke.hostrun import HostRun  # noqa: PLC0415
    from gpufleet.transport.local import LocalTransport  # noqa: PLC0415

    cap = fixtures_dir / "h200x2-2026-11-30"
    facts = Facts(gpus=tuple(Gpu(index=i, name="NVIDIA H200") for i in range(2)),
                  topology=parse_topo_m((cap / "topo-m.txt").read_text()),
                  nvlink=parse_nvlink_status((cap / "nvlink-s.txt").read_text()),
                  ib_ports=(IbPort("mlx5_0", "1", "100 Gb/sec (4X EDR)", 100.0),))
    hosts = []
    for name in ("n1", "n2"):
        spec = HostSpec(name=name, address="10.0.0.1")
        h = HostRun(spec, LocalTransport(spec), facts, "gfsmoke-x")
        h.gpu_names, h.gpu_count = ("NVIDIA H200",) * 2, 2
        hosts.append(h)
    world = expect.expect_world([(runner._expectation(h, 2), expect.links_from_facts(h.facts))
                                 for h in hosts])
    assert world is not None and world.basis == "network" and world.raw_gbps == 12.5
    assert world.busbw_gbps[4 * GIB] == pytest.approx(8.986, abs=1e-3)
