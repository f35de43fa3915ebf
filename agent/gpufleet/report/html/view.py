"""The HTML page's data: the report document reduced to what the page shows, per host.

Pure functions of the JSON document, so a saved report renders like a live one. The page's script
reads this as JSON (never as HTML); the template shows the summary and the findings.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from gpufleet.model import SEVERITY_ORDER, cohort_label, gpu_model, topology_signature
from gpufleet.redact import number
from gpufleet.report.common import family_of, host_worst, summary_line, versions
from gpufleet.report.expected import label as expected_label
from gpufleet.report.wording import row_message
from gpufleet.rules import FAMILIES, RULES

# The expected busbw: a curve (message bytes -> GB/s) under "expected_gbps" in the busbw check's
# data.expectation (gpufleet.sku.bandwidth, via the smoke verdict), or a single number (GF504's
# evidence: the size that fell short) drawn as a flat line. The report schema is versioned, so
# no other spelling is accepted.
EXPECTED_KEY = "expected_gbps"


def _curve(raw: Any) -> list[list[float]] | None:
    if not isinstance(raw, Mapping):
        return None
    points: list[list[float]] = []
    for size, value in raw.items():
        got = number(value)  # host data: a string, an overflowing int or NaN is no point
        if got is not None and str(size).isdigit():
            points.append([int(size), got])
    return sorted(points) or None


def cohort_of(hdoc: Mapping[str, Any]) -> str | None:
    """Hosts measured alike: GPU model, topology, world size and backend (as rules/perf.py)."""
    smoke = hdoc.get("smoke") or {}
    facts = hdoc.get("facts") or {}
    if not smoke.get("busbw_gbps") and not smoke.get("matmul_tflops"):
        return None
    world = max(len(smoke.get("hosts") or []), 1)
    gpus = facts.get("gpus") or []
    model = gpu_model(str(g.get("name")) for g in gpus if g.get("name"))
    links = (facts.get("topology") or {}).get("links") or {}
    return (f"{cohort_label(model, topology_signature(len(gpus), links), world)}, "
            f"{smoke.get('backend') or '?'}")


def _expected(hdoc: Mapping[str, Any], findings: list[Mapping[str, Any]]) -> dict[str, Any]:
    smoke = hdoc.get("smoke") or {}
    sources: list[Mapping[str, Any]] = []
    for check in smoke.get("checks") or []:
        data = check.get("data") if isinstance(check, Mapping) else None
        if (check.get("name") == "busbw" and isinstance(data, Mapping)
                and isinstance(data.get("expectation"), Mapping)):
            sources.append(data["expectation"])
    sources += [f.get("evidence") or {} for f in findings]
    out: dict[str, Any] = {"curve": None, "value": None, "floor": None}
    for src in sources:
        if out["curve"] is None:
            out["curve"] = _curve(src.get(EXPECTED_KEY))
        if out["value"] is None and isinstance(src.get(EXPECTED_KEY), (int, float)):
            out["value"] = number(src[EXPECTED_KEY])
        if out["floor"] is None and isinstance(src.get("floor_gbps"), (int, float)):
            out["floor"] = number(src["floor_gbps"])
    # The judged size's line of hosts.<name>.expectations: its floor is the busbw floor.
    for e in hdoc.get("expectations") or ():
        if isinstance(e, Mapping) and e.get("metric") == "allreduce_busbw_gbps":
            if out["floor"] is None:
                out["floor"] = number(e.get("floor"))
            if out["curve"] is None and out["value"] is None:
                out["value"] = number(e.get("expected"))
    return out


def _expectations(hdoc: Mapping[str, Any]) -> list[list[Any]]:
    """hosts.<name>.expectations as compact rows for the card's table and the plots:
    [label, metric, dtype, gpu, bytes, measured, expected, floor, unit, source, basis]. Host data:
    a value that is not a finite number is None, a label is text."""
    rows: list[list[Any]] = []
    for e in hdoc.get("expectations") or ():
        if not isinstance(e, Mapping):
            continue
        gpu = e.get("gpu") if isinstance(e.get("gpu"), int) else None
        size = e.get("bytes") if isinstance(e.get("bytes"), int) else None
        rows.append([expected_label(e), str(e.get("metric") or "?"), e.get("dtype") and
                     str(e["dtype"]), gpu, size, number(e.get("measured")),
                     number(e.get("expected")), number(e.get("floor")), str(e.get("unit") or ""),
                     str(e.get("source") or ""), str(e.get("basis") or "")])
    return rows


def _checks(hdoc: Mapping[str, Any]) -> list[list[Any]]:
    """Every smoke check the run made, the deep ones (sdc, membw, gemm, gdr...) included:
    [name, passed, detail]."""
    out: list[list[Any]] = []
    for c in (hdoc.get("smoke") or {}).get("checks") or ():
        if isinstance(c, Mapping):
            out.append([str(c.get("name") or "?"), c.get("passed") is True,
                        str(c.get("detail") or "")])
    return out


def _median_curve(curves: list[list[list[float]]]) -> list[list[float]]:
    by_size: dict[int, list[float]] = defaultdict(list)
    for curve in curves:
        for size, value in curve:
            by_size[int(size)].append(value)
    return [[size, statistics.median(vals)] for size, vals in sorted(by_size.items())]


def page_data(doc: Mapping[str, Any]) -> dict[str, Any]:
    findings = list(doc.get("findings") or [])
    worst = host_worst(doc)
    by_host: dict[str, list[int]] = defaultdict(list)
    for i, f in enumerate(findings):
        for name in f.get("hosts") or []:
            by_host[name].append(i)
    history = (doc.get("history") or {}).get("hosts") or {}
    hosts: list[dict[str, Any]] = []
    cohort_curves: dict[str, list[list[list[float]]]] = defaultdict(list)
    cohort_tflops: dict[str, list[float]] = defaultdict(list)
    for name in sorted(doc.get("hosts") or {}):
        h = doc["hosts"][name]
        mine = [findings[i] for i in by_host.get(name, [])]
        fam: dict[str, str] = {}
        for f in mine:
            key = family_of(f["rule"])
            if SEVERITY_ORDER[f["severity"]] > SEVERITY_ORDER.get(fam.get(key, ""), -1):
                fam[key] = f["severity"]
        smoke = h.get("smoke") or {}
        busbw = _curve(smoke.get("busbw_gbps")) or []
        tflops_map = smoke.get("matmul_tflops") or {}
        # a missing (or non-finite, already turned into None) figure is left out, not plotted
        tflops_points = sorted(_curve(tflops_map) or [])
        tflops = [float(v) for _, v in tflops_points]
        expectations = _expectations(h)
        # The quick matmul check is bf16 8192^3: its GPU's bf16 line is its expected and floor.
        bf16 = {r[3]: (r[6], r[7]) for r in expectations if r[1] == "matmul_tflops"
                and r[2] == "bf16"}
        tflops_expected = [list(bf16.get(int(k), (None, None))) for k, _ in tflops_points]
        cohort = cohort_of(h)
        if cohort is not None:
            if busbw:
                cohort_curves[cohort].append(busbw)
            cohort_tflops[cohort].extend(tflops)
        v = versions(h)
        hosts.append({
            "name": name,
            "status": h.get("status"),
            "error": h.get("error"),
            "worst": worst.get(name) or "ok",
            "fam": fam,
            "gpus": v["gpus"],
            "driver": v["driver"],
            "cuda": v["torch_cuda"] or v["driver_cuda"],
            "torch": v["torch"],
            "smoke": smoke.get("status"),
            "busbw": busbw,
            "tflops": tflops,
            "cohort": cohort,
            "expected": _expected(h, mine),
            "tflops_expected": tflops_expected if any(e[0] for e in tflops_expected) else [],
            "expectations": expectations,
            "checks": _checks(h),
            "findings": by_host.get(name, []),
            "versions": {k: val for k, val in v.items() if val},
            "history": history.get(name),
        })
    cohorts = {
        key: {"hosts": len(cohort_curves.get(key, [])),
              "busbw_median": _median_curve(cohort_curves.get(key, [])),
              "tflops_median": statistics.median(cohort_tflops[key])
              if cohort_tflops.get(key) else None}
        for key in sorted(set(cohort_curves) | set(cohort_tflops))
    }
    return {
        "generated_at": doc.get("generated_at"),
        "level": doc.get("level"),
        "families": [[k, v] for k, v in FAMILIES.items()],
        "hosts": hosts,
        "cohorts": cohorts,
        "findings": [
            {"rule": f["rule"], "severity": f["severity"], "hosts": f.get("hosts") or [],
             "message": f.get("message") or "", "row": row_message(f),
             "title": RULES[f["rule"]].title if f["rule"] in RULES else "",
             "evidence": f.get("evidence") or {}, "remediation": f.get("remediation") or ""}
            for f in findings],
        "runs": (doc.get("history") or {}).get("runs") or [],
    }


def summary(doc: Mapping[str, Any]) -> dict[str, Any]:
    """What the page's header shows without script: the summary line and counts."""
    s = doc["summary"]
    return {"line": summary_line(doc), "healthy": bool(s["healthy"]), "hosts": s["hosts"],
            "status": s["status"], "findings": s["findings"], "hosts_with": s["hosts_with"]}
