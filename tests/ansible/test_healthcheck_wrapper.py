"""The Slurm health-check wrapper the gpufleet_healthcheck role renders, run for real (sh, flock)
against a stand-in CLI: findings (exit 1 with a report) end as 0, anything that did not check the
node does not (issue 22 F12: a Prolog must never let a job start on an unchecked node). And the
role's own guards before it edits slurm.conf (issue 23 M16, M17, L9): a trial run, and another
site's HealthCheckProgram is not replaced silently."""

from __future__ import annotations

import json
import os
import subprocess
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
    res = run_playbook(REPO / "tests/ansible/playbooks/render_healthcheck.yml", inventory, root,
                       "render-wrapper")
    assert res.rc == 0, res.tail()
    return root / "libexec" / "gpufleet-healthcheck"


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
