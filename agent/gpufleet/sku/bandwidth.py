"""Expected all-reduce bus bandwidth of a GPU host, from its own links (pure): the busbw model.

Named bandwidth, not expect: "expectations" in gpufleet are the inventory's desired state
(model.Expectations, --expect FILE); this module predicts what a world's links should give, a
`LinkBound`, which the smoke verdict and rules/links.py compare measurements with.

Model (docs/smoke.md, "Expected bandwidth"):
1. The raw bound per GPU, in GB/s one way:
   - NVLink (every GPU pair of the world joined by NVLink in `nvidia-smi topo -m`, or an
     NVSwitch fabric): the sum of the GPU's active link speeds from `nvidia-smi nvlink -s`;
     the world's bound is the GPU with the least. A ring all-reduce moves 2(n-1)/n x S over
     each GPU's links, which is what busbw normalises away, so busbw tends to this bound.
   - otherwise PCIe: the current generation x width of the slowest GPU (per-lane rates below).
   - multinode: the smaller of the hosts' own bound and the NICs' total rate per host
     (/sys/class/infiniband/*/ports/*/rate, Ethernet link speed).
2. Expected busbw(size) = raw x ratio(size). The ratios are measured against nccl-tests on our
   2xH200 NV18 host (REFERENCE.md): 343.7 GB/s at 4 GiB of 18 x 26.562 = 478.1 GB/s raw is
   71.9 %, 298.3 at 256 MiB is 62.4 %, ... Sizes between points are interpolated in log2(size).
   PCIe has one point: 26.8 GB/s at 64 MiB through host memory (P2P off) on PCIe Gen5 x16
   (63.0 GB/s), 42.5 %; the NVLink curve is scaled to it.
3. Where the host is exactly a measured configuration (same GPU, GPU count, links all at their
   SKU's normal count and speed), the measured table itself is the expectation.
4. A link below its SKU's normal count or speed lowers the raw bound (it is its own finding,
   GF408/GF413, so the bandwidth check does not report it twice); a SKU built with fewer links
   (H100 PCIe, H100 NVL: 12 of 18) is normal, not degraded; each model's link count and rate
   are read from the SKU catalog (sku/skus.json via sku.nvlink_norm), their one home.
5. Fabric classes (FABRICS): an 8-GPU NVSwitch host is judged as NVSwitch with NVLS (NVLink
   SHARP) or without it, a direct NV# pair/bridge as "nvlink", anything else as "pcie". NVLS is
   on where NCCL turns it on by default (NVSwitch and a Hopper or newer GPU, the SKU catalog's
   arch) unless NCCL_NVLS_ENABLE=0 is in effect (environment or NCCL config: Facts.nccl_config);
   every verdict states which (LinkBound.nvls). NVSwitch classes scale the measured curve's
   shape to the large-message ratio NCCL's maintainers quote and judge at 0.95 of it, as close
   as Azure's published floors sit to their measurements (tests/unit/test_fabric_classes.py
   checks each class against the cited public floor within FABRIC_MARGIN).
Limits: one calibration host for the curve's shape; small sizes are latency-bound and are not
judged (only sizes >= JUDGED_FROM).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpufleet import sku
from gpufleet.model import Facts, GpuNvLinks, gpu_link_kinds

MIB = 1 << 20
GIB = 1 << 30
JUDGED_FROM = 64 * MIB  # smaller messages measure latency, not links
FRACTION = 0.8  # measured must reach this share of the expectation

# Where each number comes from (docs/smoke.md repeats this table).
SOURCES: Mapping[str, str] = {
    "h200x2": "REFERENCE.md, 'Measured on a 2xH200 machine (2026-11-30)': nccl-tests 2.19.6 "
              "all_reduce_perf -b 1M -e 4G -f 4 -g 2, NCCL 2.28.9, NVLS off",
    "p2p_off": "REFERENCE.md, second day: NCCL_P2P_DISABLE=1 -> 26.8 GB/s at 64 MiB (2xH200)",
    "pcie": "PCI-SIG: 2.5/5/8/16/32/64 GT/s per lane for gen 1-6; 8b/10b (gen 1-2), 128b/130b "
            "(gen 3-5), gen 6 FLIT ~ 242/256",
    "h100_pcie": "Azure/azurehpc-health-checks#162: H100 PCIe has 12 of 18 NVLinks by design",
    "nvlink_speeds": "nvidia-smi nvlink -s: 26.562 GB/s per NVLink4 link (H100/H200 capture), "
                     "53.125 NVLink5 (GB200, GoogleCloudPlatform/cluster-toolkit#5942), "
                     "25.781 NVLink2 (V100, Azure/azhpc-diagnostics#73), 25 NVLink3 (A100)",
    "busbw": "nccl-tests doc/PERFORMANCE.md: busbw = S/t x 2(n-1)/n for all_reduce",
    "nccl_212": "NVIDIA/nccl-tests#212 (maintainer): 8xH100 all_reduce busbw ~480 GB/s with "
                "NVLS, ~370 with rings (NVLS off); 8xH200 475 (NVIDIA/nccl-tests#272)",
    "azure_floors": "Azure/azurehpc-health-checks@0e0a1ac conf/*.conf: ND H100 v5 >= 460 GB/s at "
                    "16 GiB, ND A100 v4 >= 228; SuperBench NDv4 A100 235.05 at 8 GiB "
                    "(../shared/reviews/anchors-2026-12-01.md 1A)",
}


@dataclass(frozen=True)
class FabricClass:
    """How busbw relates to the raw per-GPU link rate on one kind of fabric."""

    large_ratio: float | None  # busbw / raw at large messages; None: the measured curve as is
    fraction: float  # measured must reach this share of the expectation
    source: str  # keys of SOURCES


# A public floor and our floor for the same class may differ by at most this (the test's margin).
FABRIC_MARGIN = {"nvswitch_nvls": 0.05, "nvswitch": 0.05, "nvlink": 0.15}
FABRICS: Mapping[str, FabricClass] = {
    "nvswitch_nvls": FabricClass(480 / 478.116, 0.95, "nccl_212 azure_floors"),
    "nvswitch": FabricClass(370 / 478.116, 0.95, "nccl_212 azure_floors"),
    "nvlink": FabricClass(None, FRACTION, "h200x2"),
    "pcie": FabricClass(None, FRACTION, "p2p_off pcie"),
}
NVLS_ARCHS = frozenset({"hopper", "blackwell"})  # NVSwitch gen 3+ hosts: NCCL >= 2.17 defaults on

# The measured table: (GPU name, GPUs, link) -> size -> busbw GB/s.
MEASURED: Mapping[tuple[str, int, str], Mapping[int, float]] = {
    ("NVIDIA H200", 2, "NV18"): {
        1 * MIB: 66.6, 4 * MIB: 119.4, 16 * MIB: 212.9, 64 * MIB: 267.8,
        256 * MIB: 298.3, 1 * GIB: 330.3, 4 * GIB: 343.7,
    },
}  # fmt: skip
H200_RAW = 18 * 26.562  # 478.116 GB/s one way per GPU
NVLINK_RATIO: Mapping[int, float] = {
    s: v / H200_RAW for s, v in MEASURED[("NVIDIA H200", 2, "NV18")].items()
}
PCIE_RATIO: Mapping[int, float] = {
    s: r * (26.8 / 63.015) / NVLINK_RATIO[64 * MIB] for s, r in NVLINK_RATIO.items()
}
# GB/s per lane, one way, after line coding.
PCIE_LANE_GBPS: Mapping[int, float] = {1: 0.25, 2: 0.5, 3: 0.9846, 4: 1.9692, 5: 3.9385,
                                       6: 7.5625}


@dataclass(frozen=True)
class HostLinks:
    """What the model needs to know about one host's GPUs (from Facts or the smoke preflight)."""

    gpu_names: tuple[str, ...] = ()
    nvlink: tuple[GpuNvLinks, ...] = ()
    gpu_links: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # topo -m
    nvswitch: bool = False
    pcie: Mapping[int, tuple[int | None, int | None]] = field(default_factory=dict)
    nic_gbps: tuple[float, ...] = ()  # each NIC's rate, GB/s (multinode)
    nvls_setting: tuple[str, str] | None = None  # (NCCL_NVLS_ENABLE value, where it was set)


