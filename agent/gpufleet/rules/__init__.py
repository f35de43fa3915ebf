"""Rules: pure functions of the report's facts, smoke results and inventory expectations.

`evaluate(report)` returns the findings sorted by severity (worst first), rule id and hosts.
Each rule module is isolated per host: one that raises on a host's data (an odd value a host
printed) gives that host a GF006 naming the rule function and the exception, and is judged again
over the other hosts, so one host never takes the fleet's report down.
Rule ids (RULES) never change meaning; docs/rules.md documents each one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
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

__all__ = ["FAMILIES", "MODULES", "RULES", "RuleInfo", "crashed", "evaluate", "isolated",
           "sort_findings"]

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


def crashed(where: str, host: str, exc: Exception) -> Finding:
    """`host`'s GF006 for the rule function `where` that raised `exc` on its data."""
    why = text(f"{type(exc).__name__}: {exc}")[:300]
    return finding("GF006", (host,), f"rule {where} failed on this host's data: {why}",
                   {"rule_function": where, "exception": why, "subject": where})


def isolated(where: str, hosts: Iterable[str],
             run: Callable[[Sequence[str] | None], Iterable[Finding]]) -> list[Finding]:
    """`run(None)`'s findings (every host); when it raises, `run([host])` for each host finds
    the hosts it raises on, each gets a GF006 naming `where`, and `run(others)` judges the
    rest (a crash across hosts is every remaining host's GF006)."""
    try:
        return list(run(None))
    except Exception:  # found per host below
        bad: dict[str, Exception] = {}
    names = sorted(set(hosts))
    for name in names:
        try:
            list(run([name]))
        except Exception as exc:  # that host's finding
            bad[name] = exc
    rest = [n for n in names if n not in bad]
    found: list[Finding] = []
    try:
        found = list(run(rest)) if rest else []
    except Exception as exc:  # across hosts: each remaining host's
        bad.update(dict.fromkeys(rest, exc))
    return found + [crashed(where, name, exc) for name, exc in sorted(bad.items())]


def _isolated(module: ModuleType, ctx: Ctx) -> list[Finding]:
    return isolated(f"{module.__name__}.check", ctx.report.hosts,
                    lambda names: module.check(ctx if names is None else _only(ctx, names)))
