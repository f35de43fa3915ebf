"""Renderers: golden files, and each format read back by the tool that consumes it.

Regenerate the golden files with GPUFLEET_UPDATE_GOLDEN=1 after an intended change, and review the
diff.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest
import xmlschema
from prometheus_client.parser import text_string_to_metric_families
from test_rules_builders import NOW, fleet, gpu

from gpufleet.model import REPORT_SCHEMA, HostResult, Report, SmokeCheck, XidEvent
from gpufleet.report import (
    Format,
    document,
    exit_code,
    json_schema,
    redact,
    render,
    render_doc,
    summarize,
)
from gpufleet.report import html as html_page
from gpufleet.rules import FAMILIES, evaluate

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "fixtures" / "report"
SCHEMA = REPO / "agent" / "gpufleet" / "schema" / "report-v1.json"
EXT = {Format.table: "txt", Format.json: "json", Format.junit: "xml",
       Format.prometheus: "prom", Format.markdown: "md", Format.html: "html",
       Format.html_static: "static.html"}
SECRET = "hf_" + "Q" * 30


def sample() -> Report:
    """Four hosts: healthy, degraded (warnings), broken (errors), unreachable."""
    r = fleet({
        "gpu02": {"facts": {"gpus": (gpu(0, persistence_mode=False), gpu(1)),
                            "nccl_system_version": "2.27.3"},
                  "smoke": {"busbw_gbps": {1 << 20: 60.1, 4 << 30: 280.5}}},
        "gpu03": {"facts": {"xid_events": (XidEvent(79, "[ 88.1]", "0000:00:07.0",
                                                    "GPU has fallen off the bus."),),
                            "toolkit_version": "1.17.4"},
                  "smoke": {"status": "fail", "log_tail": f"export HF_TOKEN={SECRET}\nboom",
                            "checks": (SmokeCheck("ddp", False, "params differ <rank 1>"),)}},
        "gpu04": {"status": "unreachable", "error": "connect to 10.0.0.4:22: No route to host",
                  "facts": None, "smoke": None},
    })
    return dataclasses.replace(r, findings=evaluate(r, now=NOW))


@pytest.fixture(scope="module")
def report() -> Report:
    return sample()


def _check_golden(path: Path, text: str) -> None:
    if os.environ.get("GPUFLEET_UPDATE_GOLDEN") == "1":
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8"), f"{path.name} differs"


@pytest.mark.parametrize("fmt", list(Format))
def test_golden(report: Report, fmt: Format, monkeypatch: pytest.MonkeyPatch) -> None:
    if fmt is Format.html:
        # The page's golden holds its frame, not the vendored and page assets: an edit of
        # page.js or page.css does not rewrite it (tests/browser runs the real page).
        monkeypatch.setattr(html_page, "_asset", lambda name: f"/* {name} (stubbed) */")
    _check_golden(GOLDEN / f"golden.{EXT[fmt]}", render(report, fmt))


def test_golden_page_data(report: Report) -> None:
    data = html_page.page_data(document(report))
    _check_golden(GOLDEN / "golden.page.json",
                  json.dumps(data, indent=2, ensure_ascii=False, sort_keys=True) + "\n")


@pytest.mark.parametrize("fmt", list(Format))
def test_saved_json_renders_like_the_live_report(report: Report, fmt: Format) -> None:
    doc = json.loads(render(report, Format.json))
    assert render_doc(doc, fmt) == render(report, fmt)


@pytest.mark.parametrize("fmt", list(Format))
def test_no_secret_in_any_format(report: Report, fmt: Format) -> None:
    assert SECRET not in render(report, fmt)


def test_json_validates_against_published_schema(report: Report) -> None:
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    doc = json.loads(render(report, Format.json))
    assert doc["schema"] == REPORT_SCHEMA
    validator.validate(doc)
    for extra in (fleet(), fleet(smoke_on=False), Report(hosts={})):
        validator.validate(json.loads(render(extra, Format.json)))


def test_schema_rejects_a_bad_finding(report: Report) -> None:
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))
    doc = json.loads(render(report, Format.json))
    doc["findings"][0]["severity"] = "critical"
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(doc)


def test_the_packaged_schema_is_the_only_copy_and_the_docs_link_to_it() -> None:
    copies = []
    for top, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("build", "dist")]
        copies += [Path(top, f).relative_to(REPO) for f in files if f == "report-v1.json"]
    assert copies == [SCHEMA.relative_to(REPO)], copies
    assert "(../agent/gpufleet/schema/report-v1.json)" in (REPO / "docs" / "report.md").read_text()
    assert json_schema() == json.loads(SCHEMA.read_text())


def test_junit_validates_against_xsd_and_counts(report: Report) -> None:
    xsd = xmlschema.XMLSchema(GOLDEN / "junit-jenkins.xsd")
    text = render(report, Format.junit)
    xsd.validate(text)
    root = ET.fromstring(text)
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert sorted(suites) == sorted(report.hosts)
    assert int(root.get("tests", "0")) == len(report.hosts) * len(FAMILIES)
    assert suites["gpu01"].get("failures") == "0" and suites["gpu01"].get("errors") == "0"
    failed = {c.get("name") for c in suites["gpu03"].iter("testcase")
              if c.find("failure") is not None}
    assert failed == {"GF1xx desired state", "GF3xx compatibility", "GF4xx hardware",
                      "GF6xx smoke"}
    assert suites["gpu04"].get("errors") == "1"
    assert suites["gpu04"].get("skipped") == str(len(FAMILIES) - 1)
    # Warnings pass but are visible.
    gf4 = next(c for c in suites["gpu02"].iter("testcase") if c.get("name") == "GF4xx hardware")
    assert gf4.find("failure") is None and "GF409" in (gf4.findtext("system-out") or "")


def test_prometheus_parses_back(report: Report) -> None:
    fams = {f.name: f for f in text_string_to_metric_families(render(report, Format.prometheus))}
    up = {s.labels["host"]: s.value for s in fams["gpufleet_host_up"].samples}
    assert up == {"gpu01": 1.0, "gpu02": 1.0, "gpu03": 1.0, "gpu04": 0.0}
    bw = {(s.labels["host"], s.labels["bytes"]): s.value
          for s in fams["gpufleet_busbw_gbps"].samples}
    assert bw[("gpu02", str(4 << 30))] == 280.5 and bw[("gpu01", str(4 << 30))] == 343.7
    errors = {s.labels["host"]: s.value for s in fams["gpufleet_findings"].samples
              if s.labels["severity"] == "error"}
    assert errors["gpu03"] >= 3 and errors["gpu01"] == 0
    (v,) = [s for s in fams["gpufleet_versions_info"].samples if s.labels["host"] == "gpu01"]
    assert v.labels["driver"] == "580.159.04" and v.labels["torch_nccl"] == "2.28.9"
    assert fams["gpufleet_report_timestamp_seconds"].samples[0].value == 1796040000.0


def test_html_escapes_everything() -> None:
    r = fleet({"<b>x": {"status": "error", "error": "<script>alert(1)</script>", "facts": None,
                        "smoke": None}}, hosts=("<b>x",))
    r = dataclasses.replace(r, findings=evaluate(r, now=NOW))
    page = render(r, Format.html_static)
    assert "<script>" not in page and "<b>x" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    # The interactive page: the page's own two scripts and its JSON data, nothing from the host.
    page = render(r, Format.html)
    assert page.count("<script") == 3 and "alert(1)</script>" not in page and "<b>x" not in page
    assert "\\u003cscript\\u003ealert(1)\\u003c/script\\u003e" in page


def test_markdown_escapes_table_pipes() -> None:
    r = fleet({"a": {"status": "error", "error": "x | y", "facts": None, "smoke": None}},
              hosts=("a",))
    md = render(r, Format.markdown)
    assert "x \\| y" in md


def test_table_is_plain_and_deterministic(report: Report) -> None:
    text = render(report, Format.table)
    assert "\x1b[" not in text and text == render(report, Format.table)
    assert text.splitlines()[0].startswith("gpufleet: UNHEALTHY")
    assert "\x1b[" in render(report, Format.table, color=True)


def test_summary_counts(report: Report) -> None:
    s = summarize(report)
    assert s["hosts"] == 4 and s["status"]["ok"] == 3 and s["status"]["unreachable"] == 1
    assert s["findings"]["error"] == sum(f.severity == "error" for f in report.findings)
    assert s["worst"] == "error" and s["healthy"] is False
    assert s["hosts_with"] == {"error": 3, "warning": 0, "info": 0}
    healthy = fleet()
    assert summarize(healthy)["healthy"] is True and summarize(healthy)["worst"] is None


def test_exit_code(report: Report) -> None:
    warn_only = tuple(f for f in report.findings if f.severity != "error")
    assert exit_code(report.findings, "error") == 1
    assert exit_code(warn_only, "error") == 0
    assert exit_code(warn_only, "warning") == 1
    assert exit_code((), "warning") == 0
    with pytest.raises(ValueError, match="fail-on"):
        exit_code((), "critical")


def test_document_keeps_the_contract_order(report: Report) -> None:
    doc = document(report)
    assert list(doc)[:6] == ["schema", "generated_at", "level", "hosts", "findings", "summary"]
    assert "specs" not in doc


def test_redaction_patterns() -> None:
    assert redact("NCCL_X=1 AWS_SECRET_ACCESS_KEY=abc/def") == "NCCL_X=1 AWS_SECRET_ACCESS_KEY=***"
    assert redact("https://user:pw@mirror.example/x") == "https://***@mirror.example/x"
    assert redact("Authorization: Bearer abc.def") == "Authorization: Bearer ***"
    assert "MII" not in redact("-----BEGIN OPENSSH PRIVATE KEY-----\nMIIabc\n"
                               "-----END OPENSSH PRIVATE KEY-----")
    assert redact("driver 580.159.04 token_count 3") == "driver 580.159.04 token_count 3"


def test_secret_in_a_mapping_is_redacted_by_its_key() -> None:
    r = fleet({"gpu02": {"smoke": {"status": "fail", "checks": (SmokeCheck(
        "versions", False, "x", {"env": {"WANDB_API_KEY": "k-123", "NCCL_DEBUG": "INFO"}}),)}}})
    r = dataclasses.replace(r, findings=evaluate(r, now=NOW))
    doc = json.loads(render(r, Format.json))
    env = doc["hosts"]["gpu02"]["smoke"]["checks"][0]["data"]["env"]
    assert env == {"WANDB_API_KEY": "***", "NCCL_DEBUG": "INFO"}
    assert "k-123" not in render(r, Format.json)


def test_unchecked_host_renders_in_every_format() -> None:
    r = Report(hosts={"h": HostResult("h", "timeout", "probe timed out after 30 s")})
    for fmt in Format:
        assert "h" in render(r, fmt)
    assert re.search(r"timeout", render(r, Format.table))


def test_docs_list_every_prometheus_metric(report: Report) -> None:
    names = {f.name for f in text_string_to_metric_families(render(report, Format.prometheus))}
    doc = (REPO / "docs" / "report.md").read_text()
    assert names and all(f"`{n}`" in doc for n in names), names


def test_xsd_accepts_junit_written_by_pytest(tmp_path: Path) -> None:
    # The schema is not shaped around our renderer: another producer's JUnit XML validates too.
    (tmp_path / "test_x.py").write_text(
        "import pytest\n"
        "def test_ok(): pass\n"
        "def test_bad(): assert 1 == 2\n"
        "@pytest.mark.skip(reason='n/a')\n"
        "def test_skip(): pass\n")
    out = tmp_path / "junit.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    f"--junitxml={out}", "-o", "addopts=", str(tmp_path / "test_x.py")],
                   cwd=tmp_path, capture_output=True, check=False, timeout=120)
    xmlschema.XMLSchema(GOLDEN / "junit-jenkins.xsd").validate(str(out))
    assert ET.parse(out).getroot().find("testsuite").get("failures") == "1"  # type: ignore[union-attr]
