"""`gpufleet node-check` on this machine, dressed as a simulated host (a profile's bin/ first on
PATH, GPUFLEET_PROC_DRIVER_NVIDIA for /proc/driver/nvidia), and the JSON → Facts decoder the
Ansible path relies on."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from test_profiles import PROFILES  # built from the overlays, as the fleet does at start

from gpufleet.engines.ansible import facts_from_json
from gpufleet.model import to_jsonable

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "fixtures" / "golden" / "profiles"


def node_check(profile: str, *args: str, env: dict[str, str] | None = None,
               ) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """The command's result, its wall time and its CPU time (user+sys)."""
    prof = PROFILES / profile
    full = {k: v for k, v in os.environ.items() if k != "SLURMD_NODENAME"}
    full.update(PATH=f"{prof / 'bin'}:{os.environ['PATH']}",
                GPUFLEET_PROC_DRIVER_NVIDIA=str(prof / "proc_driver_nvidia"), **(env or {}))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "gpufleet", "node-check", *args], env=full,
                          capture_output=True, text=True, timeout=120, check=False)
    wall = time.monotonic() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return proc, wall, cpu


def _doc(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    try:
        doc: dict[str, Any] = json.loads(proc.stdout)
    except ValueError:
        pytest.fail(f"no JSON (exit {proc.returncode}): {proc.stderr[-2000:]}")
    return doc


def test_healthy_node_facts_level_within_two_seconds() -> None:
    runs = [node_check("h200x2", "--node", "n1", "--format", "json") for _ in range(2)]
    for proc, _, _ in runs:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = _doc(runs[0][0])
    assert list(doc["hosts"]) == ["n1"] and len(doc["hosts"]["n1"]["facts"]["gpus"]) == 2
    wall, cpu = min(r[1] for r in runs), min(r[2] for r in runs)
    load = os.getloadavg()[0]
    print(f"node-check --level facts, healthy 2xH200 profile: {wall:.2f} s wall, {cpu:.2f} s "
          f"CPU (best of 2; load average {load:.1f} on {os.cpu_count()} CPUs)")
    # The work itself, whatever else runs on the machine: Python, imports, probe, rules.
    assert cpu <= 1.0, cpu
    # Wall time is only the node's own when the machine is not oversubscribed (a shared CI
    # runner can be); the bound is for a healthy node, not a starved one.
    if load < (os.cpu_count() or 1):
        assert wall <= 2.0, wall


def test_expectations_file_brings_desired_state_rules(tmp_path: Path) -> None:
    expect = tmp_path / "expect.yml"
    expect.write_text("nvidia_driver_version: '580.159.04'\ngpufleet_expected_gpu_count: 2\n")
    with_file, _, _ = node_check("driver-drift", "--expect", str(expect), "--format", "json")
    assert with_file.returncode == 1
    rules = {f["rule"] for f in _doc(with_file)["findings"]}
    assert "GF101" in rules
    # Without the file: rules that need expectations (or peers) cannot fire.
    without, _, _ = node_check("driver-drift", "--format", "json")
    assert "GF101" not in {f["rule"] for f in _doc(without)["findings"]}


def test_node_name_comes_from_slurmd_nodename_first() -> None:
    proc, _, _ = node_check("h200x2", "--node", "ignored", "--format", "json",
                         env={"SLURMD_NODENAME": "gpu-a17"})
    assert list(_doc(proc)["hosts"]) == ["gpu-a17"]


@pytest.mark.parametrize(("text", "says"), [
    ("nvidia_driver_verison: '580'\n", "unknown variable(s) nvidia_driver_verison"),
    ("- a\n- b\n", "must be a mapping of inventory variables"),
    ("gpufleet_expected_gpu_count: many\n", "is not an integer"),
    ("a: [\n", "is not YAML"),
])  # fmt: skip
def test_bad_expectations_file_is_a_usage_error(tmp_path: Path, text: str, says: str) -> None:
    expect = tmp_path / "expect.yml"
    expect.write_text(text)
    proc, _, _ = node_check("h200x2", "--expect", str(expect))
    assert proc.returncode == 2
    assert says in proc.stderr and proc.stdout == ""


@pytest.mark.parametrize("path", sorted(GOLDEN.glob("*.json")), ids=lambda p: p.stem)
def test_facts_json_decodes_back_to_the_same_facts(path: Path) -> None:
    doc = json.loads(path.read_text())
    facts = facts_from_json(doc)
    back = to_jsonable(facts)
    assert {k: back[k] for k in doc} == doc  # (the golden files leave out volatile families)
    assert isinstance(facts.gpus, tuple)
    if facts.fabric is not None and facts.fabric.gpu_states:
        assert all(isinstance(k, int) for k in facts.fabric.gpu_states)


def test_declared_workspace_not_running_is_gf808(tmp_path: Path) -> None:
    """Failed on main: the expectations file refused pytorch_workspaces, so GF808 never fired."""
    expect = tmp_path / "expect.yml"
    expect.write_text("pytorch_image_digest: 'sha256:" + "b" * 64 + "'\n"
                      "pytorch_workspaces:\n  - {name: lab, image_digest: 'sha256:" + "a" * 64
                      + "'}\n")
    proc, _, _ = node_check("h200x2", "--node", "n1", "--expect", str(expect), "--format", "json")
    gf808 = [f for f in _doc(proc)["findings"] if f["rule"] == "GF808"]
    assert [f["evidence"]["workspace"] for f in gf808] == ["lab"], proc.stderr


def test_node_local_history_escalates_a_gpu_that_keeps_asking_for_a_reboot(
        tmp_path: Path) -> None:
    """`--history DIR`: node-check saves each run there and counts Xids over it. Two earlier
    boots (saved runs an hour apart) logged Xid 79 on GPU 1; this boot logs it again (profile
    xid): the third ask, past gpud's limit of 2 reboots, is GF432."""
    from datetime import datetime, timedelta, timezone  # noqa: PLC0415

    from gpufleet.history.store import RunStore  # noqa: PLC0415

    store = RunStore(tmp_path / "history")
    for hours, stamp in ((3, "[ 4711.000001]"), (2, "[ 912.500000]")):
        at = (datetime.now(timezone.utc) - timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M:%SZ")
        # A whole saved report (the store reads only valid ones): the golden one, reshaped.
        doc = json.loads((Path(__file__).parents[1] / "fixtures" / "report" /
                          "golden.json").read_text())
        host = dict(next(iter(doc["hosts"].values())), name="n1", status="ok", smoke=None)
        host["facts"] = dict(host["facts"], xid_events=[{
            "xid": 79, "timestamp": stamp, "bus_id": "00000000:00:07.0",
            "message": "GPU has fallen off the bus."}])
        store.save(dict(doc, generated_at=at, hosts={"n1": host}, findings=[]))
    proc, _, _ = node_check("xid", "--node", "n1", "--history", str(tmp_path / "history"),
                            "--format", "json")
    doc = _doc(proc)
    (rma,) = [f for f in doc["findings"] if f["rule"] == "GF432"]
    assert rma["evidence"]["count"] == 3 and rma["evidence"]["bus_id"] == "00000000:00:07.0"
    assert len(store.entries()) == 3  # this run saved too
    again = _doc(node_check("xid", "--node", "n1", "--history", str(tmp_path / "history"),
                            "--format", "json")[0])
    (rma,) = [f for f in again["findings"] if f["rule"] == "GF432"]
    assert rma["evidence"]["count"] == 3  # the same log lines count once, however many runs


def test_without_history_the_runs_own_log_escalates(tmp_path: Path) -> None:
    """No store: a burst in this run's log is still one (GF431), and the limit is the
    expectations file's gpufleet_xid13_31_limit."""
    burst = _doc(node_check("xid13-burst", "--node", "n1", "--format", "json")[0])
    assert "GF431" in {f["rule"] for f in burst["findings"]}
    expect = tmp_path / "expect.yml"
    expect.write_text("gpufleet_xid13_31_limit: 10\n")
    calm = _doc(node_check("xid13-burst", "--node", "n1", "--expect", str(expect),
                           "--format", "json")[0])
    assert "GF431" not in {f["rule"] for f in calm["findings"]}


def test_a_node_declared_without_gpus_smoke_tests_its_cpu_ranks(tmp_path: Path) -> None:
    """A deep check (gpufleet deepcheck) of a CPU node must pass for coverage to count it: with
    gpufleet_expected_gpu_count: 0 the smoke test runs on gloo; undeclared, it is skipped."""
    smoke = {"gpufleet_smoke_runtime": "host", "gpufleet_smoke_python": sys.executable}
    got = {}
    for name, extra in (("declared", {"gpufleet_expected_gpu_count": 0}), ("undeclared", {})):
        expect = tmp_path / f"{name}.yml"
        expect.write_text(json.dumps({**smoke, **extra}))
        proc, _, _ = node_check("no-nvidia-smi", "--node", "c1", "--level", "quick",
                                "--expect", str(expect), "--format", "json")
        got[name] = _doc(proc)["hosts"]["c1"]["smoke"]
    assert got["declared"]["status"] == "pass", got["declared"]
    assert got["declared"]["backend"] == "gloo"
    assert got["undeclared"]["status"] == "skipped"
    assert "nothing to smoke-test" in got["undeclared"]["error"]
