"""gpufleet diff: per host, versions and findings that changed between two JSON reports."""

from __future__ import annotations

import dataclasses
import json

from test_report import sample
from test_rules_builders import NOW, fleet, gpu, smoke

from gpufleet.model import DriverInfo, Report
from gpufleet.report import Format, render
from gpufleet.report.diff import diff_reports
from gpufleet.rules import evaluate


def _doc(r: Report) -> dict[str, object]:
    r = dataclasses.replace(r, findings=evaluate(r, now=NOW))
    return json.loads(render(r, Format.json))  # type: ignore[no-any-return]


def test_same_report_has_no_changes() -> None:
    doc = _doc(fleet())
    assert diff_reports(doc, doc).splitlines()[1:] == ["no changes"]


def test_upgrade_and_fix_are_shown_per_host() -> None:
    old = _doc(fleet({"gpu02": {"facts": {"driver": DriverInfo("580.95.05", "580.95.05", "open",
                                                               "13.0"),
                                          "gpus": (gpu(0, persistence_mode=False), gpu(1))}}}))
    new = _doc(fleet({"gpu03": {"facts": {"gpus": (gpu(0), gpu(1, remapped_rows_pending=True))},
                                "smoke": {"busbw_gbps": {4 << 30: 200.0}}}}))
    text = diff_reports(old, new)
    lines = text.splitlines()
    # warnings: GF409 and GF307 (580.95.05 is below the R580 security floors) resolved, GF502 new
    assert lines[1] == "findings: error 1 -> 2, warning 2 -> 1"
    assert "gpu02:" in lines and "gpu03:" in lines
    assert "  driver: 580.95.05 -> 580.159.04" in lines
    assert any(ln.startswith("  - GF101 error") and ln.endswith("(resolved)") for ln in lines)
    assert any(ln.startswith("  - GF409 warning") for ln in lines)
    assert any(ln.startswith("  + GF403 error: gpu03 GPU 1: row remap pending") for ln in lines)
    assert "  busbw @ 4 GiB: 343.7 -> 200.0 GB/s" in lines
    assert lines[-1] == "unchanged: gpu01, gpu04"


def test_moving_number_is_not_new_finding() -> None:
    def bw(v: float) -> dict[str, object]:
        return _doc(fleet({"gpu02": {"smoke": {"busbw_gbps": {4 << 30: v}}}},
                          expectations={"min_busbw_gbps": None}))
    text = diff_reports(bw(200.0), bw(205.0))
    assert "GF502" not in text and "no changes" in text


def test_hosts_added_removed_and_status() -> None:
    old = _doc(fleet(hosts=("a", "b")))
    new = _doc(fleet({"b": {"status": "unreachable", "error": "x", "facts": None, "smoke": None}},
                     hosts=("b", "c")))
    lines = diff_reports(old, new).splitlines()
    assert "a: removed (was ok)" in lines and "c: added (ok)" in lines
    assert "  status: ok -> unreachable" in lines
    assert any(ln.startswith("  + GF001 error") for ln in lines)


def test_smoke_versions_and_sample_roundtrip() -> None:
    old = _doc(fleet(hosts=("a", "b")))
    newer = dataclasses.replace(smoke("b"), ranks=tuple(
        dataclasses.replace(r, torch="2.13.0+cu130", nccl="2.29.1") for r in smoke("b").ranks))
    new = _doc(fleet({"b": {"smoke": newer}}, hosts=("a", "b")))
    lines = diff_reports(old, new).splitlines()
    assert "  torch: 2.11.0+cu130 -> 2.13.0+cu130" in lines
    assert "  torch_nccl: 2.28.9 -> 2.29.1" in lines
    doc = json.loads(render(sample(), Format.json))
    assert "no changes" in diff_reports(doc, doc)
