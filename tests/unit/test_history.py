"""Run store, per-host history and the slow-drift rules (GF520/GF521).

Two saved runs of a 4-host fleet shaped like the real 2xH200 capture: between them the driver moves
from 580.159.04 to 580.172.01 on every host and gpu02's busbw at 4 GiB falls 15 %, still above the
fleet's outlier limit (the fleet has spread), so only its own history can tell.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from clirun import Ran
from test_rules_builders import BUSBW, NOW, fleet

from gpufleet.history import RunStore, history_section
from gpufleet.model import DriverInfo
from gpufleet.report import document, json_schema, render_doc
from gpufleet.rules import evaluate
from gpufleet.rules.history import drift_findings

BIG = 4 << 30
# Per host busbw at 4 GiB in the first run: a fleet with spread, as real fleets have.
FIRST = {"gpu01": 300.0, "gpu02": 345.0, "gpu03": 330.0, "gpu04": 290.0}


def run(stamp: str, driver: str, busbw: dict[str, float],
        tflops: dict[str, dict[int, float]] | None = None) -> dict[str, Any]:
    changes = {
        name: {"facts": {"driver": DriverInfo(version=driver, kernel_module_version=driver,
                                              kernel_module_flavor="open", cuda_version="13.0")},
               "smoke": {"busbw_gbps": {**BUSBW, BIG: bw},
                         **({"matmul_tflops": tflops[name]} if tflops and name in tflops
                            else {})}}
        for name, bw in busbw.items()}
    r = dataclasses.replace(fleet(changes, with_expect=False), generated_at=stamp)
    r = dataclasses.replace(r, findings=evaluate(r, now=NOW))
    return document(r)


@pytest.fixture
def store(tmp_path: Path) -> RunStore:
    s = RunStore(tmp_path / "runs")
    s.save(run("2026-11-29T12:00:00Z", "580.159.04", FIRST))
    return s


def second() -> dict[str, Any]:
    return run("2026-11-30T12:00:00Z", "580.172.01", {**FIRST, "gpu02": FIRST["gpu02"] * 0.85})


def test_a_15_percent_drop_is_named_on_that_host_only(store: RunStore) -> None:
    doc = second()
    assert not [f for f in doc["findings"] if f["severity"] != "info"], \
        "the fleet rules alone must not see the drop (it is above the fleet's outlier limit)"
    found = drift_findings(doc, store.entries())
    assert [(f.rule, f.hosts) for f in found] == [("GF520", ("gpu02",))]
    f = found[0]
    assert f.evidence["baseline_gbps"] == 345.0
    assert f.evidence["busbw_gbps"] == pytest.approx(293.25)
    assert "15%" in f.message and "345.0" in f.message and "4 GiB" in f.message
    assert "gpu02" in f.remediation and "15%" in f.remediation


def test_history_names_the_driver_change_and_the_drop(store: RunStore) -> None:
    doc = second()
    doc["findings"] += [dataclasses.asdict(f) | {"hosts": list(f.hosts)}
                        for f in drift_findings(doc, store.entries())]
    hist = history_section(doc, store.entries(), store.load)["hosts"]
    for name in FIRST:
        assert hist[name]["last_good"]["generated_at"] == "2026-11-29T12:00:00Z"
        changed = hist[name]["changes"]
        assert "driver: 580.159.04 -> 580.172.01" in changed
        assert "kernel_module: 580.159.04 -> 580.172.01" in changed
        if name == "gpu02":
            assert "busbw @ 4 GiB: 345.0 -> 293.2 GB/s (-15.0%)" in changed
            assert [c for c in changed if c.startswith("+ ")] == [
                next(c for c in changed if c.startswith("+ GF520 warning: busbw 293.2 GB/s"))]
            assert len(changed) == 4, changed
        else:
            assert len(changed) == 2, (name, changed)
    assert [p["busbw"] for p in hist["gpu02"]["trend"]] == [345.0, pytest.approx(293.25)]
    assert hist["gpu02"]["baseline"] == {"busbw": 345.0, "bytes": BIG, "runs": 1}


def test_tflops_drift_per_gpu(store: RunStore) -> None:
    tf = {n: {0: 700.0, 1: 700.0} for n in FIRST}
    s2 = RunStore(store.root.parent / "tf")
    s2.save(run("2026-11-29T12:00:00Z", "580.159.04", FIRST, tf))
    doc = run("2026-11-30T12:00:00Z", "580.159.04", FIRST, {**tf, "gpu03": {0: 700.0, 1: 600.0}})
    found = drift_findings(doc, s2.entries())
    assert [(f.rule, f.hosts, f.evidence["gpu"]) for f in found] == [("GF521", ("gpu03",), 1)]


def test_a_drifted_run_is_not_a_baseline_and_noise_is_not_drift(store: RunStore) -> None:
    store.save(json.loads(json.dumps(second())) | {"findings": [
        {"rule": "GF520", "severity": "warning", "hosts": ["gpu02"], "message": "m",
         "evidence": {}, "remediation": "r"}]})
    doc = run("2026-12-01T12:00:00Z", "580.172.01", {**FIRST, "gpu02": 340.0, "gpu01": 285.0})
    assert drift_findings(doc, store.entries()) == [], "5 % down is noise, and the recovered " \
        "host is judged against its good run, not the drifted one"


def test_store_index_is_rebuilt_and_reports_rerender(store: RunStore, tmp_path: Path) -> None:
    (store.root / "index.json").unlink()
    (store.root / "gpufleet-garbage.json").write_text("{not json")
    entries = store.entries()
    assert [e["generated_at"] for e in entries] == ["2026-11-29T12:00:00Z"]
    saved = store.root / entries[0]["file"]
    assert render_doc(json.loads(saved.read_text()), "markdown").startswith("# gpufleet report")


def test_history_and_report_commands(store: RunStore, tmp_path: Path,
                                     cli: Callable[..., Ran]) -> None:
    doc = second()
    doc["findings"] += [json.loads(json.dumps(dataclasses.asdict(f)))
                        for f in drift_findings(doc, store.entries())]
    doc["history"] = history_section(doc, store.entries(), store.load)
    jsonschema.validate(json.loads(json.dumps(doc)), json_schema())  # history is in the contract
    path = store.save(doc)
    r = cli("history", "--store", str(store.root), "gpu02", "gpu01", "nosuch")
    assert r.returncode == 1, r.stderr  # drift found
    out = r.stdout
    assert "gpu02: last known-good run 2026-11-29T12:00:00Z" in out
    assert "    driver: 580.159.04 -> 580.172.01" in out
    assert "    busbw @ 4 GiB: 345.0 -> 293.2 GB/s (-15.0%)" in out
    assert out.count("drift GF520") == 1 and "drift GF520: busbw 293.2" in out
    assert "nosuch: not in the saved runs" in out
    r = cli("history", "--store", str(store.root), "--format", "json", "gpu01")
    assert r.returncode == 0 and json.loads(r.stdout)["drift"] == []
    for fmt in ("table", "json", "junit", "prometheus", "markdown", "html", "html-static"):
        r = cli("report", str(path), "--format", fmt)
        assert r.returncode == 0 and r.stdout, (fmt, r.stderr)
    r = cli("report", str(path), "--format", "table")
    assert "[gpu02] busbw 293.2 GB/s at 4 GiB is 15% below" in r.stdout
    html = cli("report", str(path), "--format", "html").stdout
    assert "driver: 580.159.04 -\\u003e 580.172.01" in html, "history reaches the page's data"
    bad = tmp_path / "bad.json"
    bad.write_text('{"hosts": {"a": {}}}')
    r = cli("report", str(bad))
    assert r.returncode == 2
    assert "bad.json is not a gpufleet JSON report: the top level: lacks 'schema'" in r.stderr
    r = cli("history", "--store", str(tmp_path / "empty"))
    assert r.returncode == 2 and "no saved runs" in r.stderr


def test_prune_drops_older_runs_and_their_files(store: RunStore) -> None:
    """node-check --history-keep-days: the index loses the old entries first, then the files."""
    store.save(second())
    assert store.prune("2026-11-30T00:00:00Z") == 1
    assert [e["generated_at"] for e in store.entries()] == ["2026-11-30T12:00:00Z"]
    assert sorted(p.name for p in store.root.glob("gpufleet-*.json")) == [
        "gpufleet-2026-11-30T120000Z.json"]
    assert store.prune("2026-11-30T00:00:00Z") == 0
