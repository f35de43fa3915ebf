"""GF520/GF521: a run against each host's own saved history (`--save DIR`), not its peers.

A host's baseline is the median of its known-good runs measured alike (history/analysis.py); it
drifts when this run is more than DRIFT_MARGIN below that, even while it is above every fleet
floor. Gloo runs on CPU ranks are not judged, as in rules/perf.py. These rules need the run store,
so `rules.evaluate` does not run them: the commands that have a store call `drift_findings`.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from gpufleet.history.analysis import Entry, baselined_hosts
from gpufleet.model import Finding, fmt_bytes
from gpufleet.rules.base import finding

# The ids this module emits (tests/unit/test_rules_plumbing.py holds it to that).
RULES: tuple[str, ...] = ("GF520", "GF521")
MATMUL_DRIFT_RULE = "GF521"  # a GPU's matmul below its own baseline (one_cause folds it)

DRIFT_MARGIN = 0.10  # run-to-run busbw/TFLOP/s noise on one host stays well inside this


def drift_findings(doc: Mapping[str, Any], entries: Sequence[Entry]) -> list[Finding]:
    """GF520 (busbw) and GF521 (TFLOP/s per GPU): this run against each host's own baseline."""
    out: list[Finding] = []
    for name, now, good in baselined_hosts(doc, entries):
        runs = [e["file"] for e in good]
        since = good[-1]["generated_at"]
        # busbw at the largest size this run measured that the good runs measured too.
        if now["busbw"] is not None:
            size = str(now["busbw"][0])
            base_vals = [e["hosts"][name]["busbw_all"][size] for e in good
                         if size in e["hosts"][name].get("busbw_all", {})]
            if base_vals:
                base = statistics.median(base_vals)
                cur = now["busbw"][1]
                if cur < base * (1 - DRIFT_MARGIN):
                    drop = 1 - cur / base
                    out.append(finding(
                        "GF520", [name],
                        f"{name}: busbw {cur:.1f} GB/s at {fmt_bytes(int(size))} is "
                        f"{drop:.0%} below its own baseline {base:.1f} GB/s "
                        f"({len(base_vals)} good run(s), last {since})",
                        {"busbw_gbps": cur, "bytes": int(size), "baseline_gbps": base,
                         "drop": round(drop, 4), "margin": DRIFT_MARGIN, "baseline_runs": runs,
                         "judged_by": "host history"},
                        since=since, drop=f"{drop:.0%}"))
        for gpu, cur in sorted(now["tflops"].items(), key=lambda kv: int(kv[0])):
            vals = [e["hosts"][name]["tflops"][gpu] for e in good
                    if gpu in e["hosts"][name]["tflops"]]
            if not vals:
                continue
            base = statistics.median(vals)
            if cur < base * (1 - DRIFT_MARGIN):
                drop = 1 - cur / base
                out.append(finding(
                    "GF521", [name],
                    f"{name} GPU {gpu}: matmul {cur:.1f} TFLOP/s is {drop:.0%} below its own "
                    f"baseline {base:.1f} ({len(vals)} good run(s), last {since})",
                    {"gpu": int(gpu), "tflops": cur, "baseline_tflops": base,
                     "drop": round(drop, 4), "margin": DRIFT_MARGIN, "baseline_runs": runs,
                     "judged_by": "host history", "subject": f"gpu{gpu}"},
                    since=since, gpu=gpu, drop=f"{drop:.0%}"))
    return out
