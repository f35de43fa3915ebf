"""A host's expectations (model.Expected) from its facts alone, with measured values beside them
after a smoke run. Pure. docs/expectations.md explains each line:

- matmul_tflops (per GPU and dtype) and hbm_gbps (per GPU): the catalog's datasheet peak x the
  efficiency ratio of the GPU's arch (skus.json `efficiency`), floor = expected x floor ratio.
- h2d_gbps / d2h_gbps (per GPU): the PCIe link at its max (facts, else the catalog) x the pinned
  ratio; the smoke's own hostdev_bw check judges it (GF530), this records it.
- allreduce_busbw_gbps: the host's own links (gpufleet.sku.bandwidth, fabric class and NVLS stated
  there) at the largest judged size, floor = its fraction_required; GF504 judges it.
- nvlink_link_gbps (per GPU): the SKU's per-link rate; GF413 judges it.
- p2p_gbps (per GPU with NVLink, hosts of 2+ GPUs): links x per-link rate x the p2p ratio, per
  ordered pair (sku/p2p.py says which pairs and their share of the links); measured by the full
  level's `p2p` check (nvbandwidth's device_to_device_memcpy_read_ce); the GPU's line shows its
  pair furthest below expectation (`peer`); GF544 judges every pair.
- nic_gbps (per host with RDMA ports): the SKU's port rate; measured from the facts (the slowest
  of the N fastest ports); GF545 judges it.
Each floor may be replaced per group or host (gpufleet_perf_floors, sku/floors.py).
A GPU the catalog does not know gets no line (rules/perf.py reports "no reference", GF542).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

from gpufleet import sku
from gpufleet.model import Expected, Facts, Gpu, SmokeResult
from gpufleet.sku import bandwidth, p2p
from gpufleet.sku.floors import override_key

DTYPES = ("bf16", "fp16", "tf32", "fp32", "fp8", "fp64")


def pci_device_id(f: Facts, g: Gpu) -> str | None:
    """The GPU's PCI device id from the pci_gpus family, matched on the bus address."""
    if not g.bus_id:
        return None
    addr = g.bus_id[-12:].lower()
    for p in f.pci_gpus or ():
        if p.address[-12:].lower() == addr:
            return p.device_id
    return None


def model_of(f: Facts, g: Gpu) -> tuple[sku.Model | None, str]:
    return sku.match(g.name, pci_device_id(f, g))


def _check(s: SmokeResult | None, name: str) -> Mapping[str, Any]:
    for c in s.checks if s is not None else ():
        if c.name == name:
            return c.data
    return {}


def by_gpu(f: Facts, s: SmokeResult | None, name: str) -> dict[int, Mapping[str, Any]]:
    """GPU index -> that GPU's rank record of check `name`: by UUID, else (a one-host world of
    every GPU) rank = GPU index."""
    per_rank = _check(s, name).get("per_rank") or {}
    uuids = {(g.uuid or "").lower(): g.index for g in f.gpus if g.uuid}
    out: dict[int, Mapping[str, Any]] = {}
    lone = s is not None and len(s.hosts) <= 1 and s.world_size == len(f.gpus)
    for rk, rec in per_rank.items():
        if not isinstance(rec, Mapping):
            continue
        ident = rec.get("identity") or {}
        uuid = str(ident.get("uuid") or rec.get("uuid") or "").lower()
        if uuid in uuids:
            out[uuids[uuid]] = rec
        elif lone and str(rk).isdigit():
            out[int(rk)] = rec
    return out


def _line(metric: str, unit: str, peak: sku.Sourced, ratio: tuple[sku.Sourced, str], *,
          floor: sku.Sourced, model: sku.Model, how: str, **kw: Any) -> Expected:
    cat = sku.load()
    r, basis = ratio
    expected = peak.value * r.value
    return Expected(
        metric=metric, unit=unit, expected=round(expected, 1),
        floor=round(expected * floor.value, 1),
        source=f"peak {peak.value:g} ({cat.cite(peak.source)}) x ratio {r.value:g} "
               f"({cat.cite(r.source)}); floor x{floor.value:g} ({cat.cite(floor.source)})",
        basis=f"{model.key} ({how}): catalog peak x {basis} {model.arch} ratio"
              if basis == "measured" else
              f"{model.key} ({how}): catalog peak x ratio borrowed from another arch "
              f"(none measured for {model.arch})",
        **kw)