@dataclass(frozen=True)
class LinkIssue:
    gpu: int
    kind: str  # "inactive" (fewer links than the SKU) | "slow" (a link below its speed)
    detail: str


@dataclass(frozen=True)
class LinkBound:
    """The busbw a world's links should give per message size, and what that rests on."""

    basis: str  # "nvlink" | "nvswitch" | "pcie" | "network"
    gpus: int
    raw_gbps: float
    busbw_gbps: Mapping[int, float]
    ratio: Mapping[int, float]
    calibration: str
    inventory: Mapping[str, Any]
    issues: tuple[LinkIssue, ...] = ()
    fabric: str = ""  # a key of FABRICS
    nvls: str = ""  # the NVLS assumption, stated in every verdict
    fraction: float = FRACTION

    def judged(self) -> dict[int, float]:
        return {s: v for s, v in self.busbw_gbps.items() if s >= JUDGED_FROM}

    def evidence(self) -> dict[str, Any]:
        return {"basis": self.basis, "gpus": self.gpus, "raw_gbps": round(self.raw_gbps, 3),
                "expected_gbps": {str(s): round(v, 1) for s, v in self.busbw_gbps.items()},
                "ratio": {str(s): round(v, 3) for s, v in self.ratio.items()},
                "calibration": self.calibration, "inventory": dict(self.inventory),
                "fraction_required": self.fraction, "judged_from_bytes": JUDGED_FROM,
                "fabric": self.fabric, "nvls": self.nvls,
                "lowered_by": [i.detail for i in self.issues]}


