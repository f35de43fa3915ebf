"""The CLI end to end on this machine (local transport) and on bad input."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpufleet.cli import build_parser, main

REPO = Path(__file__).resolve().parents[2]
NO_GPU = shutil.which("nvidia-smi") is None


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpufleet", *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


def test_facts_without_inventory_reports_this_machine() -> None:
    r = cli("facts")
    assert r.returncode == 0, r.stderr
    assert "localhost" in r.stdout and "ok" in r.stdout
    if NO_GPU:
        assert "localhost: no NVIDIA GPU (nvidia-smi: not found)" in r.stderr
        assert "nvidia-smi: not found" in r.stdout  # under "problems"


def test_facts_json_follows_the_report_contract(tmp_path: Path) -> None:
    r = cli("facts", "--format", "json", "-o", str(tmp_path / "r.json"),
            "--save-raw", str(tmp_path / "raw"))
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""  # -o: the report went to the file
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["schema"] == "gpufleet.report/v1" and doc["findings"] == []
    host = doc["hosts"]["localhost"]
    assert host["status"] == "ok" and host["error"] is None and host["smoke"] is None
    assert host["facts"]["os"]["kernel"]
    assert doc["summary"]["hosts"] == 1
    assert (tmp_path / "raw" / "localhost.txt").stat().st_size > 0
    schema = REPO / "agent" / "gpufleet" / "schema" / "report-v1.json"
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(doc, json.loads(schema.read_text()))
    if NO_GPU:
        assert host["facts"]["gpus"] == []
        assert host["facts"]["errors"]["nvidia_smi"] == "nvidia-smi: not found"


@pytest.mark.skipif(not NO_GPU, reason="the no-GPU verdict needs a machine without nvidia-smi")
def test_check_on_a_machine_without_gpus_says_so_and_exits_0() -> None:
    r = cli("check", "--format", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    host = json.loads(r.stdout)["hosts"]["localhost"]
    assert host["facts"]["errors"]["nvidia_smi"] == "nvidia-smi: not found"
    assert host["smoke"]["status"] == "skipped"
    assert "no NVIDIA GPU (nvidia-smi: not found)" in host["smoke"]["error"]
    assert "localhost: no NVIDIA GPU (nvidia-smi: not found)" in r.stderr


def test_bad_inventory_exits_2_with_ansibles_message(tmp_path: Path) -> None:
    bad = tmp_path / "bad.ini"
    bad.write_text("[gpu\nhost1\n")
    r = cli("facts", "-i", str(bad))
    assert r.returncode == 2
    assert r.stdout == ""
    assert "Failed to parse inventory with 'ini' plugin" in r.stderr
    assert f"Unable to parse {bad} as an inventory source" in r.stderr


def test_limit_without_match_exits_2(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.ini"
    inv.write_text("[gpu]\nn1\n")
    r = cli("check", "-i", str(inv), "-l", "gpu9*")
    assert r.returncode == 2
    assert "-l 'gpu9*' matches no host or group" in r.stderr, r.stderr
    assert "did you mean gpu?" in r.stderr, r.stderr


def test_unreachable_host_is_reported_and_exits_1(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.ini"
    inv.write_text("[gpu]\nghost ansible_host=no-such-host.invalid\n"
                   "here ansible_connection=local\n")
    r = cli("facts", "-i", str(inv), "--format", "json", "--connect-timeout", "3")
    assert r.returncode == 1
    hosts = json.loads(r.stdout)["hosts"]
    assert hosts["ghost"]["status"] == "unreachable"
    assert "does not resolve" in hosts["ghost"]["error"]
    assert hosts["ghost"]["facts"] is None
    assert hosts["here"]["status"] == "ok"


def test_diff_of_two_reports_and_of_garbage(tmp_path: Path) -> None:
    r = cli("facts", "--format", "json", "-o", str(tmp_path / "a.json"))
    assert r.returncode == 0, r.stderr
    same = cli("diff", str(tmp_path / "a.json"), str(tmp_path / "a.json"))
    assert same.returncode == 0, same.stderr
    (tmp_path / "junk.json").write_text("{not json")
    bad = cli("diff", str(tmp_path / "a.json"), str(tmp_path / "junk.json"))
    assert bad.returncode == 2 and "is not a gpufleet JSON report" in bad.stderr


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["facts", "--forks", "0"], ["check", "--format", "yaml"], ["nope"], []):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2, argv
    capsys.readouterr()


def test_parser_knows_every_documented_option() -> None:
    parser = build_parser()
    args = parser.parse_args(["check", "-i", "a", "-i", "b", "-l", "gpu", "--level", "full",
                              "--multinode", "--force", "--format", "junit", "-o", "x",
                              "--save", "d", "--fail-on", "warning", "-f", "4"])
    assert args.inventory == ["a", "b"] and args.level == "full" and args.forks == 4
    assert args.multinode and args.force and args.fail_on == "warning"
    smoke = parser.parse_args(["smoke", "--level", "quick", "--format", "markdown"])
    assert smoke.level == "quick"
    with pytest.raises(SystemExit):
        parser.parse_args(["smoke", "--level", "facts"])
    docs = (REPO / "docs" / "cli.md").read_text()
    for action in parser._subparsers._group_actions[0].choices["check"]._actions:  # type: ignore[union-attr]
        for option in action.option_strings:
            if option in ("-h", "--help"):
                continue
            assert option in docs, f"{option} is not documented in docs/cli.md"


def test_ctrl_c_exits_130_and_kills_what_runs_on_the_host(tmp_path: Path) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\nexec sleep 341.5\n")
    (fake / "nvidia-smi").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"}
    proc = subprocess.Popen([sys.executable, "-m", "gpufleet", "facts"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while subprocess.run(["pgrep", "-f", "sleep 341.5"], capture_output=True).returncode:
            assert time.monotonic() < deadline, "the probe never reached nvidia-smi"
            time.sleep(0.1)
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=15)
        assert proc.returncode == 130 and "interrupted" in err
        # Interrupted, not waited out: the stand-in sleeps 341 s (generous for a loaded machine).
        assert time.monotonic() - started < 60
        assert subprocess.run(["pgrep", "-f", "sleep 341.5"], capture_output=True).returncode
    finally:
        if proc.poll() is None:
            proc.kill()
