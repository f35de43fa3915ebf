"""Node-local counter history (history/counters.py, `node-check --counters FILE`).

Every sample is what the shipped probe.sh reads from a sysfs tree in the kernel's layout
(tests/harness/sysfs_ib.py names the sources), parsed by the real parser; the CLI cases run
the real `gpufleet node-check` on this machine dressed as the 2xH200 profile. The times are the
cases': a history of runs hours apart cannot be waited for, so earlier samples are written with
earlier `collected_at` stamps.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from test_fabric_rules import doc, probe
from test_node_check import _doc, node_check

from gpufleet.history import counters
from gpufleet.history.counters import CounterHistory, kept, sample_of
from gpufleet.report.pipeline import counter_findings as judge
from gpufleet.report.pipeline import judge_counters
from gpufleet.rules.fabric_delta import delta_findings
from harness.sysfs_ib import merged, write_tree

NOW = datetime(2026, 12, 1, 18, 0, tzinfo=timezone.utc)
ROCE = {"mlx5_0/1": {"link_layer": "Ethernet", "netdev": "ens1f0np0"}}


def sample(tmp: Path, change: dict[str, Any], at: datetime) -> dict[str, Any]:
    """One run's counters: probe.sh over ROCE with `change`, as node-check would record it."""
    ports = {n: merged(p, change) for n, p in ROCE.items()}
    root = tmp / at.strftime("%H%M%S%f")
    facts = probe(root, ports, at)
    s = sample_of(doc({"n1": facts})["hosts"]["n1"])
    assert s is not None
    return s


def rules(found: list[Any]) -> set[tuple[str, str]]:
    return {(f.rule, str(f.evidence.get("nic"))) for f in found}


def test_flaps_spread_over_a_day_are_counted_over_the_window(tmp_path: Path) -> None:
    # Five carrier losses (ten carrier_changes) over 20 h, node-check every 5 h: no pair of
    # consecutive runs sees more than two, the 24 h window sees five (Azure's 5 in 24 h).
    hist = [sample(tmp_path, {"carrier_changes": c}, NOW - timedelta(hours=h))
            for h, c in ((20, 0), (15, 4), (10, 6), (5, 8))]
    now = sample(tmp_path, {"carrier_changes": 10}, NOW)
    assert rules(judge("n1", now, hist, None)) == {("GF458", "mlx5_0/1")}
    pair = delta_findings({"hosts": {"n1": {"facts": now}}}, {"hosts": {"n1": {"facts": hist[-1]}}})
    assert pair == []  # what the last run alone (check --save / --history) shows


def test_a_symbol_error_burst_is_a_rate_over_the_last_hour(tmp_path: Path) -> None:
    hist = [sample(tmp_path, {"counters": {"symbol_error": s}}, NOW - timedelta(hours=h))
            for h, s in ((23, 0), (1.5, 100))]
    now = sample(tmp_path, {"counters": {"symbol_error": 400}}, NOW)
    (f,) = judge("n1", now, hist, None)
    # 300 in 1.5 h is 200/h (> 120/h); over the 23 h window it would be 17/h.
    assert f.rule == "GF456" and f.evidence["per_hour"] == 200.0 and f.evidence["interval_h"] == 1.5


def test_a_counter_that_went_down_restarts_the_history(tmp_path: Path) -> None:
    hist = [sample(tmp_path, {"counters": {"link_downed": 3}}, NOW - timedelta(hours=h))
            for h in (6, 2)]
    # After a reboot the counters restart; one link_downed since is below the old 3 but above
    # the window's start only by accident of numbers: nothing is judged on this run.
    now = sample(tmp_path, {"counters": {"link_downed": 1}}, NOW)
    assert judge("n1", now, hist, None) == []
    assert kept(hist, now) == [now]