def ratio_at(curve: Mapping[int, float], size: int) -> float:
    """The curve at `size`, linear in log2(size) between points, flat beyond them."""
    pts = sorted(curve.items())
    if size <= pts[0][0]:
        return pts[0][1]
    for (s0, r0), (s1, r1) in itertools.pairwise(pts):
        if size <= s1:
            t = (math.log2(size) - math.log2(s0)) / (math.log2(s1) - math.log2(s0))
            return r0 + t * (r1 - r0)
    return pts[-1][1]


def pcie_gbps(gen: int | None, width: int | None) -> float | None:
    if gen is None or width is None or gen not in PCIE_LANE_GBPS:
        return None
    return PCIE_LANE_GBPS[gen] * width


def link_issues(links: HostLinks) -> tuple[LinkIssue, ...]:
    """Links below the SKU's normal count or speed (nothing for a SKU built with fewer)."""
    out: list[LinkIssue] = []
    for g in links.nvlink:
        name = links.gpu_names[g.gpu_index] if g.gpu_index < len(links.gpu_names) else None
        norm = sku.nvlink_norm(name)
        if norm is None:
            continue
        active = [lk for lk in g.links if lk.active]
        if len(active) < norm.links:
            out.append(LinkIssue(g.gpu_index, "inactive",
                                 f"GPU {g.gpu_index}: {len(active)} of {norm.links} NVLinks "
                                 f"active ({norm.model} normal)"))
        slow = [lk for lk in active if lk.speed_gbps is not None
                and lk.speed_gbps < norm.link_gbps * 0.99]
        if slow:
            out.append(LinkIssue(g.gpu_index, "slow", f"GPU {g.gpu_index}: NVLink(s) "
                                 + ", ".join(f"{lk.link} at {lk.speed_gbps:g}" for lk in slow)
                                 + f" GB/s (normal {norm.link_gbps:g})"))
    return tuple(out)


