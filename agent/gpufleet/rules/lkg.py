"""GF546: a measured value below the host's own known-good runs (`--save DIR`), per expectation.

rules/history.py judges busbw (GF520) and the quick matmul (GF521) against the host's own
baseline; this judges every other line of hosts.<name>.expectations the same way (GEMM per dtype
other than bf16, HBM, host<->device copies, NVLink per-link rate, P2P copies, NIC rate): the
median of the same line in the host's last known-good runs measured alike
(history/analysis.py good_runs), and a drop of more than DRIFT_MARGIN. A value can be above its
SKU floor and still well below what this very host did before; the evidence carries both.
Needs the run store, so the commands with a store call `lkg_findings` (as `drift_findings`).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from gpufleet.history.analysis import Entry, baselined_hosts, measured_key
from gpufleet.model import Finding
from gpufleet.rules.base import finding
from gpufleet.rules.history import DRIFT_MARGIN

# The ids this module emits (tests/unit/test_rules_plumbing.py holds it to that).
RULES: tuple[str, ...] = ("GF546",)

# One home each: busbw is GF520's, the bf16 matmul GF521's.
ELSEWHERE = ("allreduce_busbw_gbps", "matmul_tflops.bf16 ")


def _lines(hdoc: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {measured_key(e): e for e in hdoc.get("expectations") or ()
            if isinstance(e, Mapping)}


def lkg_findings(doc: Mapping[str, Any], entries: Sequence[Entry]) -> list[Finding]:
    out: list[Finding] = []
    for name, now, good in baselined_hosts(doc, entries):
        lines = _lines((doc.get("hosts") or {}).get(name) or {})
        since = good[-1]["generated_at"]
        for key, cur in sorted(now["measured"].items()):
            if key.startswith(ELSEWHERE):
                continue
            vals = [e["hosts"][name].get("measured", {})[key] for e in good
                    if key in e["hosts"][name].get("measured", {})]
            if not vals:
                continue
            base = statistics.median(vals)
            if base <= 0 or cur >= base * (1 - DRIFT_MARGIN):
                continue
            line = lines.get(key, {})
            drop = 1 - cur / base
            unit = str(line.get("unit") or "")
            gpu = line.get("gpu")
            out.append(finding(
                "GF546", [name],
                f"{name}: {key} {cur:.1f} {unit} is {drop:.0%} below its own known-good "
                f"{base:.1f} ({len(vals)} good run(s), last {since}); SKU floor "
                f"{line.get('floor')}",
                {"line": key, "metric": line.get("metric"), "dtype": line.get("dtype"),
                 "gpu": gpu, "measured": cur, "baseline": base, "drop": round(drop, 4),
                 "margin": DRIFT_MARGIN, "floor": line.get("floor"),
                 "expected": line.get("expected"), "baseline_runs": [e["file"] for e in good],
                 "judged_by": "host history", "subject": key},
                since=since, line=key, drop=f"{drop:.0%}",
                gpu=gpu if isinstance(gpu, int) else 0))
    return out