def _gpu_lines(f: Facts, s: SmokeResult | None, g: Gpu,
               p2p_rows: Mapping[int, Expected]) -> Iterator[Expected]:
    cat = sku.load()
    model, how = model_of(f, g)
    if model is None:
        return
    gemm = by_gpu(f, s, "gemm").get(g.index, {}).get("tflops") or {}
    quick = s.matmul_tflops.get(g.index) if s is not None and len(s.hosts) <= 1 else None
    for dtype in DTYPES:
        peak = model.peaks.get(f"{dtype}_tflops")
        ratio = sku.efficiency(model, f"{dtype}_tflops")
        if peak is None or ratio is None:
            continue
        got = gemm.get(dtype)
        if got is None and dtype == "bf16" and quick is not None:
            got = quick  # the quick level's matmul check is bf16 8192^3 too
        yield _line("matmul_tflops", "TFLOP/s", peak, ratio, floor=cat.floors["compute"],
                    model=model, how=how,
                    gpu=g.index, dtype=dtype,
                    measured=round(float(got), 1) if got is not None else None)
    peak, ratio = model.peaks.get("hbm_gbps"), sku.efficiency(model, "hbm_gbps")
    if peak is not None and ratio is not None:
        rec = by_gpu(f, s, "membw").get(g.index, {})
        got = rec.get("gbps") if rec.get("counted") == "one side" else None
        yield _line("hbm_gbps", "GB/s", peak, ratio, floor=cat.floors["hbm"], model=model,
                    how=how, gpu=g.index,
                    measured=round(float(got), 1) if got else None)
    yield from _pinned_lines(f, s, g, model, how)
    if g.index in p2p_rows:
        yield p2p_rows[g.index]
    link = model.peaks.get("nvlink_link_gbps")
    if link is not None:
        speeds = [lk.speed_gbps for n in f.nvlink if n.gpu_index == g.index for lk in n.links
                  if lk.active and lk.speed_gbps]
        yield Expected(metric="nvlink_link_gbps", unit="GB/s", expected=link.value,
                       floor=round(link.value * 0.99, 3), source=cat.cite(link.source),
                       basis=f"{model.key} ({how}): the SKU's per-link rate; floor 0.99 x "
                             "(nvidia-smi rounds)", gpu=g.index,
                       measured=min(speeds) if speeds else None)


def _pinned_lines(f: Facts, s: SmokeResult | None, g: Gpu, model: sku.Model,
                  how: str) -> Iterator[Expected]:
    cat = sku.load()
    gen = g.pcie_gen_max or (int(model.peaks["pcie_gen"].value) if "pcie_gen" in model.peaks
                             else None)
    width = g.pcie_width_max or (int(model.peaks["pcie_width"].value)
                                 if "pcie_width" in model.peaks else None)
    raw = bandwidth.pcie_gbps(gen, width)
    ratio = sku.efficiency(model, "pinned_gbps")
    if raw is None or ratio is None:
        return
    rows = _check(s, "hostdev_bw").get("per_gpu") or {}
    alone: Mapping[str, Any] = {}
    for rk, row in rows.items():
        uuid = ((row.get("link") or {}).get("uuid") or "").lower()
        if (g.uuid and uuid == g.uuid.lower()) or (not uuid and str(rk) == str(g.index)):
            alone = row.get("alone") or {}
    src = f"PCIe Gen{gen} x{width} = {raw:.1f} GB/s ({cat.cite('pcisig')})"
    for metric, key in (("h2d_gbps", "pinned_h2d"), ("d2h_gbps", "pinned_d2h")):
        got = alone.get(key)
        expected = raw * ratio[0].value
        yield Expected(metric=metric, unit="GB/s", expected=round(expected, 1),
                       floor=round(expected * cat.floors["pinned"].value, 1),
                       source=f"{src} x ratio {ratio[0].value:g} ({cat.cite(ratio[0].source)});"
                              f" floor x{cat.floors['pinned'].value:g} "
                              f"({cat.cite(cat.floors['pinned'].source)})",
                       basis=f"{model.key} ({how}): PCIe link at its max x pinned-copy ratio",
                       gpu=g.index, measured=round(float(got), 1) if got else None)


