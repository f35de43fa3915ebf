"""GF5xx: bandwidth and compute against an explicit floor, the SKU catalog and the fleet baseline.

SKU catalog (GF540-GF543, gpufleet/sku): every GEMM and HBM value the smoke measured is judged on
its own host against catalog peak x efficiency ratio (sku/expect.py); a value below its floor
names the likely cause from the run's nvidia-smi sample and the facts (sku/causes.py). GF544:
every ordered GPU pair's copy (the full level's matrix) against its NVLink expectation, the cause
from the pair's evidence (sku/p2p.py). GF545: the host's RDMA ports against its SKU's rate, from
the facts alone.

Fleet baseline: median and MAD of hosts with the same GPU model, topology and world size
(published fixed thresholds differ by topology and NVLS; REFERENCE.md). A host is an outlier when
it is below median - MAD_K x 1.4826 x MAD and also at least OUTLIER_MIN_DROP below the median,
so that a tight fleet (MAD near 0) does not flag noise.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import Any

from gpufleet.model import (
    Expected,
    Facts,
    Finding,
    HostResult,
    SmokeResult,
    cohort_label,
    fmt_bytes,
)
from gpufleet.model import topology_signature as _signature
from gpufleet.rules import reference
from gpufleet.rules.base import Ctx, finding, gpu_model
from gpufleet.sku import causes, p2p
from gpufleet.sku import expect as sku_expect

# The ids this module emits (tests/unit/test_rules_plumbing.py holds it to that).
RULES: tuple[str, ...] = ("GF501", "GF502", "GF503", "GF540", "GF541", "GF542", "GF543",
                          "GF544", "GF545")
SKU_RULES = {"matmul_tflops": "GF540", "hbm_gbps": "GF541"}
COTENANT_RULE = "GF543"  # another process on the GPU during the run
P2P_RULE = "GF544"  # GPU<->GPU copies below the NVLink expectation


def topology_signature(f: Facts) -> str:
    return _signature(f.gpu_count, f.topology.links if f.topology is not None else {})


def low_outliers(values: Sequence[float]) -> tuple[float, float, float] | None:
    """(median, mad, limit) when there are enough samples, else None."""
    if len(values) < reference.OUTLIER_MIN_SAMPLES:
        return None
    med = statistics.median(values)
    mad = statistics.median(abs(v - med) for v in values)
    limit = min(med - reference.MAD_K * 1.4826 * mad, med * (1 - reference.OUTLIER_MIN_DROP))
    return med, mad, limit


def check(ctx: Ctx) -> Iterator[Finding]:
    # host -> (busbw by size, facts, hosts in its world). A multinode run reports each host's own
    # busbw, so every host is judged on its own numbers, against peers of the same world size.
    runs: dict[str, tuple[dict[int, float], Facts, int]] = {}
    # GPU runs only: a gloo run on CPU ranks (CI, CPU hosts) measures nothing a floor or a GPU
    # baseline is about.
    for h, s in ctx.with_smoke():
        if s.busbw_gbps and h.facts is not None and h.facts.gpus and s.backend != "gloo":
            runs[h.name] = (dict(s.busbw_gbps), h.facts, max(len(s.hosts), 1))
    # Explicit floor, at the largest message size measured (small sizes measure latency).
    for name, (bw, _f, _n) in sorted(runs.items()):
        floor = ctx.expect(name).min_busbw_gbps
        size = max(bw)
        if floor is not None and bw[size] < floor:
            yield finding("GF501", [name],
                          f"{name}: busbw {bw[size]:.1f} GB/s at {fmt_bytes(size)} "
                          f"< floor {floor:g} GB/s",
                          {"busbw_gbps": bw[size], "bytes": size, "floor_gbps": floor,
                           "variable": "gpufleet_min_busbw_gbps"})
    # Fleet outliers per cohort, at the largest size every member measured.
    cohorts: dict[tuple[str, str, int], list[tuple[str, dict[int, float]]]] = defaultdict(list)
    for name, (bw, f, n) in runs.items():
        cohorts[(gpu_model(f), topology_signature(f), n)].append((name, bw))
    for (model, topo, n), members in sorted(cohorts.items()):
        common = set.intersection(*(set(bw) for _h, bw in members))
        if not common:
            continue
        size = max(common)
        stats = low_outliers([bw[size] for _h, bw in members])
        if stats is None:
            continue
        med, mad, limit = stats
        for name, bw in sorted(members):
            if bw[size] < limit:
                yield finding("GF502", [name],
                              f"{name}: busbw {bw[size]:.1f} GB/s at {fmt_bytes(size)}, "
                              f"fleet median {med:.1f} ({cohort_label(model, topo, n)} runs)",
                              {"busbw_gbps": bw[size], "bytes": size, "median": med, "mad": mad,
                               "limit": limit, "gpu_model": model, "topology": topo,
                               "world_hosts": n, "peers": len(members)})
    # Matmul per GPU, pooled over every GPU of the same model.
    samples: dict[str, list[tuple[str, int, float]]] = defaultdict(list)
    for h, s in ctx.with_smoke():
        if h.facts is not None and h.facts.gpus and s.backend != "gloo":
            for rank, tflops in s.matmul_tflops.items():
                samples[gpu_model(h.facts)].append((h.name, rank, tflops))
    for model, rows in sorted(samples.items()):
        stats = low_outliers([t for _h, _r, t in rows])
        if stats is None:
            continue
        med, mad, limit = stats
        for host, rank, tflops in sorted(rows):
            if tflops < limit:
                yield finding("GF503", [host],
                              f"{host} GPU {rank}: matmul {tflops:.1f} TFLOP/s, "
                              f"fleet median {med:.1f} ({model})",
                              {"gpu": rank, "tflops": tflops, "median": med, "mad": mad,
                               "limit": limit, "gpu_model": model, "peers": len(rows),
                               "subject": f"gpu{rank}"},
                              gpu=rank)
    yield from check_sku(ctx)


def _sample(f: Facts, s: SmokeResult | None, gpu: int) -> dict[str, Any] | None:
    rec = sku_expect.by_gpu(f, s, "gemm").get(gpu) or {}
    smp = rec.get("sample")
    return dict(smp) if isinstance(smp, dict) else None


def _slow(h: HostResult, f: Facts, e: Expected) -> Finding:
    assert e.measured is not None and e.gpu is not None
    g = next((x for x in f.gpus if x.index == e.gpu), None)
    smp = _sample(f, h.smoke, e.gpu)
    found = causes.likely(f, g, smp, e.metric)
    what = f"{e.dtype} GEMM" if e.metric == "matmul_tflops" else "HBM copy"
    ratio = e.measured / e.expected
    msg = (f"{h.name} GPU {e.gpu}: {what} {e.measured:.1f} {e.unit} is {100 * ratio:.0f}% of "
           f"the {e.expected:.1f} expected for its SKU (floor {e.floor:.1f})")
    msg += "; likely cause: " + "; ".join(c["text"] for c in found) if found else \
        "; no cause visible in the run's sample"
    borrowed = "borrowed" in e.basis
    return finding(SKU_RULES[e.metric], [h.name], msg,
                   {"gpu": e.gpu, "metric": e.metric, "dtype": e.dtype, "measured": e.measured,
                    "expected": e.expected, "floor": e.floor, "ratio": round(ratio, 3),
                    "source": e.source, "basis": e.basis, "causes": found,
                    "sample": smp, "subject": f"gpu{e.gpu}"},
                   severity="warning" if borrowed else None,
                   hint="; ".join(causes.fix(c) for c in found) if found else
                   f"run `dcgmi diag -r 3 -i {e.gpu}` and compare `nvidia-smi -q -d "
                   f"PERFORMANCE,CLOCK,POWER -i {e.gpu}` with a healthy GPU of the SKU",
                   gpu=e.gpu)


def _nics(h: HostResult, f: Facts, floors: Any) -> Iterator[Finding]:
    """GF545: fewer RDMA ports at the SKU's rate than it expects (facts alone, every level)."""
    for e in sku_expect.host_expectations(f, None, floors):
        if e.metric != "nic_gbps" or e.measured is None or e.measured >= e.floor:
            continue
        ports = sorted(((p.rate_gbit or 0.0, p.device, p.port) for p in f.ib_ports or ()),
                       reverse=True)
        yield finding("GF545", [h.name],
                      f"{h.name}: RDMA ports below the SKU's rate: {e.basis.split(': ', 1)[1]}"
                      f" is {e.measured:g} GB/s, floor {e.floor:g} GB/s ("
                      + ", ".join(f"{d}/{p} {r:g} Gb/s" for r, d, p in ports) + ")",
                      {"metric": e.metric, "measured": e.measured, "expected": e.expected,
                       "floor": e.floor, "source": e.source, "basis": e.basis,
                       "ports": [{"device": d, "port": p, "rate_gbit": r}
                                 for r, d, p in ports]})


