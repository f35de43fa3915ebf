"""`--save` is checked before anything is connected to, and a save that fails at the end still
renders the report (issue 37.4; reviews/newuser-2026-12-02.md, edge 7).

The inventory's one host is a real listening TCP socket of this test: a sweep that started
would connect to it, so "nothing accepted" proves the refusal came first.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from clirun import Ran, in_process


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(4)
    s.setblocking(False)
    yield s
    s.close()


@pytest.fixture
def gpufleet(capsys: pytest.CaptureFixture[str]) -> Callable[..., Ran]:
    return in_process(capsys)


def _inventory(tmp_path: Path, port: int) -> Path:
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"gpu01 ansible_host=127.0.0.1 ansible_port={port} ansible_user=root\n")
    return inv


def _connected(s: socket.socket) -> bool:
    try:
        s.accept()[0].close()
    except BlockingIOError:
        return False
    return True


@pytest.mark.parametrize(("save", "reason"), [
    ("afile", "cannot use it as a run store: {d}/afile is not a directory"),
    ("afile/runs", "cannot create the run store: {d}/afile is not a directory"),
])
def test_a_save_path_that_cannot_be_a_store_is_refused_before_connecting(
        tmp_path: Path, listener: socket.socket, gpufleet: Callable[..., Ran],
        save: str, reason: str) -> None:
    (tmp_path / "afile").write_text("a plain file\n")
    inv = _inventory(tmp_path, listener.getsockname()[1])
    r = gpufleet("check", "-i", str(inv), "--level", "facts", "--connect-timeout", "2",
                 "--save", str(tmp_path / save))
    assert r.returncode == 2, r.stderr
    assert reason.format(d=tmp_path) in r.stderr
    assert "File exists" not in r.stderr
    assert r.stdout == ""
    assert not _connected(listener), "the sweep connected before --save was checked"


def test_a_save_that_fails_at_the_end_still_renders_the_report(
        tmp_path: Path, gpufleet: Callable[..., Ran]) -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens: gpu01 is unreachable at once
    store = tmp_path / "runs"
    (store / ".lock").mkdir(parents=True)  # passes the up-front check, fails to lock at save
    r = gpufleet("check", "-i", str(_inventory(tmp_path, port)), "--level", "facts",
                 "--format", "json", "--save", str(store))
    assert r.returncode == 2, r.stderr
    assert '"gpu01"' in r.stdout and '"unreachable"' in r.stdout  # the report, all the same
    assert "cannot save the report" in r.stderr.splitlines()[-1]


def test_node_check_history_on_a_plain_file_is_refused_before_probing(
        tmp_path: Path, gpufleet: Callable[..., Ran]) -> None:
    (tmp_path / "afile").write_text("a plain file\n")
    r = gpufleet("node-check", "--history", str(tmp_path / "afile"))
    assert r.returncode == 2, r.stderr
    assert f"--history {tmp_path}/afile: cannot use it as a run store: {tmp_path}/afile is not a "\
           "directory" in r.stderr
    assert r.stdout == ""
