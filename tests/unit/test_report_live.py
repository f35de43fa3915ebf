"""A real report from the 2xH200 device machine (tests/fixtures/report/README.md): it validates,
says healthy, and renders in every format for the tools that read them."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import xmlschema
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.model import SEVERITY_ORDER
from gpufleet.report import Format, render_doc
from gpufleet.report.diff import diff_reports

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures" / "report"


@pytest.fixture(scope="module")
def live() -> dict[str, object]:
    return json.loads((FIX / "live-h200x2-2026-11-30.json").read_text())  # type: ignore[no-any-return]


def test_live_report_is_valid_and_healthy(live: dict[str, object]) -> None:
    schema = json.loads((REPO / "agent" / "gpufleet" / "schema" / "report-v1.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(live)
    findings = live["findings"]
    assert isinstance(findings, list) and findings
    assert max(SEVERITY_ORDER[f["severity"]] for f in findings) == SEVERITY_ORDER["info"]
    host = live["hosts"]["localhost"]  # type: ignore[index]
    assert host["smoke"]["status"] == "pass" and len(host["facts"]["gpus"]) == 2


def test_live_report_renders_for_its_consumers(live: dict[str, object]) -> None:
    xmlschema.XMLSchema(FIX / "junit-jenkins.xsd").validate(render_doc(live, Format.junit))
    fams = {f.name: f for f in text_string_to_metric_families(
        render_doc(live, Format.prometheus))}
    bw = {s.labels["bytes"]: s.value for s in fams["gpufleet_busbw_gbps"].samples}
    assert bw[str(256 << 20)] > 250  # measured 299.8 GB/s
    table = render_doc(live, Format.table)
    assert table.startswith("gpufleet: HEALTHY") and "2x NVIDIA H200" in table
    assert "no changes" in diff_reports(live, live)
