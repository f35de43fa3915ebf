"""GF413 NVLink below its SKU's speed, GF504 busbw below the host's own expectation.

The expectation (sku.bandwidth) is built from the host's links; a link already reported here
or by GF408 lowers it, so the bandwidth finding is about what the links cannot explain.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gpufleet.model import Finding, fmt_bytes
from gpufleet.rules.base import Ctx, finding
from gpufleet.rules.nccl import suspects
from gpufleet.sku import bandwidth

# The ids this module emits (tests/unit/test_rules_plumbing.py holds it to that).
RULES: tuple[str, ...] = ("GF413", "GF504")


def check(ctx: Ctx) -> Iterator[Finding]:
    for h, f in ctx.with_facts():
        for issue in bandwidth.link_issues(bandwidth.links_from_facts(f)):
            if issue.kind == "slow":
                yield finding("GF413", [h.name], f"{h.name}: {issue.detail}",
                              {"gpu": issue.gpu, "detail": issue.detail,
                               "source": bandwidth.SOURCES["nvlink_speeds"],
                               "subject": f"gpu{issue.gpu}"},
                              gpu=issue.gpu)
    facts = {h.name: f for h, f in ctx.with_facts()}
    for _h, s, world in ctx.worlds():
        for c in s.checks:
            if c.name != "busbw" or c.data.get("basis") != "expectation":
                continue
            data: dict[str, Any] = dict(c.data)
            top = _breach(data)
            if top is None:
                continue
            # The NCCL settings in effect on the world's hosts name the likely cause (an older
            # result may carry them, named by the host-side verdict).
            found = data.get("suspect_settings") or [
                {"host": n, "name": st.name, "value": st.value, "source": st.source, "why": why}
                for n in world if n in facts
                for st, why in suspects(facts[n].nccl_config, multinode=len(world) > 1)]
            msg = (f"{'+'.join(world)}: busbw {top.get('measured_gbps', 0):.1f} GB/s at "
                   f"{fmt_bytes(int(top.get('bytes', 0)))} is "
                   f"{100 * float(top.get('ratio', 0)):.0f}% of the "
                   f"{top.get('expected_gbps', 0):.1f} GB/s its links should give")
            if found:
                msg += "; likely cause: " + "; ".join(
                    f"{x['name']}={x['value']} in {x['source']} on {x['host']}" for x in found)
            exp_ev = data.get("expectation") or {}
            if not top:
                msg = (f"{'+'.join(world)}: no busbw measurement at "
                       f"{fmt_bytes(_judged_from(data))} or more to judge against the "
                       "expectation")
            yield finding("GF504", world, msg,
                          {"measured_gbps": top.get("measured_gbps"),
                           "expected_gbps": top.get("expected_gbps"), "bytes": top.get("bytes"),
                           "ratio": top.get("ratio"), "expectation": exp_ev,
                           "sizes": data.get("sizes"), "suspect_settings": found},
                          hint=("remove " + ", ".join(f"{x['name']} from {x['source']}"
                                                      for x in found)) if found else
                          "check `nvidia-smi nvlink -s`, `nvidia-smi topo -m` and NCCL_DEBUG=INFO")


def _judged_from(data: dict[str, Any]) -> int:
    ev = data.get("expectation") or {}
    return int(ev.get("judged_from_bytes") or bandwidth.JUDGED_FROM)


def _breach(data: dict[str, Any]) -> dict[str, Any] | None:
    """The largest judged size below the expectation's fraction ({} when nothing was measured
    at a judged size: a missing measurement fails, never passes), or None: every judged size
    reaches it. Judged here from the values the host recorded (smoke/remote/busbw.py), so one
    home holds the fraction and the size cut-off (sku/bandwidth.py FRACTION, JUDGED_FROM, as
    the expectation's evidence carries them)."""
    ev = data.get("expectation") or {}
    frac = float(ev.get("fraction_required") or bandwidth.FRACTION)
    cut = _judged_from(data)
    rows = []
    for k, v in (data.get("sizes") or {}).items():
        if int(k) >= cut and isinstance(v, dict) and v.get("reference_gbps"):
            rows.append({"bytes": int(k), "measured_gbps": float(v["busbw_gbps"]),
                         "expected_gbps": float(v["reference_gbps"]),
                         "ratio": float(v["busbw_gbps"]) / float(v["reference_gbps"])})
    largest = data.get("largest")
    if not rows and isinstance(largest, dict) and largest.get("ratio") is not None:
        rows = [dict(largest)]  # a result that carries only its largest size
    if not rows:
        return {}
    low = [r for r in rows if float(r["ratio"]) < frac]
    return max(low, key=lambda r: int(r["bytes"])) if low else None
