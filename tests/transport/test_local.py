"""The local transport keeps the SSH transport's contract: process groups, timeouts, put."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from gpufleet.model import HostSpec
from gpufleet.transport import TransportError, connect, interrupt_all
from gpufleet.transport._remote import CANCEL, split_marker

HERE = HostSpec(name="localhost", address="localhost", connection="local")


def gone(pattern: str, within: float = 30.0) -> bool:  # polled: generous for a loaded machine
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if subprocess.run(["pgrep", "-f", pattern], capture_output=True).returncode != 0:
            return True
        time.sleep(0.1)
    return False


def test_streams_status_stdin_env() -> None:
    with connect(HERE) as t:
        r = t.run(["sh", "-c", 'echo out; echo err >&2; exit 4'], timeout=10)
        fed = t.run(["sh", "-c", 'cat; echo "$GF_Y"'], timeout=10, stdin=b"in\n",
                    env={"GF_Y": "y y"})
    assert (r.rc, r.stdout, r.stderr, r.timed_out) == (4, "out\n", "err\n", False)
    assert fed.stdout == "in\ny y\n"


def test_missing_program_is_rc_127_not_an_exception() -> None:
    with connect(HERE) as t:
        r = t.run(["no-such-program-gpufleet"], timeout=5)
    assert r.rc == 127 and "not found" in r.stderr


def test_timeout_kills_the_process_group() -> None:
    with connect(HERE) as t:
        started = time.monotonic()
        r = t.run(["sh", "-c", "sleep 331.5 & sleep 331.6; echo never"], timeout=1)
    assert r.timed_out and r.rc is None and "never" not in r.stdout
    assert time.monotonic() - started < 60  # the sleeps last 331 s
    assert gone("sleep 331.[56]")


def test_timeout_reaches_tools_in_process_groups_of_their_own() -> None:
    with connect(HERE) as t:
        r = t.run(["sh", "-c", "timeout 300 sleep 331.7; echo never"], timeout=1)
    assert r.timed_out
    assert gone("sleep 331.7")


@pytest.mark.skipif(os.geteuid() != 0, reason="root only: otherwise sudo would need a password")
def test_become_as_root_needs_no_sudo() -> None:
    with connect(HostSpec(name="l", address="l", connection="local", become=True)) as t:
        assert t.run(["id", "-u"], timeout=5).stdout == "0\n"


def test_put_writes_with_mode(tmp_path: Path) -> None:
    with connect(HERE) as t:
        t.put(b"data", str(tmp_path / "f"), 0o600)
        with pytest.raises(TransportError, match="cannot write"):
            t.put(b"x", str(tmp_path / "missing" / "f"))
    assert (tmp_path / "f").read_bytes() == b"data"
    assert (tmp_path / "f").stat().st_mode & 0o777 == 0o600


def test_interrupt_kills_the_running_command() -> None:
    t = connect(HERE)
    outcome: list[object] = []

    def work() -> None:
        try:
            outcome.append(t.run(["sleep", "332.5"], timeout=60))
        except TransportError as exc:
            outcome.append(exc)

    worker = threading.Thread(target=work, daemon=True)
    try:
        worker.start()
        deadline = time.monotonic() + 60  # polled: until the command runs, however loaded
        while subprocess.run(["pgrep", "-f", "sleep 332.5"], capture_output=True).returncode:
            assert time.monotonic() < deadline, "the command never started"
            time.sleep(0.05)
        interrupt_all()
        worker.join(30)
        assert isinstance(outcome[0], TransportError)
        assert gone("sleep 332.5")
    finally:
        CANCEL.clear()


@pytest.mark.parametrize(
    ("stderr", "group", "rest"),
    [
        (b"gpufleet-pgid=41 40\nboom\n", (41, 40), b"boom\n"),
        (b"gpufleet-pgid=41\n", (41, None), b""),
        (b"sudo: unable to resolve host x\ngpufleet-pgid=7 6\nerr\n", (7, 6),
         b"sudo: unable to resolve host x\nerr\n"),
        (b"gpufleet-pgid=41 4", None, b"gpufleet-pgid=41 4"),  # line not complete yet
        (b"sudo: a password is required\n", None, b"sudo: a password is required\n"),
    ],
)
def test_wrapper_line_is_found_and_removed(stderr: bytes, group: object, rest: bytes) -> None:
    assert split_marker(stderr) == (group, rest)
