"""The one judge: a built `Report` -> rules -> summary; then render and exit code.

Every command and engine (check, node-check, ansible-report, report --store, deepcheck) judges a
report through `judge`, and the history-aware rules through `judge_history` (the run store's
saved runs are an input: drift, last known-good, Xid escalation, fabric counter deltas) and
`judge_counters` (node-check's counter file); `amend` adds findings from outside the rules'
inputs (Slurm drains). So findings are always sorted, deduplicated, folded by cause
(rules/one_cause.py: one root cause, one finding) and counted the same way, and the run store
(history/) only stores and reads. Writing the rendered text is the caller's: only the CLI
prints or exits.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gpufleet.history import counters
from gpufleet.history.analysis import Entry
from gpufleet.model import Expectations, Finding, Report
from gpufleet.report.common import document, summarize
from gpufleet.rules import crashed, evaluate, isolated, sort_findings
from gpufleet.rules.escalation import escalation_findings
from gpufleet.rules.fabric_delta import RATE_RULES, WINDOW_RULES, delta_findings, store_deltas
from gpufleet.rules.history import drift_findings
from gpufleet.rules.lkg import lkg_findings
from gpufleet.rules.one_cause import fold
from gpufleet.sku.expect import host_expectations


def summarized(report: Report) -> Report:
    """`report` with its summary (counts by host status and finding severity) filled in."""
    return dataclasses.replace(report, summary=summarize(report))


def judge(report: Report) -> Report:
    """`report` with the rules' findings, each host's expectations and its summary; a host
    whose data makes a rule (or its expectations) raise gets that rule's GF006, the others are
    judged as ever (rules/__init__.py `isolated`)."""
    specs = report.specs
    hosts = dict(report.hosts)
    odd: list[Finding] = []
    for name, h in report.hosts.items():
        try:
            hosts[name] = dataclasses.replace(h, expectations=host_expectations(
                h.facts, h.smoke, specs[name].expect.perf_floors if name in specs else None))
        except Exception as exc:  # an odd value the host printed: that host's error
            odd.append(crashed(f"{host_expectations.__module__}.host_expectations", name, exc))
    report = dataclasses.replace(report, hosts=hosts)
    return summarized(dataclasses.replace(report, findings=sort_findings(
        fold([*evaluate(report), *odd]))))


def amend(report: Report, extra: Iterable[Finding]) -> Report:
    """`report` with `extra` findings sorted in among its own, summary counted again."""
    findings = sort_findings(fold([*report.findings, *extra]))
    return summarized(dataclasses.replace(report, findings=findings))


def drift_of(doc: Mapping[str, Any], entries: Sequence[Entry]) -> list[Finding]:
    """A saved run's (`doc`'s) drift against the older runs: GF52x and last known-good."""
    return [*drift_findings(doc, entries), *lkg_findings(doc, entries)]


def judge_history(report: Report, entries: Sequence[Entry],
                  load: Callable[[Entry], Mapping[str, Any]], *, deltas: bool = True) -> Report:
    """`report` with the history-aware findings over the run store's older runs (`entries`,
    read through `load`): drift (GF52x), last known-good, Xid escalation and, with `deltas`,
    the fabric counter deltas against the previous run (node-check --counters judges those
    over its own file instead)."""
    doc = document(report)
    expect = {n: s.expect for n, s in report.specs.items()}
    rules: list[Callable[[Mapping[str, Any]], Iterable[Finding]]] = [
        lambda d: drift_findings(d, entries), lambda d: lkg_findings(d, entries),
        lambda d: escalation_findings(d, entries, load, report.specs)]
    if deltas:
        rules.append(lambda d: store_deltas(d, entries, load, expect))
    names = ("rules.history.drift_findings", "rules.lkg.lkg_findings",
             "rules.escalation.escalation_findings", "rules.fabric_delta.store_deltas")

    def over(rule: Callable[[Mapping[str, Any]], Iterable[Finding]],
             ) -> Callable[[Sequence[str] | None], Iterable[Finding]]:
        return lambda hosts: rule(_only(doc, hosts))

    return amend(report, [f for where, rule in zip(names, rules, strict=False)
                          for f in isolated(f"gpufleet.{where}", report.hosts, over(rule))])


def _only(doc: Mapping[str, Any], hosts: Sequence[str] | None) -> Mapping[str, Any]:
    """The report document `doc` with only `hosts` (all with None)."""
    if hosts is None:
        return doc
    return {**doc, "hosts": {n: h for n, h in (doc.get("hosts") or {}).items() if n in hosts}}


def counter_findings(host: str, current: Mapping[str, Any],
                     samples: Sequence[Mapping[str, Any]],
                     expect: Expectations | None) -> list[Finding]:
    """fabric_delta's findings for this run's counter sample `current` against the node's
    history `samples`: each rule against the sample its threshold is about (history/counters)."""
    now = counters.when(current)
    if now is None or (samples and counters.was_reset(samples[-1], current)):
        return []  # reset since the last run: the older counts say nothing about the new ones
    limits = {host: expect} if expect else None
    out: list[Finding] = []
    for age, rules in ((counters.WINDOW_S, WINDOW_RULES), (counters.RATE_S, RATE_RULES)):
        base = counters.baseline(samples, now, age)
        if base is not None:
            out += [f for f in delta_findings(counters.as_doc(host, current),
                                              counters.as_doc(host, base), limits)
                    if f.rule in rules]
    return out


def judge_counters(doc: Mapping[str, Any], host: str, path: Path,
                   expect: Expectations | None) -> tuple[list[Finding], list[str]]:
    """Judge `host` of the report document `doc` against the counter file at `path` and record
    this run there: (findings, notes for stderr). Raises OSError when it cannot be written."""
    hdoc = (doc.get("hosts") or {}).get(host)
    current = counters.sample_of(hdoc) if isinstance(hdoc, Mapping) else None
    if current is None:
        return [], []  # no facts this run: nothing to judge, the history stays as it was
    history = counters.CounterHistory(path)
    with counters.locked(path):  # a HealthCheckProgram and a prolog may run at once
        samples = history.load(host)
        findings = counter_findings(host, current, samples, expect)
        history.save(host, counters.kept(samples, current))
    return findings, history.notes