def _p2p_base(f: Facts, g: Gpu) -> Expected | None:
    """GPU g's copy from a peer over all its NVLinks (nvbandwidth's
    device_to_device_memcpy_read_ce): the SKU's links x per-link rate x the p2p ratio. Only on
    a host of several GPUs whose GPU g lists NVLinks (active or not: a GPU whose links are all
    down is judged, not skipped); pairs scale it (sku/p2p.py)."""
    cat = sku.load()
    model, how = model_of(f, g)
    if model is None:
        return None
    links, rate = model.peaks.get("nvlink_links"), model.peaks.get("nvlink_link_gbps")
    ratio = sku.efficiency(model, "p2p_gbps")
    listed = any(n.links for n in f.nvlink if n.gpu_index == g.index)
    if len(f.gpus) < 2 or not listed or links is None or rate is None or ratio is None:
        return None
    raw = links.value * rate.value
    r, basis = ratio
    floor = cat.floors["p2p"]
    return Expected(
        metric="p2p_gbps", unit="GB/s", expected=round(raw * r.value, 1),
        floor=round(raw * r.value * floor.value, 1),
        source=f"{links.value:g} links ({cat.cite(links.source)}) x {rate.value:g} GB/s "
               f"({cat.cite(rate.source)}) x ratio {r.value:g} ({cat.cite(r.source)}); floor "
               f"x{floor.value:g} ({cat.cite(floor.source)})",
        basis=f"{model.key} ({how}): NVLink per GPU x {basis} p2p ratio"
              + ("" if basis == "measured" else f" (none measured for {model.arch})"),
        gpu=g.index)


def p2p_pairs(f: Facts, s: SmokeResult | None,
              floors: Mapping[str, float] | None = None,
              ) -> list[tuple[Expected, p2p.PairMeasured | None]]:
    """Every ordered pair judged on this host (gpu = the reading GPU, peer = the GPU read from)
    with its measurement: None where the matrix did not run or left the pair out."""
    bases = {g.index: b for g in f.gpus if (b := _p2p_base(f, g)) is not None}
    sku_links = {g.index: md.peaks["nvlink_links"].value for g in f.gpus
                 if g.index in bases and (md := model_of(f, g)[0]) is not None}
    mat = p2p.measured(f, s)
    out: list[tuple[Expected, p2p.PairMeasured | None]] = []
    for pe in p2p.pair_expectations(f, sku_links):
        base = bases[pe.dst]
        m = mat.pairs.get((pe.src, pe.dst)) if mat is not None else None
        extra = "" if pe.scale == 1 else (
            f" x {pe.links:g}/{sku_links[pe.dst]:g} links (topo -m "
            f"{p2p.topo_cell(f, pe.dst, pe.src)}: this pair's share)")
        e = dataclasses.replace(
            base, expected=round(base.expected * pe.scale, 1),
            floor=round(base.floor * pe.scale, 1), source=base.source + extra, peer=pe.src,
            measured=round(m.gbps, 1) if m is not None and m.gbps is not None else None)
        out.append((_overridden(e, floors), m))
    return out


def _p2p_lines(f: Facts, s: SmokeResult | None) -> dict[int, Expected]:
    """One line per reading GPU: its pair furthest below expectation when measured (peer names
    it), else its weakest pair's expectation (peer None)."""
    rows: dict[int, list[Expected]] = {}
    for e, _m in p2p_pairs(f, s):
        rows.setdefault(e.gpu or 0, []).append(e)
    out: dict[int, Expected] = {}
    for g, lines in rows.items():
        got = [e for e in lines if e.measured is not None]
        if got:
            out[g] = min(got, key=lambda e: (e.measured or 0.0) / e.expected)
        else:
            out[g] = dataclasses.replace(min(lines, key=lambda e: e.expected), peer=None)
    return out


