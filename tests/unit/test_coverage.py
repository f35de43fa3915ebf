"""`gpufleet coverage`: per node the age of its last passing check at each depth, from a real run
store directory the store itself wrote (RunStore.save), and the nodes out of goal."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from gpufleet.history import RunStore
from gpufleet.history.coverage import GoalError, coverage, parse_goal

REPORT = Path(__file__).resolve().parents[1] / "fixtures" / "report" / "golden.json"


def _run(when: datetime, level: str,
         hosts: dict[str, tuple[str, str | None, int]]) -> dict[str, Any]:
    """A saved report (the golden one reshaped): host -> (status, smoke status, world size)."""
    doc = json.loads(REPORT.read_text())
    base = next(iter(doc["hosts"].values()))
    doc["hosts"] = {}
    for name, (status, smoke, world) in hosts.items():
        h = copy.deepcopy(base)
        h["name"], h["status"] = name, status
        h["smoke"] = None if smoke is None else {**(base.get("smoke") or {}), "status": smoke,
                                                 "hosts": [f"{name}-{i}" for i in range(world)]}
        doc["hosts"][name] = h
    doc["findings"] = []
    doc["level"], doc["generated_at"] = level, when.isoformat().replace("+00:00", "Z")
    return doc


@pytest.fixture
def now() -> datetime:
    """The command judges against the clock, so the store is written relative to the moment the test
    starts (never the moment the module was imported: the suite may reach it an hour later)."""
    return datetime.now(timezone.utc)


@pytest.fixture
def store(tmp_path: Path, now: datetime) -> Path:
    s = RunStore(tmp_path / "store")
    (tmp_path / "store").mkdir()
    s.save(_run(now - timedelta(days=9), "full", {"node1": ("ok", "pass", 1),
                                                   "node2": ("ok", "pass", 2)}))
    s.save(_run(now - timedelta(days=2), "full", {"node2": ("ok", "fail", 1)}))
    s.save(_run(now - timedelta(hours=3), "quick", {"node1": ("ok", "pass", 1),
                                                     "node2": ("ok", "pass", 1)}))
    s.save(_run(now - timedelta(minutes=10), "facts", {"node1": ("ok", None, 1),
                                                        "node3": ("unreachable", None, 1)}))
    return tmp_path / "store"


def test_each_depth_is_covered_by_the_newest_passing_run_at_that_depth_or_deeper(
        store: Path, now: datetime) -> None:
    goals = dict(map(parse_goal, ["full=7d", "quick=1d", "multinode=14d"]))
    rows = {r.host: r for r in coverage(RunStore(store).entries(), ["node1", "node2", "node3",
                                                                    "node4"], goals, now)}
    days = {h: {d: (None if a is None else round(a / 86400, 2)) for d, a in r.age_s.items()}
            for h, r in rows.items()}
    # node1: full 9 days ago (out of a weekly goal), quick 3 h, facts 10 min; never multinode.
    assert days["node1"] == {"facts": 0.01, "quick": 0.12, "full": 9.0, "multinode": None}
    assert rows["node1"].overdue == ("full", "multinode")
    # node2: its 2-day-old full run failed, so the last passing full is the multinode one.
    assert days["node2"] == {"facts": 0.12, "quick": 0.12, "full": 9.0, "multinode": 9.0}
    assert rows["node2"].overdue == ("full",)
    # node3 was never checked successfully; node4 is only in the inventory.
    assert rows["node3"].overdue == rows["node4"].overdue == ("full", "quick", "multinode")


@pytest.mark.parametrize("bad", ["full", "full=", "deep=7d", "full=7", "full=0d", "quick=1y"])
def test_a_bad_goal_says_what_it_expects(bad: str) -> None:
    with pytest.raises(GoalError, match="expected DEPTH=DURATION"):
        parse_goal(bad)


def test_the_command_prints_the_table_json_and_prometheus_and_exits_1_when_out_of_goal(
        store: Path, tmp_path: Path) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gpufleet", "coverage", "--store", str(store),
                               *args], capture_output=True, text=True, timeout=60)

    r = cli("--goal", "facts=1h", "node1")
    assert r.returncode == 0, r.stderr
    assert "0 out of goal" in r.stdout
    r = cli()  # default goals: full weekly, quick daily
    assert r.returncode == 1, r.stderr
    lines = {ln.split()[0]: ln for ln in r.stdout.splitlines()[2:]}
    assert lines["node1"].endswith("full") and lines["node3"].endswith("full, quick")
    doc = json.loads(cli("--format", "json").stdout)
    assert {n["host"]: n["overdue"] for n in doc["nodes"]}["node2"] == ["full"]
    out = tmp_path / "coverage.prom"
    assert cli("--format", "prometheus", "-o", str(out)).returncode == 1
    assert 'gpufleet_coverage_overdue{depth="full",host="node1"} 1.0' in out.read_text()
    bad = cli("--goal", "deep=1d")
    assert bad.returncode == 2 and "expected DEPTH=DURATION" in bad.stderr
