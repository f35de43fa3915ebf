"""GF460 and GF622-GF624: GPUDirect RDMA, on the host and in the smoke runs.

GF460: a host with GPUs and an ACTIVE RDMA port has neither path by which an HCA can reach GPU
memory (probes/gdr.py has both and their sources). GF622/GF624: the full level's per-HCA
`ib_write_bw --use_cuda` loopback (smoke/remote/gdr.py) below its floor, or not measured.
GF623: a multinode NCCL world whose NET/IB connections ran without GPUDirect although every host
has a path (the transport record, smoke/nccl_paths.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpufleet.model import Facts, Finding, SmokeCheck, SmokeResult
from gpufleet.rules.base import Ctx, finding

# The ids this module emits (tests/unit/test_rules_plumbing.py holds it to that).
RULES: tuple[str, ...] = ("GF460", "GF622", "GF623", "GF624")

# The peer-memory clients NCCL accepts (NVIDIA/nccl@276b2fe4 src/transport/net_ib/gdr.cc):
# nvidia_peermem and nv_peer_mem both register as "nv_mem"; "nv_mem_nc" is Google's variant.
PEER_CLIENTS = ("nv_mem", "nv_mem_nc")
DMABUF_KERNEL = (5, 12)  # ib_umem_dmabuf: the kernel's RDMA dma-buf import
_RELEASE = re.compile(r"^([0-9]+)\.([0-9]+)")


def peer_memory(facts: Facts) -> bool | None:
    """A peer-memory client registered with ib_core; None where the gdr facts were not read."""
    if facts.gdr is None:
        return None
    return any(name in facts.gdr.memory_peers for name in PEER_CLIENTS)


def dmabuf(facts: Facts) -> tuple[bool | None, str]:
    """(DMA-BUF possible, why not): the open kernel modules on a 5.12+ kernel; None: unknown."""
    flavor = facts.driver.kernel_module_flavor
    m = _RELEASE.match(facts.os.kernel or "")
    release = (int(m.group(1)), int(m.group(2))) if m else None
    if flavor == "proprietary":
        return False, "DMA-BUF needs the open GPU kernel modules, the proprietary ones are loaded"
    if release is not None and release < DMABUF_KERNEL:
        return False, f"DMA-BUF needs Linux 5.12+, the kernel is {facts.os.kernel}"
    if flavor == "open" and release is not None:
        return True, ""
    return None, "the kernel module flavor or the kernel release was not read"


def gdr_path(facts: Facts | None) -> bool | None:
    """Whether the host has any GPUDirect RDMA path; None where that is unknown."""
    if facts is None:
        return None
    peer, (dma, _) = peer_memory(facts), dmabuf(facts)
    if peer or dma:
        return True
    return None if peer is None or dma is None else False


def check(ctx: Ctx) -> Iterable[Finding]:
    for host, facts in ctx.with_facts():
        yield from _no_path(host.name, facts)
    facts_of = {h.name: f for h, f in ctx.with_facts()}
    for _h, smoke, world in ctx.worlds():
        yield from _bandwidth(smoke, world)
        yield from _without_gdr(smoke, world, facts_of)


def _no_path(host: str, facts: Facts) -> Iterable[Finding]:
    active = [f"{link.device}/{link.port}" for link in facts.ib_links or ()
              if link.state == "ACTIVE"]
    if not facts.gpus or not active or gdr_path(facts) is not False or facts.gdr is None:
        return
    modules = dict(facts.gdr.modules)
    if "nvidia_peermem" in modules or "nv_peer_mem" in modules:
        peer = ("nvidia_peermem is loaded but registered no peer-memory client with ib_core (no "
                "/sys/kernel/mm/memory_peers/nv_mem: an inbox ib_core without MLNX_OFED's "
                "peer-memory API, where the module does nothing)")
    else:
        peer = "no peer-memory module (nvidia_peermem) is loaded"
    why = f"{peer}; {dmabuf(facts)[1]}"
    yield finding(
        "GF460", [host],
        f"{host}: no GPUDirect RDMA path for {len(facts.gpus)} GPU(s) and RDMA port(s) "
        f"{', '.join(active[:8])}: {why}",
        {"hcas": active, "modules": modules, "memory_peers": dict(facts.gdr.memory_peers),
         "kernel": facts.os.kernel, "kernel_module_flavor": facts.driver.kernel_module_flavor,
         "peer_memory": False, "dmabuf": False},
        why=why)


# ------------------------------------------------------------------------- the gdr check


def judged(check: SmokeCheck) -> bool:
    """Whether a failed `gdr` check's rows are this module's (GF622/GF624), not GF601's."""
    rows = check.data.get("hcas")
    return check.name == "gdr" and isinstance(rows, Sequence) and bool(rows)


