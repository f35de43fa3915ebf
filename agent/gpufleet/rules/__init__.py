"""Rules: pure functions of the report's facts, smoke results and inventory expectations.

`evaluate(report)` returns the findings sorted by severity (worst first), rule id and hosts.
Each rule module is isolated per host: one that raises on a host's data (an odd value a host
printed) gives that host a GF006 naming the rule function and the exception, and is judged again
over the other hosts, so one host never takes the fleet's report down.
Rule ids (RULES) never change meaning; docs/rules.md documents each one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from datetime import datetime, timezone
from types import ModuleType

from gpufleet.model import SEVERITY_ORDER, Finding, Report
from gpufleet.redact import text
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
from gpufleet.rules.base import Ctx, finding
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
        for f in _isolated(module, ctx):
            found.setdefault((f.rule, f.hosts, f.message), f)
    return sort_findings(list(found.values()))


def _only(ctx: Ctx, names: Iterable[str]) -> Ctx:
    keep = set(names)
    report = dataclasses.replace(
        ctx.report, hosts={n: h for n, h in ctx.report.hosts.items() if n in keep},
        specs={n: s for n, s in ctx.report.specs.items() if n in keep})
    return dataclasses.replace(ctx, report=report)


def _crashed(module: ModuleType, host: str, exc: Exception) -> Finding:
    where = f"{module.__name__}.check"
    why = text(f"{type(exc).__name__}: {exc}")[:300]
    return finding("GF006", (host,), f"rule {where} failed on this host's data: {why}",
                   {"rule_function": where, "exception": why, "subject": where})


def _isolated(module: ModuleType, ctx: Ctx) -> list[Finding]:
    """`module`'s findings; when it raises, each host it raises on alone gets a GF006 and the
    module is judged again over the others (a fleet-wide crash is every host's GF006)."""
    try:
        return list(module.check(ctx))
    except Exception:  # found per host below
        bad: dict[str, Exception] = {}
    for name in sorted(ctx.report.hosts):
        try:
            list(module.check(_only(ctx, [name])))
        except Exception as exc:  # that host's finding
            bad[name] = exc
    rest = sorted(set(ctx.report.hosts) - set(bad))
    found: list[Finding] = []
    try:
        found = list(module.check(_only(ctx, rest)))
    except Exception as exc:  # across hosts: each remaining host's
        bad.update(dict.fromkeys(rest, exc))
    return found + [_crashed(module, name, exc) for name, exc in sorted(bad.items())]
