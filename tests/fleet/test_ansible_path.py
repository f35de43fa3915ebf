"""The Ansible/AWX path against real sshd hosts: gpufleet.gpu.gpu_facts returns the facts
`gpufleet facts` returns for the same host, and a playbook run becomes the same report.

Real ansible (ssh connection, the fleet's key and known_hosts, strict host key checking), the
collection resolved from this checkout (ansible.cfg's collections_path).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from fleetlib import Fleet, make_fleet

from paths import COLLECTION

pytestmark = [pytest.mark.fleet, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
HOSTS = [("gpu-ok", "h200x2"), ("gpu-ecc", "ecc-remap"), ("gpu-drift", "driver-drift"),
         ("gpu-down", "h200x2")]
VOLATILE = ("collected_at", "probe_duration_s", "tmpdir")  # when, how long, free bytes: differ


@pytest.fixture(scope="module")
def afleet(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with make_fleet(tmp_path_factory.mktemp("ansible-path"), HOSTS) as f:
        f.stop("gpu-down")
        f.env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
        yield f


def _ansible(fleet: Fleet, *argv: str, env: dict[str, str] | None = None,
             ) -> subprocess.CompletedProcess[str]:
    bin_dir = Path(fleet.env["PATH"].split(":")[0])
    return subprocess.run([str(bin_dir / argv[0]), *argv[1:]], cwd=REPO,
                          env={**fleet.env, **(env or {})}, capture_output=True, text=True,
                          timeout=180, check=False)


def _stable(facts: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in facts.items() if k not in VOLATILE}


@pytest.fixture(scope="module")
def tree(afleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`ansible gpu -m gpufleet.gpu.gpu_facts -t DIR`: one result file per host."""
    out = tmp_path_factory.mktemp("tree")
    adhoc = _ansible(afleet, "ansible", "-i", str(afleet.inventory), "gpu", "-m",
                     "gpufleet.gpu.gpu_facts", "-t", str(out))
    assert adhoc.returncode == 4, adhoc.stdout[-3000:] + adhoc.stderr[-3000:]  # 4: unreachable
    return out


def test_module_facts_equal_gpufleet_facts(afleet: Fleet, tree: Path) -> None:
    direct = afleet.run_cli("facts", "-i", str(afleet.inventory), "--format", "json")
    report = json.loads(direct.stdout)
    for name in ("gpu-ok", "gpu-ecc", "gpu-drift"):
        via_ansible = json.loads((tree / name).read_text())["ansible_facts"]["gpufleet"]
        via_gpufleet = report["hosts"][name]["facts"]
        assert via_ansible["gpus"], name  # really collected, not two empty documents
        assert _stable(via_ansible) == _stable(via_gpufleet), name
    assert json.loads((tree / "gpu-down").read_text())["unreachable"] is True


def test_playbook_run_renders_the_same_findings_as_check(afleet: Fleet, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    play = _ansible(afleet, "ansible-playbook", "-i", str(afleet.inventory), "-f", "8",
                    str(COLLECTION / "playbooks/verify_fanout.yml"),
                    "-e", '{"gpufleet_report_args": ["--format", "json"]}',
                    env={"ANSIBLE_CALLBACKS_ENABLED": "gpufleet.gpu.gpufleet_report",
                         "GPUFLEET_REPORT": str(out)})
    # Findings fail the play (the assert task), after the report was shown.
    assert play.returncode == 2, play.stdout[-4000:] + play.stderr[-2000:]
    assert "gpufleet ansible-report exited 1" in play.stdout
    check = afleet.run_cli("check", "-i", str(afleet.inventory), "--level", "facts",
                           "--format", "json")
    want = {(f["rule"], tuple(f["hosts"])) for f in json.loads(check.stdout)["findings"]}
    from_callback = json.loads(out.read_text())
    got = {(f["rule"], tuple(f["hosts"])) for f in from_callback["findings"]}
    assert ("GF402", ("gpu-ecc",)) in got and ("GF101", ("gpu-drift",)) in got
    assert ("GF001", ("gpu-down",)) in got
    assert got == want
    assert from_callback["hosts"]["gpu-down"]["status"] == "unreachable"


def test_ansible_report_reads_runner_job_events(afleet: Fleet, tree: Path,
                                                tmp_path: Path) -> None:
    """AWX/ansible-runner keep results as job events; the same report comes out of them."""
    events = tmp_path / "job_events"
    events.mkdir()
    for i, name in enumerate(("gpu-ok", "gpu-ecc")):
        res = json.loads((tree / name).read_text())
        (events / f"{i + 1}-{name}.json").write_text(json.dumps({
            "event": "runner_on_ok", "counter": i + 1,
            "event_data": {"host": name, "task_action": "gpufleet.gpu.gpu_facts", "res": res}}))
    proc = subprocess.run([str(Path(afleet.env["PATH"].split(":")[0]) / "gpufleet"),
                           "ansible-report", str(events), "--format", "json"],
                          capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, **afleet.env})
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    # `gpufleet report --from-ansible` is the same reader under the report command
    again = subprocess.run([str(Path(afleet.env["PATH"].split(":")[0]) / "gpufleet"),
                            "report", "--from-ansible", str(events), "--format", "json"],
                           capture_output=True, text=True, timeout=60, check=False,
                           env={**os.environ, **afleet.env})
    assert again.returncode == 1, again.stderr
    same = json.loads(again.stdout)
    assert same["hosts"] == doc["hosts"] and same["findings"] == doc["findings"]
    assert sorted(doc["hosts"]) == ["gpu-ecc", "gpu-ok"]
    assert {f["rule"] for f in doc["findings"] if f["hosts"] == ["gpu-ecc"]} >= {"GF402"}
    assert not [f for f in doc["findings"] if f["hosts"] == ["gpu-ok"]
                and f["severity"] == "error"]
