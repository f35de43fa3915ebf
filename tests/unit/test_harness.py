"""tests/harness: the shared lab lifecycle stops what it started by PID, sessions included."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from harness.plays import RECAP
from harness.processes import descendants, owner_alive, stop_trees


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


def test_stop_trees_kills_a_daemon_and_the_session_that_ignores_sigterm() -> None:
    # Both ignore SIGTERM (an ignored signal stays ignored across exec): only SIGKILL by PID
    # after the grace period ends them.
    proc = subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 300 & wait"],
                            start_new_session=True)
    deadline = time.monotonic() + 10
    while not (below := descendants(proc.pid)) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert below, "the session did not start"
    started = time.monotonic()
    stop_trees([proc], 0.5)
    assert proc.returncode is not None and time.monotonic() - started < 60  # sleep 300
    assert all(_gone(pid) for pid in below), below


def test_owner_alive_reads_the_reservation_pid(tmp_path: Path) -> None:
    mark = tmp_path / "127.0.0.2"
    mark.write_text(str(os.getpid()))
    assert owner_alive(mark)
    mark.write_text("999999999")
    assert not owner_alive(mark)
    mark.write_text("garbage")
    assert not owner_alive(mark)


def test_recap_line_parses() -> None:
    line = ("deb12                      : ok=41   changed=3    unreachable=0    failed=0    "
            "skipped=7    rescued=0    ignored=1   ")
    [m] = RECAP.finditer(line)
    assert (m["host"], m["ok"], m["changed"], m["ignored"]) == ("deb12", "41", "3", "1")