def _all_nvlink(matrix: Mapping[str, Mapping[str, str]], n: int) -> bool:
    gpus = [f"GPU{i}" for i in range(n)]
    return all(re.fullmatch(r"NV\d+", matrix.get(a, {}).get(b, "")) for a in gpus for b in gpus
               if a != b)


def expect_host(links: HostLinks, nproc: int) -> LinkBound | None:
    """The expectation for `nproc` ranks on GPUs 0..nproc-1 of one host; None when the model
    has nothing to go on (fewer than 2 GPUs, or neither NVLink nor PCIe facts)."""
    if nproc < 2 or len(links.gpu_names) < nproc:
        return None
    issues = link_issues(links)
    per_gpu = {g.gpu_index: sum(lk.speed_gbps or 0.0 for lk in g.links if lk.active)
               for g in links.nvlink if g.gpu_index < nproc}
    inventory: dict[str, Any] = {
        "gpu_names": sorted(set(links.gpu_names[:nproc])),
        "nvlink": {str(g.gpu_index): {
            "active": sum(lk.active for lk in g.links), "listed": len(g.links),
            "speeds_gbps": sorted({lk.speed_gbps for lk in g.links if lk.speed_gbps})}
            for g in links.nvlink if g.gpu_index < nproc},
        "nvswitch": links.nvswitch,
    }
    nv_world = len(per_gpu) == nproc and all(v > 0 for v in per_gpu.values()) and (
        links.nvswitch or _all_nvlink(links.gpu_links, nproc))
    fabric, nvls = "pcie", "NVLS not applicable (no NVSwitch)"
    if nv_world:
        raw = min(per_gpu.values())
        basis, curve = ("nvswitch" if links.nvswitch else "nvlink"), NVLINK_RATIO
        calibration = "ratio of nccl-tests busbw to raw NVLink, measured on 2xH200 NV18"
        fabric = "nvlink"
        if links.nvswitch:
            fabric, nvls = nvls_state(links, nproc)
            scale = (FABRICS[fabric].large_ratio or 1.0) / NVLINK_RATIO[4 * GIB]
            curve = {s: r * scale for s, r in NVLINK_RATIO.items()}
            calibration = (f"{fabric}: 2xH200 NV18 curve shape scaled to "
                           f"{FABRICS[fabric].large_ratio:.3f} x raw at large messages "
                           f"({SOURCES['nccl_212']})")
    else:
        rates = [pcie_gbps(*links.pcie.get(i, (None, None))) for i in range(nproc)]
        known = [r for r in rates if r is not None]
        if len(known) < nproc:
            return None
        raw, basis, curve = min(known), "pcie", PCIE_RATIO
        inventory["pcie"] = {str(i): f"gen {links.pcie[i][0]} x{links.pcie[i][1]}"
                             for i in range(nproc)}
        calibration = ("NVLink ratio curve scaled to 26.8 GB/s at 64 MiB through host memory "
                       "on PCIe Gen5 x16 (one measured point)")
    sizes = sorted(set(curve) | {s for s in (2 * GIB, 8 * GIB)})
    ratio = {s: ratio_at(curve, s) for s in sizes}
    expected = {s: raw * r for s, r in ratio.items()}
    names = set(links.gpu_names[:nproc])
    kinds = gpu_link_kinds(links.gpu_links, nproc)
    link_type = next(iter(kinds)) if len(kinds) == 1 else None
    table = MEASURED.get((names.pop(), nproc, link_type or "")) if len(names) == 1 else None
    if table is not None and not issues and basis != "pcie":
        expected.update(table)
        ratio.update({s: v / raw for s, v in table.items()})
        calibration = "the measured nccl-tests table of this exact configuration"
    return LinkBound(basis=basis, gpus=nproc, raw_gbps=raw, busbw_gbps=expected,
                       ratio=ratio, calibration=calibration, inventory=inventory,
                       issues=tuple(i for i in issues if i.gpu < nproc), fabric=fabric,
                       nvls=nvls, fraction=FABRICS[fabric].fraction)


