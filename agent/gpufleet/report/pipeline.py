"""The one report pipeline: a built `Report` -> rules -> summary; then render and exit code.

Every command and engine (the CLI, node-check, the Ansible/AWX report) judges a report through
`judge` (and `amend` for findings from outside the rules' inputs: Slurm drains, run-store drift),
so findings are always sorted, deduplicated, folded by cause (rules/one_cause.py: one
root cause, one finding) and counted the same way. Writing the rendered text
is the caller's: only the CLI prints or exits.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from gpufleet.model import Finding, Report
from gpufleet.report.common import summarize
from gpufleet.rules import evaluate, sort_findings
from gpufleet.rules.one_cause import fold
from gpufleet.sku.expect import host_expectations


def summarized(report: Report) -> Report:
    """`report` with its summary (counts by host status and finding severity) filled in."""
    return dataclasses.replace(report, summary=summarize(report))


def judge(report: Report) -> Report:
    """`report` with the rules' findings, each host's expectations and its summary."""
    specs = report.specs
    hosts = {name: dataclasses.replace(h, expectations=host_expectations(
        h.facts, h.smoke, specs[name].expect.perf_floors if name in specs else None))
        for name, h in report.hosts.items()}
    report = dataclasses.replace(report, hosts=hosts)
    findings = sort_findings(fold(evaluate(report)))
    return summarized(dataclasses.replace(report, findings=findings))


def amend(report: Report, extra: Iterable[Finding]) -> Report:
    """`report` with `extra` findings sorted in among its own, summary counted again."""
    findings = sort_findings(fold([*report.findings, *extra]))
    return summarized(dataclasses.replace(report, findings=findings))
