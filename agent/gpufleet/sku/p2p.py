"""GPU<->GPU copies (p2p_gbps): each ordered pair's expectation from the facts, its measurement
from the smoke's `p2p` check (smoke/remote/p2p.py: nvbandwidth's device_to_device_memcpy_read_ce),
and the likely cause of a slow pair. Pure.

Which pairs are expected to copy over NVLink (the catalog knows no PCIe P2P rate, so only those
are judged), both GPUs being catalog models with NVLink and listing NVLinks in `nvidia-smi
nvlink -s` (active or not: a GPU whose links are all down is still judged):
- NVSwitch hosts: every pair, at the SKU's links x per-link rate x the p2p ratio;
- direct NVLink (bridges, no NVSwitch): pairs `topo -m` shows as NVk. A GPU with one NVLink peer
  sends all its links there, so the pair expects the SKU's count (a pair at NV16 of 18 is slow);
  a GPU with several NVLink peers splits them (HGX A100 4-GPU: NV4 to each of 3), so the pair
  expects k. Pairs with no NVLink between them on such hosts cross PCIe by design: not judged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpufleet.model import Facts, SmokeResult
from gpufleet.sku import bandwidth, causes


@dataclass(frozen=True)
class PairExpectation:
    src: int  # the GPU read from (nvidia-smi index)
    dst: int  # the GPU reading: its copy engine runs the copy
    links: float  # NVLinks the pair's bytes should cross (per direction)
    scale: float  # links / the SKU's per-GPU link count


@dataclass(frozen=True)
class PairMeasured:
    src: int
    dst: int
    gbps: float | None
    error: str | None = None
    peer_access: bool | None = None


def _nv(cell: str | None) -> int | None:
    m = re.fullmatch(r"NV(\d+)", (cell or "").strip())
    return int(m.group(1)) if m else None


def topo_cell(f: Facts, a: int, b: int) -> str | None:
    links = f.topology.links if f.topology is not None else {}
    return links.get(f"GPU{a}", {}).get(f"GPU{b}")


def nvswitch(f: Facts) -> bool:
    return bandwidth.has_nvswitch(f)


def pair_expectations(f: Facts, sku_links: Mapping[int, float]) -> list[PairExpectation]:
    """Every ordered pair to judge; `sku_links`: GPU index -> its SKU's NVLink count, for the
    GPUs that have a p2p expectation at all (catalog model with NVLink, links listed)."""
    out: list[PairExpectation] = []
    idx = sorted(sku_links)
    for dst in idx:
        nv_peers = [j for j in idx if j != dst and _nv(topo_cell(f, dst, j))]
        for src in idx:
            if src == dst:
                continue
            full = min(sku_links[dst], sku_links[src])
            if nvswitch(f):
                links = full
            else:
                k = _nv(topo_cell(f, dst, src))
                if k is None:
                    continue
                links = full if len(nv_peers) == 1 else float(k)
            out.append(PairExpectation(src, dst, links, links / sku_links[dst]))
    return out


def _check(s: SmokeResult | None) -> Mapping[str, Any]:
    for c in s.checks if s is not None else ():
        if c.name == "p2p":
            return c.data
    return {}


def record(f: Facts, s: SmokeResult | None) -> Mapping[str, Any] | None:
    """This host's matrix record: the one whose devices are this host's GPUs (by UUID), else
    on a one-host run the only one there is."""
    mats = [r for r in (_check(s).get("per_rank") or {}).values()
            if isinstance(r, Mapping) and isinstance(r.get("pairs"), list)]
    uuids = {(g.uuid or "").lower() for g in f.gpus if g.uuid}
    for r in mats:
        devs = r.get("devices") if isinstance(r.get("devices"), Mapping) else {}
        if devs and {str(u or "").lower() for u in devs.values()} <= uuids:
            return r
    return mats[0] if len(mats) == 1 and s is not None and len(s.hosts) <= 1 else None


@dataclass(frozen=True)
class Matrix:
    pairs: Mapping[tuple[int, int], PairMeasured]  # (src, dst) nvidia-smi indexes
    error: str | None = None  # the matrix could not start (every pair missing for it)
    method: str = ""


def measured(f: Facts, s: SmokeResult | None) -> Matrix | None:
    """This host's measured matrix; None when none ran here (quick level, one GPU, the check
    narrowed away, another host's record)."""
    rec = record(f, s)
    if rec is None:
        return None
    by_uuid = {(g.uuid or "").lower(): g.index for g in f.gpus if g.uuid}
    raw = rec.get("devices")
    devs: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}

    def index(torch_idx: Any) -> int | None:
        u = str(devs.get(str(torch_idx)) or "").lower()
        if u in by_uuid:
            return by_uuid[u]
        return torch_idx if isinstance(torch_idx, int) and not u else None

    out: dict[tuple[int, int], PairMeasured] = {}
    for p in rec["pairs"]:
        if not isinstance(p, Mapping):
            continue
        src, dst = index(p.get("src")), index(p.get("dst"))
        if src is None or dst is None:
            continue
        gbps = p.get("gbps")
        ok = isinstance(gbps, (int, float)) and not isinstance(gbps, bool) and gbps > 0
        access = p.get("peer_access")
        out[(src, dst)] = PairMeasured(src, dst, float(gbps) if ok and gbps else None,
                                       None if ok else str(p.get("error") or "no value"),
                                       access if isinstance(access, bool) else None)
    err = rec.get("error")
    return Matrix(out, str(err) if err else None, str(rec.get("method") or ""))