def nvls_state(links: HostLinks, nproc: int) -> tuple[str, str]:
    """(fabric class, the NVLS assumption in words) for an NVSwitch world."""
    if links.nvls_setting is not None and links.nvls_setting[0].strip() == "0":
        return "nvswitch", f"NVLS off: NCCL_NVLS_ENABLE=0 in {links.nvls_setting[1]}"
    archs = {m.arch for m in (sku.match(n)[0] for n in links.gpu_names[:nproc]) if m}
    if archs and archs <= NVLS_ARCHS:
        where = (f"NCCL_NVLS_ENABLE={links.nvls_setting[0]} in {links.nvls_setting[1]}"
                 if links.nvls_setting else "NCCL's default on NVSwitch with "
                 + "/".join(sorted(archs)) + " GPUs")
        return "nvswitch_nvls", f"NVLS on: {where}"
    return "nvswitch", "NVLS unsupported here (NVSwitch before Hopper)"


def expect_world(hosts: Sequence[tuple[LinkBound | None, HostLinks]]) -> LinkBound | None:
    """A multinode world: each host's own bound, and the NICs' total rate per host."""
    if not hosts or any(e is None for e, _ in hosts):
        return None
    own = [e for e, _ in hosts if e is not None]
    nets = [sum(links.nic_gbps) for _, links in hosts]
    if any(n <= 0 for n in nets):
        return None
    intra = min(e.raw_gbps for e in own)
    net = min(nets)
    if intra <= net:
        worst = min(own, key=lambda e: e.raw_gbps)
        return LinkBound(basis=worst.basis, gpus=sum(e.gpus for e in own), raw_gbps=intra,
                           busbw_gbps={s: intra * r for s, r in worst.ratio.items()},
                           ratio=dict(worst.ratio), calibration=worst.calibration,
                           inventory={"nic_gbps_per_host": nets})
    ratio = {s: ratio_at(NVLINK_RATIO, s) for s in own[0].ratio}
    return LinkBound(basis="network", gpus=sum(e.gpus for e in own), raw_gbps=net,
                       busbw_gbps={s: net * r for s, r in ratio.items()}, ratio=ratio,
                       calibration="NVLink ratio curve applied to the NICs' total rate "
                       "(uncalibrated for networks)",
                       inventory={"nic_gbps_per_host": nets})


def has_nvswitch(f: Facts) -> bool:
    """NVSwitches in lspci (NVIDIA class-0680 bridges: A100 and Hopper HGX), or, where they are
    no PCI bridge (HGX B200: managed through a ConnectX bridge, tests/fleet/profiles/README.md
    row b200x8), a running fabric manager with every GPU pair NVLink-joined in `topo -m`: the
    fabric manager exists to configure NVSwitches (NVIDIA Fabric Manager User Guide) and a
    bridged pair host does not run it."""
    fab = f.fabric
    if fab is None:
        return False
    if fab.nvswitch_count > 0:
        return True
    links = f.topology.links if f.topology is not None else {}
    return fab.manager_running is True and len(f.gpus) > 2 and _all_nvlink(links, len(f.gpus))


def links_from_facts(f: Facts) -> HostLinks:
    return HostLinks(
        gpu_names=tuple(g.name or "" for g in f.gpus),
        nvlink=f.nvlink,
        gpu_links=f.topology.links if f.topology is not None else {},
        nvswitch=has_nvswitch(f),
        pcie={g.index: (g.pcie_gen_current, g.pcie_width_current) for g in f.gpus},
        nic_gbps=tuple(p.rate_gbit / 8 for p in f.ib_ports or () if p.rate_gbit),
        nvls_setting=next(((st.value, st.source) for st in (
            f.nccl_config.effective if f.nccl_config is not None else ())
            if st.name == "NCCL_NVLS_ENABLE"), None),
    )


