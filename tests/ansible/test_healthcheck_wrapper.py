"""The Slurm health-check wrapper the gpufleet_healthcheck role renders, run for real (sh, flock)
against a stand-in CLI: findings (exit 1 with a report) end as 0, anything that did not check the
node does not (issue 22 F12: a Prolog must never let a job start on an unchecked node). And the
role's own guards before it edits slurm.conf (issue 23 M16, M17, L9): a trial run, and another
site's HealthCheckProgram is not replaced silently."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, run_playbook

pytestmark = [pytest.mark.ansible]

# Writes a report to -o when told to, then exits as told: the two things the wrapper reads.
STAND_IN = """#!/bin/sh
out=
while [ $# -gt 0 ]; do [ "$1" = -o ] && out=$2; shift; done
[ "$STANDIN_WRITE" = 1 ] && echo '{"schema": "gpufleet.report/v1"}' > "$out"
exit "$STANDIN_RC"
"""


@pytest.fixture(scope="module")
def wrapper(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("healthcheck")
    cli = root / "gpufleet"
    cli.write_text(STAND_IN)
    cli.chmod(0o755)
    inventory = root / "inventory.json"
    inventory.write_text(json.dumps({"all": {"hosts": {"n1": {
        "ansible_connection": "local", "render_root": str(root),
        "gpufleet_healthcheck_command": str(cli)}}}}))
    # A deep-check schedule left from when this host ran deepcheck (the next test).
    (root / "cron.d").mkdir()
    (root / "cron.d" / "gpufleet-deepcheck").write_text("0 * * * * root gpufleet deepcheck\n")
    res = run_playbook(REPO / "tests/ansible/playbooks/render_healthcheck.yml", inventory, root,
                       "render-wrapper")
    assert res.rc == 0, res.tail()
    return root / "libexec" / "gpufleet-healthcheck"


def test_a_host_that_does_not_schedule_deep_checks_keeps_no_cron_entry(wrapper: Path) -> None:
    """Moving gpufleet_healthcheck_deepcheck_schedule to another host must not leave two
    deepcheck runs submitting for the same nodes: the role removes the entry elsewhere."""
    assert not (wrapper.parents[1] / "cron.d" / "gpufleet-deepcheck").exists()


def _run(wrapper: Path, rc: int, write: bool) -> int:
    env = {**os.environ, "SLURMD_NODENAME": "n1", "STANDIN_RC": str(rc),
           "STANDIN_WRITE": "1" if write else "0"}
    return subprocess.run([str(wrapper)], env=env, timeout=30, check=False).returncode


@pytest.mark.parametrize(
    ("cli_rc", "writes_report", "wrapper_rc"),
    [
        (0, True, 0),  # healthy
        (1, True, 0),  # findings: gpufleet drained the node itself, through its breaker
        (1, False, 1),  # Python died before gpufleet's main: nothing was checked
        (3, False, 3),  # gpufleet crashed (cli.EXIT_CRASH)
        (2, False, 2),  # usage error (e.g. an expect.yml key this CLI does not know)
    ],
)
def test_only_a_real_check_ends_as_success(
    wrapper: Path, cli_rc: int, writes_report: bool, wrapper_rc: int
) -> None:
    report = wrapper.parents[1] / "reports" / "node-check-n1.json"
    report.write_text("{}")  # a previous run's report must not count for this one
    assert _run(wrapper, cli_rc, writes_report) == wrapper_rc


SLURM_CONF = "ClusterName=lab\n{line}\nNodeName=n1 CPUs=2\n"


def _install(root: Path, conf_line: str, cli_rc: int, name: str,
             monkeypatch: pytest.MonkeyPatch, **extra: object) -> tuple[int, str, str]:
    """The role with slurm.conf management and the trial run on: (rc, output, slurm.conf)."""
    cli = root / "gpufleet"
    cli.write_text(STAND_IN)
    cli.chmod(0o755)
    conf = root / "slurm.conf"
    conf.write_text(SLURM_CONF.format(line=conf_line))
    inventory = root / "inventory.json"
    inventory.write_text(json.dumps({"all": {"hosts": {"n1": {
        "ansible_connection": "local", "render_root": str(root)}}}}))
    monkeypatch.setenv("STANDIN_RC", str(cli_rc))
    monkeypatch.setenv("STANDIN_WRITE", "0")
    res = run_playbook(REPO / "tests/ansible/playbooks/render_healthcheck.yml", inventory, root,
                       name, extra_vars={"gpufleet_healthcheck_command": str(cli),
                                         "gpufleet_healthcheck_slurm_conf": str(conf),
                                         "gpufleet_healthcheck_slurm_conf_manage": True,
                                         "gpufleet_healthcheck_trial_run": True, **extra})
    return res.rc, res.flat, conf.read_text()


def test_a_health_check_that_does_not_run_is_not_put_into_slurm_conf(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rc, out, conf = _install(tmp_path, "", 2, "trial-fails", monkeypatch)
    assert rc != 0 and "node-check --expect" in out and "exited 2" in out, out[-3000:]
    assert conf == SLURM_CONF.format(line="")


def test_findings_in_the_trial_run_are_fine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rc, out, conf = _install(tmp_path, "", 1, "trial-findings", monkeypatch)
    assert rc == 0, out[-3000:]
    assert f"HealthCheckProgram={tmp_path}/libexec/gpufleet-healthcheck\n" in conf


def test_another_health_check_program_is_not_replaced_silently(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rc, out, conf = _install(tmp_path, "HealthCheckProgram=/usr/sbin/nhc", 0, "nhc", monkeypatch)
    assert rc != 0, out[-3000:]
    assert "already sets HealthCheckProgram=/usr/sbin/nhc" in out, out[-3000:]
    assert conf == SLURM_CONF.format(line="HealthCheckProgram=/usr/sbin/nhc")


def test_replacing_is_explicit_and_matches_the_key_in_any_case(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rc, out, conf = _install(tmp_path, "healthcheckprogram=/usr/sbin/nhc", 0, "nhc-replace",
                             monkeypatch, gpufleet_healthcheck_replace_existing=True)
    assert rc == 0, out[-3000:]
    assert "nhc" not in conf and conf.lower().count("healthcheckprogram") == 1, conf


def _saved_run(at: str, events: list[dict[str, object]]) -> dict[str, object]:
    """A whole saved node report (the store reads only valid ones): the golden one, reshaped."""
    doc = json.loads((REPO / "tests/fixtures/report/golden.json").read_text())
    host = dict(next(iter(doc["hosts"].values())), name="n1", status="ok", smoke=None)
    host["facts"] = dict(host["facts"], xid_events=events)
    return dict(doc, generated_at=at, hosts={"n1": host}, findings=[])


def test_the_wrapper_runs_node_check_over_the_node_local_history(tmp_path: Path) -> None:
    """The rendered wrapper with the real CLI on a simulated node (profile xid74-spread: Xid 74
    once each on links 2, 5, 11 of GPU 1): it passes --history with the role's store, so two Xid
    74 on link 5 saved an hour ago make link 5 the hardware (GF433) where this run alone says
    "spread" (GF434); a run older than keep_days is dropped; no slurm here, so GF905 too."""
    import datetime as dt  # noqa: PLC0415

    from gpufleet.history.store import RunStore  # noqa: PLC0415

    # The simulated profiles, built (cached) from their overlays as the fleet builds them.
    built = subprocess.run([sys.executable, str(REPO / "tests/fleet/profiles/build_profiles.py")],
                           capture_output=True, text=True, check=True)
    prof = Path(built.stdout.strip()) / "xid74-spread"
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"all": {"hosts": {"n1": {
        "ansible_connection": "local", "render_root": str(tmp_path),
        "gpufleet_healthcheck_command": str(Path(sys.executable).parent / "gpufleet"),
        "gpufleet_healthcheck_path": f"{prof / 'bin'}:{os.environ['PATH']}"}}}}))
    res = run_playbook(REPO / "tests/ansible/playbooks/render_healthcheck.yml", inventory,
                       tmp_path, "render-history")
    assert res.rc == 0, res.tail()
    wrapper = (tmp_path / "libexec" / "gpufleet-healthcheck").read_text()
    assert f"--history {tmp_path}/history" in wrapper and "--history-keep-days 8" in wrapper
    assert f"--counters {tmp_path}/counters/counters.json" in wrapper

    now = dt.datetime.now(dt.timezone.utc)
    stamp = lambda h: (now - dt.timedelta(hours=h)).strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: E731
    line = ("pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link 5(0x10, "
            "0x0, 0x0, 0x0, 0x0, 0x0, 0x0)")
    store = RunStore(tmp_path / "history")
    store.save(_saved_run(stamp(24 * 10), []))  # older than keep_days
    store.save(_saved_run(stamp(1), [
        {"xid": 74, "timestamp": f"[ {s}.000000]", "bus_id": "00000000:00:07.0",
         "message": line, "this_boot": True} for s in (5001, 5002)]))
    env = {**os.environ, "SLURMD_NODENAME": "n1",
           "GPUFLEET_PROC_DRIVER_NVIDIA": str(prof / "proc_driver_nvidia")}
    proc = subprocess.run([str(tmp_path / "libexec" / "gpufleet-healthcheck")], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]  # findings, reported: success for Slurm
    report = json.loads((tmp_path / "reports" / "node-check-n1.json").read_text())
    rules = {f["rule"]: f for f in report["findings"]}
    assert "GF433" in rules and "GF434" not in rules, sorted(rules)
    assert rules["GF433"]["evidence"]["nvlink"] == 5 and rules["GF433"]["evidence"]["count"] == 3
    kept = [e["generated_at"] for e in RunStore(tmp_path / "history").entries()]
    assert kept == [stamp(1), report["generated_at"]]
    # The node's counter history got this run's sample (the role made its directory).
    counters = json.loads((tmp_path / "counters" / "counters.json").read_text())
    assert counters, counters