def _pair(e: Expected) -> dict[str, Any]:
    return {"src": e.peer, "dst": e.gpu, "measured": e.measured, "expected": e.expected,
            "floor": e.floor, "ratio": round(e.measured / e.expected, 3)
            if e.measured is not None else None}


def _p2p(h: HostResult, f: Facts, floors: Any) -> Iterator[Finding]:
    """GF544: one finding per host naming every slow or missing pair of the copy matrix; its
    subject is the one GPU every such pair involves, when there is one (a GPU's NVLinks down)."""
    mat = p2p.measured(f, h.smoke)
    if mat is None:
        return
    pairs = sku_expect.p2p_pairs(f, h.smoke, floors)
    slow = [(e, m) for e, m in pairs if e.measured is not None and e.measured < e.floor]
    missing = [(e, m) for e, m in pairs if e.measured is None]
    if not slow and not missing:
        return
    bad = slow + missing
    common = set.intersection(*({e.gpu, e.peer} for e, _m in bad))
    gpu = next(iter(common)) if len(common) == 1 else None
    found: list[dict[str, Any]] = []
    for e, m in bad:
        for c in p2p.pair_causes(f, e.peer or 0, e.gpu or 0, m):
            if c["text"] not in {x["text"] for x in found}:
                found.append(c)
    parts = []
    if slow:
        worst = min((e for e, _m in slow), key=lambda e: (e.measured or 0.0) / e.expected)
        assert worst.measured is not None
        parts.append(f"{len(slow)} of {len(pairs)} GPU<->GPU copies below their floor; slowest "
                     f"GPU {worst.gpu} <- GPU {worst.peer} {worst.measured:.1f} GB/s is "
                     f"{100 * worst.measured / worst.expected:.0f}% of the {worst.expected:.1f} "
                     f"expected (floor {worst.floor:.1f})")
    else:
        worst = missing[0][0]
    if missing:
        why = sorted({(m.error if m is not None and m.error else
                       mat.error or "not in the matrix") for _e, m in missing})
        parts.append(f"{len(missing)} pair(s) not measured ({'; '.join(why)})")
    if gpu is not None and len(bad) > 1:
        parts.append(f"every one involves GPU {gpu}")
    msg = f"{h.name}: " + "; ".join(parts)
    msg += ("; likely cause: " + "; ".join(c["text"] for c in found)) if found else \
        "; no cause visible in the facts"
    hint = "; ".join(dict.fromkeys(p2p.fix(c) for c in found)) if found else (
        "compare `nvbandwidth -t device_to_device_memcpy_read_ce` on the host with a healthy "
        "one of the SKU and run `dcgmi diag -r 2`")
    yield finding("GF544", [h.name], msg,
                  {"metric": "p2p_gbps", "measured": worst.measured, "expected": worst.expected,
                   "floor": worst.floor, "ratio": round(worst.measured / worst.expected, 3)
                   if worst.measured is not None else None,
                   "source": worst.source, "basis": worst.basis,
                   "pairs": [_pair(e) for e, _m in slow],
                   "missing": [{"src": e.peer, "dst": e.gpu, "error": (
                       m.error if m is not None else mat.error or "not in the matrix")}
                       for e, m in missing],
                   "pairs_judged": len(pairs), "method": mat.method, "causes": found,
                   **({"gpu": gpu, "subject": f"gpu{gpu}"} if gpu is not None else {})},
                  severity="warning" if "borrowed" in worst.basis or "none measured" in
                  worst.basis else None,
                  hint=hint, gpu=gpu)


