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
    for h, s, world in ctx.worlds():
        for c in s.checks:
            if c.name != "busbw" or c.passed or c.data.get("basis") != "expectation":
                continue
            data: dict[str, Any] = dict(c.data)
            found = data.get("suspect_settings") or []
            if not found and h.facts is not None:
                found = [{"host": h.name, "name": st.name, "value": st.value,
                          "source": st.source, "why": why}
                         for st, why in suspects(h.facts.nccl_config, multinode=len(world) > 1)]
            top = data.get("largest") or {}
            msg = (f"{'+'.join(world)}: busbw {top.get('measured_gbps', 0):.1f} GB/s at "
                   f"{fmt_bytes(int(top.get('bytes', 0)))} is "
                   f"{100 * float(top.get('ratio', 0)):.0f}% of the "
                   f"{top.get('expected_gbps', 0):.1f} GB/s its links should give")
            if found:
                msg += "; likely cause: " + "; ".join(
                    f"{x['name']}={x['value']} in {x['source']} on {x['host']}" for x in found)
            exp_ev = data.get("expectation") or {}
            yield finding("GF504", world, msg,
                          {"measured_gbps": top.get("measured_gbps"),
                           "expected_gbps": top.get("expected_gbps"), "bytes": top.get("bytes"),
                           "ratio": top.get("ratio"), "expectation": exp_ev,
                           "sizes": data.get("sizes"), "suspect_settings": found},
                          hint=("remove " + ", ".join(f"{x['name']} from {x['source']}"
                                                      for x in found)) if found else
                          "check `nvidia-smi nvlink -s`, `nvidia-smi topo -m` and NCCL_DEBUG=INFO")
