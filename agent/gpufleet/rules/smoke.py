"""GF6xx: the smoke test's own verdicts, each with its evidence."""

from __future__ import annotations

from collections.abc import Iterator

from gpufleet.model import Finding
from gpufleet.rules.base import Ctx, finding
from gpufleet.rules.catalog import SMOKE_HINTS
from gpufleet.rules.deep import DEEP_CHECKS, names_a_rule
from gpufleet.rules.fabric_gdr import judged as gdr_judged

# The ids this module emits (tests/unit/test_rules_plumbing.py holds it to that).
RULES: tuple[str, ...] = ("GF601", "GF602", "GF603")

_TAIL = 2000  # characters of log kept as evidence


def check(ctx: Ctx) -> Iterator[Finding]:
    for _h, s, world in ctx.worlds():
        label = "+".join(world)
        for c in s.checks:
            # A measured busbw check's values are judged once, by GF501/GF504 (rules/perf.py,
            # rules/links.py; older hosts also failed it themselves); a deeper check's named
            # problems are rules/deep.py's, its crash is GF601 here.
            if (not c.passed
                    and not (c.name in DEEP_CHECKS and names_a_rule(c))
                    and not gdr_judged(c)  # its HCAs are GF622/GF624 (rules/fabric_gdr.py)
                    and not (c.name == "busbw"
                             and (c.data.get("sizes") or c.data.get("basis")))):
                yield finding("GF601", world, f"{label}: smoke check {c.name} failed: {c.detail}",
                              {"check": c.name, "detail": c.detail, "data": dict(c.data),
                               "subject": c.name},
                              hint=SMOKE_HINTS.get(c.name, f"smoke check {c.name} failed"))
        if s.status == "fail" and all(c.passed for c in s.checks):
            yield finding("GF601", world, f"{label}: smoke test failed: {s.error or 'no detail'}",
                          {"check": None, "detail": s.error, "subject": "run"},
                          hint="the smoke test failed without naming a check")
        tail = (s.log_tail or "")[-_TAIL:]
        if s.status == "error" and not s.hung_ranks:
            yield finding("GF602", world, f"{label}: smoke test error: {s.error or 'no detail'}",
                          {"error": s.error, "log_tail": tail})
        elif s.status == "timeout" or s.hung_ranks:
            yield finding("GF603", world,
                          f"{label}: smoke test timed out"
                          + (f"; hung ranks {list(s.hung_ranks)}" if s.hung_ranks else ""),
                          {"hung_ranks": list(s.hung_ranks), "error": s.error,
                           "timings_s": dict(s.timings_s), "log_tail": tail,
                           "causes": dict(s.causes)})