def _bandwidth(smoke: SmokeResult, world: tuple[str, ...]) -> Iterable[Finding]:
    for c in smoke.checks:
        if not judged(c):
            continue
        for row in c.data["hcas"]:
            if not isinstance(row, Mapping):
                continue
            yield from _hca(row, world)


def _hca(row: Mapping[str, Any], world: tuple[str, ...]) -> Iterable[Finding]:
    host = str(row.get("host") or world[0])
    hca = str(row.get("hca") or "?")
    dev = hca.split("/", maxsplit=1)[0]
    gbps, floor = row.get("gbps"), row.get("floor_gbit")
    base = {"hca": hca, "gpu": row.get("gpu"), "numa": row.get("numa"),
            "rate_gbit": row.get("rate_gbit")}
    if row.get("error") or not isinstance(gbps, (int, float)):
        error = str(row.get("error") or "no bandwidth reported")
        yield finding("GF624", [host], f"{host}: GPUDirect loopback on {hca} (GPU "
                      f"{row.get('gpu')}) gave no bandwidth: {error}",
                      {**base, "error": error}, dev=dev, gpu=row.get("gpu"), error=error)
    elif isinstance(floor, (int, float)) and gbps < floor:
        yield finding("GF622", [host], f"{host}: GPUDirect RDMA on {hca} (GPU {row.get('gpu')}) "
                      f"at {gbps:.1f} Gb/s, floor {floor:.0f} Gb/s ({row.get('basis')})",
                      {**base, "gbps": gbps, "floor_gbit": floor, "basis": row.get("basis")},
                      hca=hca, dev=dev, gpu=row.get("gpu"), gbps=f"{gbps:.1f}",
                      floor=f"{floor:.0f}", basis=row.get("basis"))


# ------------------------------------------------------------------- NET/IB without GDRDMA


def _causes(members: Sequence[str], facts: Mapping[str, Facts]) -> list[str]:
    out = []
    for name in members:
        f = facts.get(name)
        conf = f.nccl_config if f else None
        for s in conf.effective if conf else ():
            value = s.value.strip()
            if s.name == "NCCL_NET_GDR_LEVEL":
                out.append(f"NCCL_NET_GDR_LEVEL={value} in {s.source} on {name}")
            if s.name == "NCCL_DMABUF_ENABLE" and value == "0" and f is not None \
                    and not peer_memory(f):
                out.append(f"NCCL_DMABUF_ENABLE=0 in {s.source} on {name}, whose only "
                           "GPUDirect path is DMA-BUF")
    return out or ["the GPU and its HCA may be farther apart on PCIe than NCCL_NET_GDR_LEVEL "
                   "allows (default PXB: `nvidia-smi topo -m`), or the ranks' container lacks "
                   "the peer-memory module's view; NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET "
                   "says which"]


def _without_gdr(smoke: SmokeResult, world: tuple[str, ...],
                 facts: Mapping[str, Facts]) -> Iterable[Finding]:
    rec = smoke.transport
    if rec is None or smoke.backend != "nccl" or len(world) < 2:
        return
    plain = [c for c in rec.connections if c.transport == "NET/IB" and c.gdr is False]
    if not plain or not all(gdr_path(facts.get(m)) for m in world):
        return  # a host without a path is GF460's; an unknown one is not judged
    causes = _causes(world, facts)
    named = ", ".join(f"rank {c.src} -> {c.dst}" for c in plain[:6])
    yield finding(
        "GF623", world,
        f"multinode world ({', '.join(world)}) ran NET/IB without GPUDirect RDMA ({named}) "
        "although every host has a GPUDirect path",
        {"connections": [f"{c.src}->{c.dst} dev {c.net_dev}" for c in plain],
         "hcas": list(rec.hcas), "causes": causes},
        cause=causes[0])