def expected_nics(f: Facts, model: sku.Model) -> int:
    """RDMA ports the SKU's host should have at its rate: gpud's thresholds (skus.json
    gpud-ib-ports): 1 on a 200 Gb/s SKU, else one per GPU up to 8."""
    rate = model.peaks["nic_gbit"].value
    return 1 if rate < 400 else min(len(f.gpus), 8)


def _nic_line(f: Facts) -> Iterator[Expected]:
    """The host's RDMA ports against its SKU's rate: measured is the rate of the N-th fastest
    port, N the ports the SKU expects, so a frontend NIC at a lower rate beside them is not
    judged. A host with no RDMA port gets no line (not a multinode host)."""
    models = [m for g in f.gpus if (m := model_of(f, g)[0]) is not None and "nic_gbit" in m.peaks]
    if not f.ib_ports or not models:
        return
    model = models[0]
    cat = sku.load()
    want = model.peaks["nic_gbit"]
    n = expected_nics(f, model)
    rates = sorted((p.rate_gbit for p in f.ib_ports if p.rate_gbit), reverse=True)
    got = rates[n - 1] / 8 if len(rates) >= n else (0.0 if rates else None)
    yield Expected(
        metric="nic_gbps", unit="GB/s", expected=round(want.value / 8, 1),
        floor=round(want.value / 8, 1),
        source=f"{n} port(s) at >= {want.value:g} Gb/s ({cat.cite(want.source)})",
        basis=f"{model.key}: the {n} fastest RDMA port(s) each at the SKU's rate; measured = "
              f"the slowest of them ({len(rates)} port(s) with a rate)",
        measured=round(got, 1) if got is not None else None)


def _busbw_line(f: Facts, s: SmokeResult | None) -> Iterator[Expected]:
    data = _check(s, "busbw")
    ev: Mapping[str, Any] = data.get("expectation") or {}
    if not ev:
        bound = bandwidth.expect_host(bandwidth.links_from_facts(f), len(f.gpus))
        if bound is None:
            return
        ev = bound.evidence()
    exp = {int(k): float(v) for k, v in (ev.get("expected_gbps") or {}).items()}
    judged = [k for k in exp if k >= int(ev.get("judged_from_bytes") or bandwidth.JUDGED_FROM)]
    measured = dict(s.busbw_gbps) if s is not None else {}
    size = max((k for k in judged if k in measured), default=max(judged, default=None))
    if size is None:
        return
    frac = float(ev.get("fraction_required") or bandwidth.FRACTION)
    got = measured.get(size)
    yield Expected(metric="allreduce_busbw_gbps", unit="GB/s", expected=round(exp[size], 1),
                   floor=round(exp[size] * frac, 1),
                   source=str(ev.get("calibration") or ""),
                   basis=f"{ev.get('basis')} links, raw {ev.get('raw_gbps')} GB/s x ratio; "
                         f"{ev.get('nvls') or 'NVLS off (as calibrated)'}",
                   bytes=size, measured=round(float(got), 1) if got is not None else None)


def _overridden(e: Expected, floors: Mapping[str, float] | None) -> Expected:
    key = override_key(e.metric, e.dtype, floors)
    if key is None or floors is None:
        return e
    return dataclasses.replace(
        e, floor=floors[key],
        source=f"floor {floors[key]:g} from the inventory (gpufleet_perf_floors {key}; the "
               f"catalog's was {e.floor:g}); {e.source}",
        basis=f"{e.basis}; floor overridden by gpufleet_perf_floors {key}")


def host_expectations(f: Facts | None, s: SmokeResult | None = None,
                      floors: Mapping[str, float] | None = None) -> tuple[Expected, ...]:
    """Every expectation for the host (facts alone at --level facts), measured where smoked;
    `floors` (the host's gpufleet_perf_floors) replaces the catalog's floor per metric."""
    if f is None or not f.gpus:
        return ()
    rows = _p2p_lines(f, s)
    out = [e for g in f.gpus for e in _gpu_lines(f, s, g, rows)]
    out += list(_busbw_line(f, s))
    out += list(_nic_line(f))
    return tuple(_overridden(e, floors) for e in out)


def unknown_models(f: Facts) -> list[str]:
    """GPU names the catalog has no reference for (each once)."""
    names = [g.name or "?" for g in f.gpus if model_of(f, g)[0] is None]
    return sorted(set(names))