def test_the_file_keeps_a_day_spaced_and_capped(tmp_path: Path,
                                                monkeypatch: Any) -> None:
    base = sample(tmp_path, {}, NOW)

    def at(t: datetime) -> dict[str, Any]:
        return {**base, "collected_at": t.isoformat()}

    old = [at(NOW - timedelta(hours=26)), at(NOW - timedelta(hours=24.5))]
    dense = [at(NOW - timedelta(seconds=s)) for s in (600, 590, 560, 500)]  # 10-30 s apart
    out = kept([*old, *dense], at(NOW))
    # 26 h is past RETAIN_S (25 h) and dropped; 590 s is within 60 s of 600 s and dropped.
    assert [s["collected_at"] for s in out] == [
        (NOW - timedelta(hours=24.5)).isoformat(), (NOW - timedelta(seconds=600)).isoformat(),
        (NOW - timedelta(seconds=500)).isoformat(), NOW.isoformat()]
    monkeypatch.setattr(counters, "MAX_SAMPLES", 2)
    assert len(kept([*old, *dense], at(NOW))) == 2


# ----------------------------------------------------------------------- node-check itself


def run(tmp: Path, path: Path, ports: dict[str, Any]) -> tuple[dict[str, Any], str]:
    env = {**write_tree(tmp, ports), "GPUFLEET_SYS_PCI_DEVICES": str(tmp / "no-pci")}
    proc, _, _ = node_check("h200x2", "--node", "n1", "--counters", str(path), "--format",
                            "json", env=env)
    return _doc(proc), proc.stderr


def seed(path: Path, tmp: Path, change: dict[str, Any], hours_ago: float) -> None:
    when = datetime.now(timezone.utc) - timedelta(hours=hours_ago)
    CounterHistory(path).save("n1", [sample(tmp, change, when)])


def test_node_check_judges_and_records_the_counters(tmp_path: Path) -> None:
    """A link_downed that rose since a run 2 h ago is GF455, and stays so on the next run
    (the window), not resumed away by it; each run adds a sample to the file."""
    path = tmp_path / "state" / "counters.json"
    seed(path, tmp_path / "seed", {"counters": {"link_downed": 0}}, 2)
    ports = {n: merged(p, {"counters": {"link_downed": 1}}) for n, p in ROCE.items()}
    first, _ = run(tmp_path / "r1", path, ports)
    (hit,) = [f for f in first["findings"] if f["rule"] == "GF455"]
    assert hit["evidence"]["nic"] == "mlx5_0/1" and hit["evidence"]["delta"] == 1
    time.sleep(1.1)  # collected_at has whole seconds: a run of the same second replaces one
    again, _ = run(tmp_path / "r2", path, ports)
    assert [f["evidence"]["delta"] for f in again["findings"] if f["rule"] == "GF455"] == [1]
    saved = json.loads(path.read_text())
    assert saved["schema"] == counters.SCHEMA and saved["host"] == "n1"
    assert len(saved["samples"]) == 3 and saved["samples"][-1]["ib_links"][0]["counters"][
        "link_downed"] == 1


def test_an_unreadable_history_is_set_aside_not_lost(tmp_path: Path) -> None:
    path = tmp_path / "counters.json"
    path.write_text('{"schema": "gpufleet.counters/v1", "host": "other", "samples": []}\n')
    out, err = run(tmp_path / "r", path, ROCE)
    assert "holds the counters of another host: moved to" in err
    assert json.loads((tmp_path / "counters.json.unreadable").read_text())["host"] == "other"
    assert json.loads(path.read_text())["host"] == "n1"
    assert not [f for f in out["findings"] if f["rule"].startswith("GF45")]


def test_two_runs_at_once_take_turns(tmp_path: Path) -> None:
    # A HealthCheckProgram and a prolog may run node-check together: the second waits for the
    # first's FILE.lock instead of writing over its sample.
    import fcntl  # noqa: PLC0415
    import os  # noqa: PLC0415
    import threading  # noqa: PLC0415

    path = tmp_path / "counters.json"
    report = {"hosts": {"n1": {"facts": sample(tmp_path, {}, NOW)}}}
    fd = os.open(tmp_path / "counters.json.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    worker = threading.Thread(target=judge_counters, args=(report, "n1", path, None))
    worker.start()
    worker.join(0.5)
    assert worker.is_alive() and not path.exists()  # waiting for the lock
    os.close(fd)
    worker.join(10)
    assert not worker.is_alive() and len(json.loads(path.read_text())["samples"]) == 1