def pair_causes(f: Facts, src: int, dst: int, m: PairMeasured | None) -> list[dict[str, Any]]:
    """Why copies dst <- src are slow, most specific first."""
    out: list[dict[str, Any]] = []
    if m is not None and m.peer_access is False:
        out.append({"cause": "p2p_unavailable",
                    "text": f"CUDA reports no peer access from GPU {dst} to GPU {src} "
                            "(cudaDeviceCanAccessPeer 0): the copy is staged through host "
                            "memory"})
    cell = topo_cell(f, dst, src)
    if cell is not None and _nv(cell) is None:
        out.append({"cause": "pcie_path",
                    "text": f"`nvidia-smi topo -m` shows GPU {dst} - GPU {src} as {cell} (PCIe "
                            "or host bridge), not NVLink"})
    issues = [i for i in bandwidth.link_issues(bandwidth.links_from_facts(f))
              if i.gpu in (src, dst)]
    if issues:
        out.append({"cause": "nvlink_down", "text": "NVLink: " + "; ".join(
            i.detail for i in issues), "gpus": sorted({i.gpu for i in issues})})
    states = f.fabric.gpu_states if f.fabric is not None else {}
    bad = [g for g in (src, dst) if states.get(g) not in (None, "Completed", "N/A")]
    if nvswitch(f) and bad:
        out.append({"cause": "fabric_incomplete",
                    "text": "NVSwitch fabric not set up for GPU(s) " + ", ".join(
                        f"{g} ({states.get(g)})" for g in bad)})
    for gi in (dst, src):
        g = next((x for x in f.gpus if x.index == gi), None)
        for c in causes.likely(f, g, None, "p2p_gbps"):
            if c["cause"] not in {x["cause"] for x in out}:
                out.append({**c, "text": f"GPU {gi}: {c['text']}"})
    return out


FIXES = {
    "p2p_unavailable": "check `nvidia-smi topo -p2p r`; allow P2P between the GPUs (IOMMU "
                       "passthrough or off, PCIe ACS off for the GPUs' switches in the BIOS) "
                       "and, on NVSwitch hosts, that nvidia-fabricmanager runs",
    "pcie_path": "check the NVLinks (`nvidia-smi nvlink -s`, `nvidia-smi nvlink -e`) and, on "
                 "NVSwitch hosts, nvidia-fabricmanager; reset the GPUs, else RMA the baseboard",
    "nvlink_down": "`nvidia-smi nvlink -s -i GPU` and `nvidia-smi nvlink -e -i GPU`; reset the "
                   "GPU (`nvidia-smi -r -i GPU`), else RMA the GPU or baseboard",
    "fabric_incomplete": "restart nvidia-fabricmanager and check its log "
                         "(/var/log/fabricmanager.log), then `nvidia-smi -q -d FABRIC`",
}


def fix(c: Mapping[str, Any]) -> str:
    return FIXES.get(str(c["cause"])) or causes.fix(dict(c))
