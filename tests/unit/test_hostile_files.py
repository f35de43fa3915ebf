"""Hostile files (issue 22): one regression test per item of slice S that needs no daemon.

Saved reports, run stores (a real directory with planted links), `ansible -t` trees and
ansible-runner job events: the real captures under tests/fixtures/ansible-2026-12-01 and
tests/fixtures/report, mutated. Items refer to the issue's numbering (F3 … F22).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from clirun import Ran
from test_rules_builders import NOW, fleet

from gpufleet.cli import main
from gpufleet.cli.saved import with_history
from gpufleet.engines.ansible import expectations, load_ansible_results
from gpufleet.history import RunStore
from gpufleet.model import HostSpec, SmokeCheck
from gpufleet.report import document, render_doc
from gpufleet.rules import evaluate
from gpufleet.smoke import verdict
from gpufleet.smoke.hostrun import HostRun
from gpufleet.transport.local import LocalTransport

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
ANSIBLE = FIXTURES / "ansible-2026-12-01"
LIVE = FIXTURES / "report" / "live-h200x2-2026-11-30.json"
OSC52 = "\x1b]52;c;ZXZpbCBjbGlwYm9hcmQ=\x07"
ERASE = "\x1b[2K\x1b[1A\x1b[2K"


def _gpufleet_bytes(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "gpufleet", *args], capture_output=True,
                          timeout=60, check=False)


def _run_doc(stamp: str = "2026-11-29T12:00:00Z", **changes: Any) -> dict[str, Any]:
    r = dataclasses.replace(fleet(changes or None, with_expect=False), generated_at=stamp)
    return document(dataclasses.replace(r, findings=evaluate(r, now=NOW)))


def _no_traceback(r: Ran | subprocess.CompletedProcess[bytes]) -> None:
    err = r.stderr if isinstance(r.stderr, str) else r.stderr.decode()
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err


# --------------------------------------------------------------------------- F3


def test_f3_inf_and_nan_strings_from_a_host_are_missing_numbers_and_save_works(
        tmp_path: Path) -> None:
    spec = HostSpec(name="gpu01", address="localhost", connection="local")
    h = HostRun(spec, LocalTransport(spec), None, "gfsmoke-x", run_dir="/tmp/x", nproc=1)
    h.files = {"result.json": json.dumps({
        "status": "pass", "backend": "nccl", "world_size": 1,
        "ranks": [{"rank": 0, "host": "gpu01", "local_rank": 0, "torch_device_count": 1}],
        "checks": [], "busbw_gbps": {"1048576": 60.5, "4294967296": "inf"},
        "matmul_tflops": {"0": "nan"}, "timings_s": {"total": "Infinity"}})}
    res = verdict.result(h, [h], "quick", 1.0)
    assert res.busbw_gbps == {1 << 20: 60.5} and res.matmul_tflops == {}
    report = fleet({"gpu01": {"smoke": res}}, hosts=("gpu01",), with_expect=False)
    _, doc = with_history(report, tmp_path / "runs")  # ef054d5: TypeError float(None)
    assert RunStore(tmp_path / "runs").save(doc).exists()


def test_f3_a_null_saved_in_a_store_does_not_break_every_later_save(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs")
    old = _run_doc()
    old["hosts"]["gpu01"]["smoke"]["busbw_gbps"]["4294967296"] = None  # as ef054d5 saved inf
    (store.root).mkdir()
    (store.root / "gpufleet-2026-11-29T120000Z.json").write_text(json.dumps(old))
    report = fleet(with_expect=False)
    _, doc = with_history(report, store.root)
    assert store.save(doc).exists()
    _, doc = with_history(report, store.root)  # and the one after
    assert doc["history"]["runs"] == [{"run": store.entries()[-1]["file"],
                                       "generated_at": doc["generated_at"] or ""}]


# --------------------------------------------------------------------------- F4 F14 F22


def test_f4_ansible_tree_keeps_each_hosts_expectations(cli: Callable[..., Ran]) -> None:
    assert expectations(ANSIBLE / "tree")["gpu-drift"]["nvidia_driver_version"] == "580.159.04"
    r = cli("ansible-report", str(ANSIBLE / "tree"), "--format", "json")
    assert r.returncode == 1, r.stderr  # a drifted fleet is not healthy
    doc = json.loads(r.stdout)
    assert ("GF101", ["gpu-drift"]) in [(f["rule"], f["hosts"]) for f in doc["findings"]]
    assert doc["hosts"]["gpu-down"]["status"] == "unreachable"


def _events(tmp_path: Path) -> Path:
    events = tmp_path / "job_events"
    shutil.copytree(ANSIBLE / "job_events", events)
    return events


def _event(events: Path, counter: int, kind: str, host: str, action: str,
           res: dict[str, Any]) -> None:
    (events / f"{counter}-forged-{host}.json").write_text(json.dumps({
        "event": kind, "counter": counter,
        "event_data": {"host": host, "task_action": action, "res": res}}))


def test_f14_job_events_are_taken_in_the_runs_order_not_by_file_name(tmp_path: Path) -> None:
    events = _events(tmp_path)
    # The real run is 15 events; a later gpu_facts retry (counter 16) found gpu-ok unreachable.
    _event(events, 16, "runner_on_unreachable", "gpu-ok", "gpufleet.gpu.gpu_facts",
           {"unreachable": True, "msg": "ssh: connect to host 127.0.0.2 port 22: refused"})
    results = load_ansible_results(events)
    assert results["gpu-ok"].status == "unreachable"  # ef054d5: "ok" (8- sorts after 16-)
    assert results["gpu-drift"].status == "ok" and results["gpu-down"].status == "unreachable"


def test_f22_a_later_tasks_result_cannot_erase_expectations(tmp_path: Path,
                                                            cli: Callable[..., Ran]) -> None:
    events = _events(tmp_path)
    r = cli("ansible-report", str(events), "--format", "json")
    assert r.returncode == 1 and "GF101" in r.stdout
    forged = {"changed": False, "gpufleet_expect": {},
              "ansible_facts": {"gpufleet": json.loads((ANSIBLE / "tree" / "gpu-ok").read_text())
                                ["ansible_facts"]["gpufleet"]}}
    # 99: last by counter and by file name alike, so only the task's action can tell
    _event(events, 99, "runner_on_ok", "gpu-drift", "ansible.builtin.command", forged)
    assert expectations(events)["gpu-drift"]["nvidia_driver_version"] == "580.159.04"
    r = cli("ansible-report", str(events), "--format", "json")
    assert r.returncode == 1, "ef054d5: rc 0, the forged result judged with no expectations"
    doc = json.loads(r.stdout)
    assert ("GF101", ["gpu-drift"]) in [(f["rule"], f["hosts"]) for f in doc["findings"]]
    assert doc["hosts"]["gpu-drift"]["facts"]["driver"]["version"] == "570.172.08"


# --------------------------------------------------------------------------- F15


def _tree(tmp_path: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    tree = tmp_path / "tree"
    shutil.copytree(ANSIBLE / "tree", tree)
    res = json.loads((tree / "gpu-ok").read_text())
    edit(res["ansible_facts"]["gpufleet"])
    (tree / "gpu-ok").write_text(json.dumps(res))
    return tree


@pytest.mark.parametrize(("edit", "why"), [
    (lambda f: f["driver"].update(version=580.159), "expected str, got float"),
    (lambda f: f["gpus"][0].update(name=["NVIDIA", "H200"]), "expected str, got list"),
    (lambda f: f["gpus"][0].update(index=True), "expected int, got bool"),
])
def test_f15_mistyped_scalars_are_that_hosts_error(tmp_path: Path, cli: Callable[..., Ran],
                                                   edit: Callable[[dict[str, Any]], None],
                                                   why: str) -> None:
    r = cli("ansible-report", str(_tree(tmp_path, edit)), "--format", "json")
    doc = json.loads(r.stdout)  # ef054d5: TypeError traceback, exit 1, no report
    assert doc["hosts"]["gpu-ok"]["status"] == "error"
    assert why in doc["hosts"]["gpu-ok"]["error"]
    assert doc["hosts"]["gpu-drift"]["status"] == "ok", "one bad host hides no other"


def test_f15_deep_nesting_is_a_sentence_not_a_recursion_error(tmp_path: Path,
                                                              cli: Callable[..., Ran]) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    tree = tmp_path / "tree"
    shutil.copytree(ANSIBLE / "tree", tree)
    (tree / "gpu-ok").write_text(deep)  # a tree file is one host's: that host's error
    r = cli("ansible-report", str(tree), "--format", "json")
    doc = json.loads(r.stdout)
    assert doc["hosts"]["gpu-ok"]["status"] == "error"
    assert f"{tree / 'gpu-ok'} is not Ansible results JSON: nested deeper than 64 levels" \
        in doc["hosts"]["gpu-ok"]["error"]
    assert doc["hosts"]["gpu-drift"]["status"] == "ok"
    (tree / "gpu-ok").write_text("[1, 2]")
    doc = json.loads(cli("ansible-report", str(tree), "--format", "json").stdout)
    assert "result unreadable: list where an object is expected" in \
        doc["hosts"]["gpu-ok"]["error"]
    events = _events(tmp_path)  # an event file names no host: the run is refused
    (events / "8-36e7dfcb-8373-488f-96a3-91f09dfb82ef.json").write_text(deep)
    r = cli("ansible-report", str(events))
    assert r.returncode == 2 and "8-36e7dfcb-8373-488f-96a3-91f09dfb82ef.json is not Ansible " \
        "results JSON: nested deeper than 64 levels" in r.stderr
    _no_traceback(r)


# --------------------------------------------------------------------------- F5 F21


def _plant(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)


def test_f5_store_never_writes_through_planted_temp_links(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    root = tmp_path / "runs"
    doc = _run_doc()
    _plant(root / ".index.json.tmp", victim)
    _plant(root / ".gpufleet-2026-11-29T120000Z.json.tmp", victim)
    path = RunStore(root).save(doc)
    assert victim.read_text() == "precious\n"  # ef054d5: the index, written through the link
    assert not (root / "index.json").is_symlink() and not path.is_symlink()
    assert [e["file"] for e in RunStore(root).entries()] == [path.name]


def test_f5_a_planted_lock_link_is_refused_not_created(tmp_path: Path,
                                                       cli: Callable[..., Ran]) -> None:
    root = tmp_path / "runs"
    target = tmp_path / "elsewhere" / "created-by-gpufleet"
    target.parent.mkdir()
    _plant(root / ".lock", target)
    run = tmp_path / "run.json"
    run.write_text(json.dumps(_run_doc()))
    r = cli("report", str(run), "--store", str(root))  # reads only: no lock taken
    assert r.returncode == 0, r.stderr
    with pytest.raises(Exception, match=r"\.lock: a symbolic link"):
        RunStore(root).save(_run_doc())
    assert not target.exists()  # ef054d5: O_CREAT through the link made it


def test_f5_a_dangling_link_at_the_run_name_is_not_written_through(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    victim = tmp_path / "victim-to-be"
    _plant(root / "gpufleet-2026-11-29T120000Z.json", victim)
    path = RunStore(root).save(_run_doc())
    assert not victim.exists() and path.name == "gpufleet-2026-11-29T120000Z-1.json"


def test_f21_index_entries_outside_the_store_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    store = RunStore(root)
    mine = store.save(_run_doc())
    outside = tmp_path / "someone-elses-report.json"
    outside.write_text(json.dumps(_run_doc("2026-11-30T00:00:00Z")))
    _plant(root / "gpufleet-linked.json", outside)
    index = json.loads((root / "index.json").read_text())
    entry = index["runs"][0]
    index["runs"] += [{**entry, "file": str(outside)}, {**entry, "file": "../x/gpufleet-a.json"},
                      {**entry, "file": "gpufleet-linked.json"}]
    (root / "index.json").write_text(json.dumps(index))
    assert [e["file"] for e in RunStore(root).entries()] == [mine.name]
    del index["runs"][0]["file"]  # ef054d5: KeyError
    (root / "index.json").write_text(json.dumps(index))
    store = RunStore(root)
    assert [e["file"] for e in store.entries()] == [mine.name]  # rebuilt from the run files
    assert any("index.json is not a gpufleet run store index: runs.0: lacks 'file'" in n
               for n in store.notes), store.notes
    assert any("gpufleet-linked.json is a symbolic link" in n for n in store.notes)


# --------------------------------------------------------------------------- F6


def test_f6_history_prints_saved_strings_inert(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    store = RunStore(root)
    store.save(_run_doc())
    evil = _run_doc("2026-11-30T12:00:00Z")
    evil["hosts"]["gpu01"]["facts"]["driver"]["version"] = "580.172.01" + OSC52 + ERASE
    evil["hosts"]["gpu01"]["facts"]["driver"]["cuda_version"] = "13.0\u202e\x9b31m"
    evil["hosts"]["gpu01"]["error"] = "HF_TOKEN=hf_abcdefghijklmnopqrstuvwx"
    store.save(evil)
    for fmt in ("table", "json"):
        r = _gpufleet_bytes("history", "--store", str(root), "--format", fmt, "gpu01")
        assert r.returncode in (0, 1), r.stderr
        assert b"driver: 580.159.04 -> 580.172.01" in r.stdout, r.stdout
        for raw in (b"\x1b", b"\x07", "\u202e".encode(), "\x9b".encode()):
            assert raw not in r.stdout, (fmt, raw)  # ef054d5: ESC ] 52 on stdout


# --------------------------------------------------------------------------- F7


def _huge_expectation_report() -> Any:
    big = 10**400
    check = SmokeCheck(name="busbw", passed=True, detail="",
                       data={"expectation": {"expected_gbps": big}})
    curve = SmokeCheck(name="busbw", passed=True, detail="",
                       data={"expectation": {"expected_gbps": {"1048576": big},
                                             "floor_gbps": big}})
    return fleet({"gpu01": {"smoke": {"checks": (check,)}},
                  "gpu02": {"smoke": {"checks": (curve,)}}}, with_expect=False)


def test_f7_a_huge_integer_from_a_host_renders_in_every_format() -> None:
    doc = document(_huge_expectation_report())
    for fmt in ("html", "html-static", "table", "json", "markdown", "junit", "prometheus"):
        assert render_doc(doc, fmt)  # ef054d5 html: OverflowError


def test_f7_check_save_keeps_the_run_when_rendering_fails(
        tmp_path: Path, cli: Callable[..., Ran], monkeypatch: pytest.MonkeyPatch) -> None:
    from gpufleet.cli import output  # noqa: PLC0415

    def broken(*_: Any, **__: Any) -> None:
        raise RuntimeError("a renderer bug")
    monkeypatch.setattr(output.Output, "render", broken)
    with pytest.raises(SystemExit) as info:  # a crash is exit 3 (EXIT_CRASH), never a pass
        main(["check", "--level", "facts", "--save", str(tmp_path / "runs")])
    assert info.value.code == 3
    assert len(RunStore(tmp_path / "runs").entries()) == 1  # ef054d5: saved after render


# --------------------------------------------------------------------------- F13 (the
# callback under a real ansible-playbook run: tests/unit/test_hostile_callback.py)


# --------------------------------------------------------------------------- F17


def _saved(tmp_path: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    doc = json.loads(LIVE.read_text())
    edit(doc)
    path = tmp_path / "run.json"
    path.write_text(json.dumps(doc).replace('"@DEEP@"', "[" * 100_000 + "]" * 100_000))
    return path


def _first_host(doc: dict[str, Any]) -> dict[str, Any]:
    host: dict[str, Any] = next(iter(doc["hosts"].values()))
    return host


@pytest.mark.parametrize(("edit", "field"), [
    (lambda d: _first_host(d)["smoke"].update(busbw_gbps="fast"), "smoke.busbw_gbps: a string"),
    (lambda d: _first_host(d)["smoke"]["checks"].__setitem__(0, 7), "smoke.checks.0: an integer"),
    (lambda d: _first_host(d)["smoke"]["checks"][0].update(
        data={"expectation": {"expected_gbps": 10**400}}), "an integer of 401 digits"),
    (lambda d: d["findings"][0].update(evidence=["x"]), "findings.0.evidence: a list"),
    (lambda d: d.update(summary="@DEEP@"), "nested deeper than 64 levels"),
])
def test_f17_hostile_saved_reports_are_one_sentence_naming_the_field(
        tmp_path: Path, edit: Callable[[dict[str, Any]], None], field: str) -> None:
    path = _saved(tmp_path, edit)
    for fmt in ("table", "html"):
        r = _gpufleet_bytes("report", str(path), "--format", fmt)
        err = r.stderr.decode()
        assert r.returncode == 2 and f"{path} is not a gpufleet JSON report: " in err, err
        assert field in err, err
        _no_traceback(r)  # ef054d5: AttributeError / OverflowError / RecursionError, exit 1


def test_f17_the_real_report_still_renders(tmp_path: Path, cli: Callable[..., Ran]) -> None:
    r = cli("report", str(LIVE), "--format", "table")
    assert r.returncode == 0 and "HEALTHY" in r.stdout


def test_validation_names_escaped_keys_inertly(tmp_path: Path) -> None:
    path = _saved(tmp_path, lambda d: d["hosts"].update({"evil" + OSC52: {"status": "ok"}}))
    r = _gpufleet_bytes("report", str(path))
    assert r.returncode == 2 and b"\x1b" not in r.stderr and b"hosts.evil" in r.stderr


def test_write_atomic_keeps_the_umask_mode(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs")
    path = store.save(_run_doc())
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask


def test_output_to_a_fifo_is_written_into_it_never_renamed_over(tmp_path: Path) -> None:
    """`-o /dev/null` (or /dev/stdout, a FIFO) is written to, not replaced: as root, a rename
    over /dev/null leaves a plain file there for every program on the machine. A FIFO stands in
    for the device here (same rule, nothing of the machine's at stake)."""
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    r = _gpufleet_bytes("report", str(LIVE), "--format", "json", "-o", str(fifo))
    reader.join(timeout=30)
    assert r.returncode == 0, r.stderr
    assert stat.S_ISFIFO(fifo.stat().st_mode), "the FIFO was replaced by a file"
    assert got and json.loads(got[0])["schema"] == "gpufleet.report/v1"
    assert list(tmp_path.iterdir()) == [fifo]  # no temp file left beside it
