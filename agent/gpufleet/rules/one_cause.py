"""One root cause, one finding (GF549): the judge's last step over every finding of a run.

When the judge named a cause for a slow measurement (sku/causes.py: another process on the GPU,
a clock event reason, a lowered power limit, held clocks, a PCIe link below its max, MIG), every
performance finding of the same host that this cause explains is folded into one GF549 finding:
the cause, and each affected measurement (rule, metric, GPU, measured, expected, floor or
baseline) as its evidence. Explained are the findings that carry the same cause (GF540, GF541,
GF544 and GF543 for a co-tenant) and the history drops (GF521, GF546) of a GPU the cause covers.
A cause that explains one finding only leaves it as it is. The folded finding's severity is the
worst of its parts, so a drain or an exit code reads it as it read them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpufleet.model import SEVERITY_ORDER, Finding
from gpufleet.rules import history as history_rules
from gpufleet.rules import lkg, perf
from gpufleet.rules.base import finding

RULES: tuple[str, ...] = ("GF549",)
# Findings that carry their cause in evidence["causes"] (GF543: its processes are the cause).
CARRY_CAUSE = frozenset({*perf.SKU_RULES.values(), perf.COTENANT_RULE, perf.P2P_RULE})
# Drops against the host's own history: explained by a cause seen on the same GPU in this run.
ON_GPU = frozenset({*lkg.RULES, history_rules.MATMUL_DRIFT_RULE})


def _key(causes: Iterable[Mapping[str, Any]]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """A cause set's identity: each cause's name and, for processes, their pids."""
    return tuple(sorted((str(c.get("cause")), tuple(sorted(str(p.get("pid")) for p in
                                                            c.get("processes") or ())))
                        for c in causes))


def _causes(f: Finding) -> list[Mapping[str, Any]]:
    ev = f.evidence
    if f.rule == perf.COTENANT_RULE and ev.get("processes"):
        return [{"cause": "other_processes", "processes": list(ev["processes"]),
                 "text": "other process(es) on the GPU during the run: " + ", ".join(
                     f"pid {p.get('pid')} {p.get('process_name')}" for p in ev["processes"])}]
    return [c for c in ev.get("causes") or () if isinstance(c, Mapping) and c.get("cause")]


def _gpu(f: Finding) -> int | None:
    g = f.evidence.get("gpu")
    return g if isinstance(g, int) and not isinstance(g, bool) else None


def _measurement(f: Finding) -> dict[str, Any]:
    ev = f.evidence
    keep = ("gpu", "metric", "dtype", "line", "measured", "expected", "floor", "baseline",
            "ratio", "drop", "peer")
    out: dict[str, Any] = {"rule": f.rule, "severity": f.severity}
    out.update({k: ev[k] for k in keep if ev.get(k) is not None})
    if f.rule == history_rules.MATMUL_DRIFT_RULE:  # its names: tflops / baseline_tflops
        out.update(metric="matmul_tflops", measured=ev.get("tflops"),
                   baseline=ev.get("baseline_tflops"))
    if f.rule == perf.COTENANT_RULE:
        out.update(used_memory_mib=ev.get("used_memory_mib"))
    out["message"] = f.message
    return out


def _summary(m: Mapping[str, Any]) -> str:
    what = " ".join(str(m[k]) for k in ("dtype", "metric") if m.get(k)) or m["rule"]
    if m.get("measured") is None:
        return f"{m['rule']} {what}"
    ref = (f"expected {m['expected']:.1f}, floor {m['floor']:.1f}"
           if isinstance(m.get("expected"), (int, float)) and isinstance(m.get("floor"),
                                                                         (int, float))
           else f"own baseline {m['baseline']:.1f}" if isinstance(m.get("baseline"),
                                                                  (int, float)) else "")
    gpu = f"GPU {m['gpu']} " if m.get("gpu") is not None else ""
    return f"{gpu}{what} {float(m['measured']):.1f}" + (f" ({ref})" if ref else "")


def fold(findings: Iterable[Finding]) -> list[Finding]:
    """`findings` with every group of two or more that one cause explains folded into GF549."""
    found = list(findings)
    groups: dict[tuple[str, tuple[Any, ...]], list[int]] = {}
    cause_of: dict[tuple[str, tuple[Any, ...]], list[Mapping[str, Any]]] = {}
    gpus: dict[tuple[str, int], set[tuple[str, tuple[Any, ...]]]] = {}
    for i, f in enumerate(found):
        if f.rule not in CARRY_CAUSE or len(f.hosts) != 1:
            continue
        cs = _causes(f)
        if not cs:
            continue
        key = (f.hosts[0], _key(cs))
        groups.setdefault(key, []).append(i)
        cause_of.setdefault(key, cs)
        if (g := _gpu(f)) is not None:
            gpus.setdefault((f.hosts[0], g), set()).add(key)
    for i, f in enumerate(found):
        if f.rule in ON_GPU and len(f.hosts) == 1 and (g := _gpu(f)) is not None:
            keys = gpus.get((f.hosts[0], g), set())
            if len(keys) == 1:  # one cause on that GPU: it explains the drop too
                groups[next(iter(keys))].append(i)
    folded: set[int] = set()
    out: list[Finding] = []
    for (host, _), idx in groups.items():
        if len(idx) < 2:
            continue
        folded.update(idx)
        out.append(_one(host, cause_of[(host, _)], [found[i] for i in sorted(idx)]))
    return [f for i, f in enumerate(found) if i not in folded] + out


def _one(host: str, cs: list[Mapping[str, Any]], parts: list[Finding]) -> Finding:
    worst = max(parts, key=lambda f: SEVERITY_ORDER[f.severity]).severity
    ms = [_measurement(f) for f in parts]
    gpus = sorted({m["gpu"] for m in ms if isinstance(m.get("gpu"), int)})
    texts = "; ".join(str(c.get("text") or c.get("cause")) for c in cs)
    where = (f" GPU {gpus[0]}" if len(gpus) == 1 else
             f" GPUs {', '.join(map(str, gpus))}" if gpus else "")
    slow = [m for m in ms if m["rule"] != perf.COTENANT_RULE]
    msg = (f"{host}{where}: one cause, {len(slow)} slow measurement(s): {texts}; "
           + "; ".join(_summary(m) for m in slow))
    fixes = [p.remediation for p in parts if p.rule in CARRY_CAUSE and p.rule != perf.COTENANT_RULE]
    return finding("GF549", [host], msg,
                   {"causes": cs, "gpus": gpus, "measurements": ms,
                    "rules": sorted({p.rule for p in parts}), "subject": "cause"},
                   severity=worst, fix=fixes[0] if fixes else parts[0].remediation,
                   host=host)
