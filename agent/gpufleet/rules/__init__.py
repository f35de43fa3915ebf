"""Rules: pure functions of the report's facts, smoke results and inventory expectations.

`evaluate(report)` returns the findings sorted by severity (worst first), rule id and hosts.
Rule ids (RULES) never change meaning; docs/rules.md documents each one.
"""

from __future__ import annotations

from datetime import datetime, timezone

from gpufleet.model import SEVERITY_ORDER, Finding, Report
from gpufleet.rules import (
    compat,
    deep,
    desired,
    drift,
    fabric,
    fabric_gdr,
    faults,
    hardware,
    links,
    nccl,
    perf,
    security,
    smoke,
    state,
    tmpdir,
    wedged,
)
from gpufleet.rules import workspaces as workspace_rules
from gpufleet.rules.base import Ctx
from gpufleet.rules.catalog import FAMILIES, RULES, RuleInfo

__all__ = ["FAMILIES", "MODULES", "RULES", "RuleInfo", "evaluate", "sort_findings"]

MODULES = (state, tmpdir, desired, drift, compat, security, hardware, faults, perf, smoke, links,
           nccl, deep, workspace_rules, wedged, fabric, fabric_gdr)


def sort_findings(findings: list[Finding] | tuple[Finding, ...]) -> tuple[Finding, ...]:
    return tuple(
        sorted(findings, key=lambda f: (-SEVERITY_ORDER[f.severity], f.rule, f.hosts, f.message))
    )


def evaluate(report: Report, *, now: datetime | None = None) -> tuple[Finding, ...]:
    """All findings for `report`; `now` decides time windows (XIDs, end-of-life dates)."""
    ctx = Ctx(report=report, now=now or datetime.now(timezone.utc))
    found: dict[tuple[str, tuple[str, ...], str], Finding] = {}
    for module in MODULES:
        for f in module.check(ctx):
            found.setdefault((f.rule, f.hosts, f.message), f)
    return sort_findings(list(found.values()))
