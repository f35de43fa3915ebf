"""The one report pipeline (report/pipeline.py), the renderer registry and the CLI's choices."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
from pathlib import Path

import pytest
from test_report import sample

import gpufleet
from gpufleet.cli import build_parser
from gpufleet.model import HOST_STATUSES, SEVERITIES, Finding, fmt_bytes
from gpufleet.report import Format, renderer
from gpufleet.report.common import summarize
from gpufleet.report.pipeline import amend, judge
from gpufleet.rules import evaluate
from gpufleet.smoke.levels import CHECK_LEVELS, SMOKE_LEVELS


def test_judge_is_the_rules_findings_and_their_summary() -> None:
    bare = dataclasses.replace(sample(), findings=(), summary=None)
    judged = judge(bare)
    assert judged.findings == evaluate(bare)
    assert judged.findings, "the sample fleet has findings"
    assert judged.summary == summarize(judged)
    assert judged.summary["findings"]["error"] == sum(f.severity == "error"
                                                      for f in judged.findings)


def test_amend_sorts_extra_findings_in_and_counts_them() -> None:
    judged = judge(dataclasses.replace(sample(), findings=()))
    extra = Finding(rule="GF901", severity="error", hosts=("gpu01",), message="drained")
    amended = amend(judged, [extra])
    assert extra in amended.findings
    assert amended.findings[0].severity == "error"  # worst first, as evaluate sorts
    assert amended.summary["findings"]["error"] == judged.summary["findings"]["error"] + 1


@pytest.mark.parametrize("fmt", list(Format))
def test_every_format_has_one_renderer_with_the_same_signature(fmt: Format) -> None:
    params = inspect.signature(renderer(fmt)).parameters
    assert list(params) == ["doc", "color", "width"], fmt


def _choices(command: str, option: str) -> tuple[str, ...]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    action = next(a for a in sub.choices[command]._actions if option in a.option_strings)
    assert action.choices is not None
    return tuple(action.choices)


def test_choices_come_from_their_one_definition() -> None:
    formats = tuple(f.value for f in Format)
    for command in ("check", "smoke", "report", "node-check", "ansible-report"):
        assert _choices(command, "--format") == formats, command
        assert _choices(command, "--fail-on") == SEVERITIES, command
    assert _choices("check", "--level") == CHECK_LEVELS
    assert _choices("smoke", "--level") == SMOKE_LEVELS
    assert _choices("localize", "--level") == SMOKE_LEVELS


def test_statuses_and_severities_are_the_models_literals() -> None:
    assert SEVERITIES == ("error", "warning", "info")
    assert HOST_STATUSES[0] == "ok" and "hostkey_mismatch" in HOST_STATUSES
    assert list(summarize(sample())["status"]) == list(HOST_STATUSES)


@pytest.mark.parametrize(("n", "text"), [(4 << 30, "4 GiB"), (1 << 20, "1 MiB"),
                                         (512 << 10, "512 KiB"), (1536 << 20, "1536 MiB"),
                                         (1000, "1000 B"), (0, "0 B")])
def test_fmt_bytes(n: int, text: str) -> None:
    assert fmt_bytes(n) == text


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    return out | {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}


def test_the_run_store_only_stores_and_reads_and_the_cli_has_no_circle() -> None:
    """Issue 36 item 1: judging the history is the pipeline's (`judge_history`,
    `judge_counters`); `history/` imports no rule, `cli/engines` does not import `cli/saved`."""
    pkg = Path(gpufleet.__file__).parent
    for module in sorted((pkg / "history").glob("*.py")):
        up = {m for m in _imports(module) if m.startswith(("gpufleet.rules", "gpufleet.cli"))}
        assert not up, f"{module.name} judges or reaches up: {sorted(up)}"
    assert "gpufleet.cli.saved" not in _imports(pkg / "cli" / "engines.py")
    assert "judge_history" in _imports_names(pkg / "cli" / "saved.py")


def _imports_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
