"""The shipped Prometheus rules and Grafana dashboard (monitoring/): promtool accepts the rules and
passes their unit tests, and every metric a rule or panel queries is one gpufleet exports (so a
renamed metric fails here, not on a user's dashboard)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml  # type: ignore[import-untyped]
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.history import coverage
from gpufleet.report import prometheus

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "monitoring" / "prometheus" / "gpufleet.rules.yml"
RULE_TESTS = ROOT / "monitoring" / "prometheus" / "tests" / "gpufleet.test.yml"
DASHBOARD = ROOT / "monitoring" / "grafana" / "gpufleet-dashboard.json"
REPORT = ROOT / "tests" / "fixtures" / "report" / "golden.json"
# Every metric name PromQL here can mention: gpufleet's exports and the rules' recordings.
_NAME = re.compile(r"\bgpufleet[_:][A-Za-z0-9_:]*")

# The part of Grafana's dashboard model (grafana/grafana docs: "JSON model") this dashboard uses
# and a Grafana 10+ import needs: ids, grid positions, typed panels with PromQL targets.
DASHBOARD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["uid", "title", "schemaVersion", "panels", "templating", "time"],
    "properties": {
        "uid": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,40}$"},
        "schemaVersion": {"type": "integer", "minimum": 36},
        "panels": {"type": "array", "minItems": 1, "items": {
            "type": "object",
            "required": ["id", "type", "title", "gridPos", "datasource", "targets"],
            "properties": {
                "id": {"type": "integer"},
                "type": {"enum": ["stat", "table", "timeseries", "gauge", "bargauge"]},
                "gridPos": {"type": "object", "required": ["x", "y", "w", "h"],
                            "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 23},
                                           "w": {"type": "integer", "minimum": 1, "maximum": 24}}},
                "datasource": {"type": "object", "required": ["type", "uid"]},
                "targets": {"type": "array", "minItems": 1, "items": {
                    "type": "object", "required": ["refId", "expr"],
                    "properties": {"expr": {"type": "string", "minLength": 1}}}},
            }}},
        "templating": {"type": "object", "required": ["list"]},
    },
}


def _promtool() -> str:
    tool = shutil.which("promtool")
    assert tool, "promtool is missing: scripts/setup.sh installs Debian's prometheus package"
    return tool


def _exported() -> set[str]:
    """The metric names of a real report's textfile and of `gpufleet coverage`'s."""
    text = prometheus.render(json.loads(REPORT.read_text()))
    rows = coverage.coverage([{"generated_at": "2026-12-01T00:00:00Z", "level": "full",
                               "hosts": {"n1": {"status": "ok", "smoke": "pass", "world": 2}}}],
                             ["n1", "n2"], coverage.DEFAULT_GOALS,
                             datetime(2026, 12, 2, tzinfo=timezone.utc))
    text += coverage.render_prometheus(rows, coverage.DEFAULT_GOALS)
    text += prometheus.render(SLURM_STEP)  # the lifecycle gauge: node-check --slurm-drain only
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


# A node-check --slurm-drain report: the step evidence as engines/slurm/drain.py writes it.
SLURM_STEP: dict[str, Any] = {
    "hosts": {"n1": {"status": "ok", "facts": None, "smoke": None}},
    "findings": [{"rule": "GF906", "severity": "warning", "hosts": ["n1"], "evidence": {
        "node": "n1", "action": "rma", "lifecycle": {"from": "drained", "to": "rma"}}}]}


def test_the_lifecycle_state_is_a_state_set_per_node() -> None:
    fams = {f.name: f for f in text_string_to_metric_families(prometheus.render(SLURM_STEP))}
    samples = {s.labels["state"]: s.value for s in fams["gpufleet_lifecycle_state"].samples}
    assert samples["rma"] == 1.0 and sum(samples.values()) == 1.0
    assert set(samples) == {"in service", "suspect", "drained", "remediating", "re-validating",
                            "rma", "drained by someone else"}
    plain = dict(SLURM_STEP, findings=[])  # not a Slurm health check: no lifecycle samples
    fams = {f.name: f for f in text_string_to_metric_families(prometheus.render(plain))}
    assert fams["gpufleet_lifecycle_state"].samples == []


def _recorded() -> set[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {r["record"] for g in groups for r in g["rules"] if "record" in r}


def test_promtool_accepts_the_rules() -> None:
    r = subprocess.run([_promtool(), "check", "rules", str(RULES)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS: 19 rules found" in r.stdout


def test_the_rules_pass_their_promtool_unit_tests() -> None:
    r = subprocess.run([_promtool(), "test", "rules", str(RULE_TESTS)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_alert_has_a_unit_test_that_fires_it() -> None:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    alerts = {r["alert"] for g in groups for r in g["rules"] if "alert" in r}
    fired = {t["alertname"] for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
             for t in test.get("alert_rule_test", []) if t["exp_alerts"]}
    assert alerts == fired


def test_rules_query_only_metrics_gpufleet_exports() -> None:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    named = {n for g in groups for r in g["rules"] for n in _NAME.findall(r["expr"])}
    assert named <= _exported() | _recorded(), named - _exported() - _recorded()


def test_the_dashboard_is_a_valid_grafana_model_over_exported_metrics() -> None:
    dash = json.loads(DASHBOARD.read_text())
    jsonschema.validate(dash, DASHBOARD_SCHEMA)
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    cells: set[tuple[int, int]] = set()
    for p in dash["panels"]:  # no two panels on the same grid cell
        g = p["gridPos"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"])
                for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & mine, f"panel {p['title']!r} overlaps another"
        assert g["x"] + g["w"] <= 24, p["title"]
        cells |= mine
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs.append(next(v for v in dash["templating"]["list"] if v["name"] == "host")["definition"])
    named = {n for e in exprs for n in _NAME.findall(e)}
    exported = _exported()
    assert named <= exported, named - exported
    # And the other way round: every exported metric shows somewhere.
    assert exported <= named, exported - named


@pytest.mark.parametrize("renamed", ["gpufleet_busbw_gbps", "gpufleet_finding"])
def test_a_renamed_metric_is_caught(renamed: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real = prometheus.render

    def render(doc: Any, **kw: Any) -> str:
        return re.sub(rf"\b{renamed}\b", renamed + "_v2", real(doc, **kw))

    monkeypatch.setattr(prometheus, "render", render)
    with pytest.raises(AssertionError):
        test_the_dashboard_is_a_valid_grafana_model_over_exported_metrics()
    with pytest.raises(AssertionError):
        test_rules_query_only_metrics_gpufleet_exports()
