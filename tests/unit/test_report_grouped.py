"""Identical findings across hosts are one row for people (report/grouped.py: table, Markdown,
the static HTML page; the interactive page lists findings per host); machines keep one finding
per host (JSON, JUnit, Prometheus)."""

from __future__ import annotations

import json

from gpufleet.model import Finding, HostResult, Report
from gpufleet.report import render
from gpufleet.report.grouped import group
from gpufleet.report.pipeline import summarized

FIX = ("ansible-playbook -i INVENTORY gpufleet.gpu.upgrade_driver -l {h}")


def _drift(host: str, have: str = "580.95.05") -> Finding:
    return Finding("GF101", "error", (host,),
                   f"{host}: driver {have}, the inventory wants 580.159.04",
                   {"have": have}, FIX.format(h=host))


def _report() -> Report:
    names = [f"gpu{i:03d}" for i in range(1, 201)]
    findings = [*(_drift(n) for n in names), _drift("login1", have="550.54.15"),
                Finding("GF306", "info", ("gpu001",), "gpu001: system libnccl 2.28.3")]
    return summarized(Report(hosts={n: HostResult(n, "ok") for n in [*names, "login1"]},
                             findings=tuple(findings)))


def test_two_hundred_identical_findings_are_one_row_and_a_different_value_its_own() -> None:
    rows = group(json.loads(json.dumps([f.__dict__ for f in _report().findings])))
    assert [(r["rule"], r["count"], r["host_list"]) for r in rows] == [
        ("GF101", 200, "gpu[001-200]"), ("GF101", 1, "login1"), ("GF306", 1, "gpu001")]
    assert rows[0]["message"] == "{host}: driver 580.95.05, the inventory wants 580.159.04"
    assert rows[0]["remediation"].endswith("-l gpu001,gpu002,gpu003," + ",".join(
        f"gpu{i:03d}" for i in range(4, 201)))
    assert len(rows[0]["hosts"]) == 200


def test_table_and_markdown_show_the_group_json_keeps_every_host() -> None:
    report = _report()
    table = render(report, "table", width=200)
    assert "GF101 x200 gpu[001-200]: driver 580.95.05, the inventory wants 580.159.04" in table
    assert "GF101 [login1] driver 550.54.15" in table
    assert "gpu002" not in table.split("ERROR")[1].split("\n")[1]
    md = render(report, "markdown")
    assert "- **GF101** x200 gpu\\[001-200\\]: driver 580.95.05" in md, md[-800:]
    page = render(report, "html-static")
    assert "<b class=\"error\">GF101</b> x200 gpu[001-200]: driver 580.95.05" in page
    doc = json.loads(render(report, "json"))
    assert sum(f["rule"] == "GF101" for f in doc["findings"]) == 201
    junit = render(report, "junit")
    assert junit.count('GF101') >= 201
