"""Issue 38.6 (review S07): a run store is a shared directory; a FIFO or a link planted in it is
refused with a sentence, never waited on or written through (reads and writes, every command
that uses the store). A real directory, real FIFOs (os.mkfifo) and links; the commands run as
subprocesses under a deadline, so a reader that blocks fails the test instead of hanging it."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.history import RunStore, StoreError

REPO = Path(__file__).resolve().parents[2]
# A real full report (tests/fixtures/report/README.md says where it was captured).
LIVE = REPO / "tests/fixtures/report/live-h200x2-2026-11-30.json"


def _gpufleet(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpufleet", *args], capture_output=True,
                          text=True, timeout=120, check=False)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    store = RunStore(tmp_path / "runs")
    store.save(json.loads(LIVE.read_text()))
    return store.root


def test_a_fifo_index_is_refused_and_the_runs_still_read(root: Path) -> None:
    (root / "index.json").unlink()
    os.mkfifo(root / "index.json")
    r = _gpufleet("history", "--store", str(root))
    assert r.returncode in (0, 1), r.stderr
    assert "index.json is a FIFO, not a gpufleet run store index: not read" in r.stderr, r.stderr
    r = _gpufleet("coverage", "--store", str(root))  # rebuilt from the run file, not waited on
    assert r.returncode in (0, 1) and "localhost" in r.stdout, (r.stdout, r.stderr)


def test_a_fifo_run_file_is_left_out_with_a_note(root: Path) -> None:
    os.mkfifo(root / "gpufleet-2026-12-02T000000Z.json")
    (root / "index.json").unlink()  # the scan opens every run file
    store = RunStore(root)
    assert len(store.entries()) == 1
    assert any("gpufleet-2026-12-02T000000Z.json is a FIFO, not a gpufleet JSON report"
               in n for n in store.notes), store.notes


def test_save_refuses_a_link_to_a_fifo_and_writes_nothing_through_it(root: Path,
                                                                     tmp_path: Path) -> None:
    fifo = tmp_path / "planters-fifo"
    os.mkfifo(fifo)
    (root / "index.json").unlink()
    (root / "index.json").symlink_to(fifo)
    r = _gpufleet("report", str(LIVE), "--format", "json", "--store", str(root))
    assert r.returncode in (0, 1), r.stderr  # reading past the link still works
    with pytest.raises(StoreError, match=r"index\.json: it is a symbolic link, not a regular "
                                         r"file .*not written"):
        RunStore(root).save(json.loads(LIVE.read_text()))
    assert (root / "index.json").is_symlink()  # left as found, for the operator to see
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        assert os.read(fd, 100) == b""  # nothing was written into the planter's FIFO
    finally:
        os.close(fd)


def test_a_fifo_lock_is_refused(root: Path) -> None:
    (root / ".lock").unlink()
    os.mkfifo(root / ".lock")
    with pytest.raises(StoreError, match=r"\.lock: a FIFO, not a regular file"):
        RunStore(root).save(json.loads(LIVE.read_text()))
    assert stat.S_ISFIFO((root / ".lock").lstat().st_mode)