def check_sku(ctx: Ctx) -> Iterator[Finding]:
    """GF540/GF541/GF544 below the SKU expectation, GF542 no reference, GF543 a co-tenant."""
    for h, f in ctx.with_facts():
        if not f.gpus:
            continue
        unknown = sku_expect.unknown_models(f)
        if unknown:
            yield finding("GF542", [h.name],
                          f"{h.name}: no reference in the SKU catalog for "
                          + ", ".join(unknown) + ": compute and HBM are judged against peers "
                          "and history only",
                          {"gpu_names": unknown})
        floors = ctx.expect(h.name).perf_floors
        yield from _nics(h, f, floors)
        s = h.smoke
        if s is None or s.backend == "gloo":
            continue
        for e in sku_expect.host_expectations(f, s, floors):
            if e.metric in SKU_RULES and e.measured is not None and e.measured < e.floor:
                yield _slow(h, f, e)
        yield from _p2p(h, f, floors)
        for g in f.gpus:
            smp = _sample(f, s, g.index) or {}
            apps = causes.foreign(smp)
            if apps:
                used = sum(int(a["used_memory"]) for a in apps
                           if str(a.get("used_memory", "")).isdigit())
                yield finding("GF543", [h.name],
                              f"{h.name} GPU {g.index}: "
                              + (f"{len(apps)} other process(es) on the GPU"
                                 if smp.get("own_pid_seen") is not False else
                                 f"{len(apps)} processes on the GPU, one of them the smoke's "
                                 "own rank (its pid is not visible here)")
                              + f" during the smoke run, holding {used} MiB of "
                              f"{g.memory_total_mib or '?'} MiB: "
                              + ", ".join(f"pid {a.get('pid')} {a.get('process_name')}"
                                          for a in apps),
                              {"gpu": g.index, "processes": apps, "used_memory_mib": used,
                               "memory_total_mib": g.memory_total_mib,
                               "subject": f"gpu{g.index}"},
                              gpu=g.index)
