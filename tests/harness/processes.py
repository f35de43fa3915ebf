"""The daemon lifecycle every lab follows: start each daemon in its own session, tied to this
process (PR_SET_PDEATHSIG), and stop it by PID on every exit path: the lab's close() on success,
failure and KeyboardInterrupt (a context manager's finally), at interpreter exit (close_at_exit),
and by the kernel when this process is killed outright.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """preexec_fn: the kernel sends the child SIGTERM when its parent dies (SIGKILL, OOM).

    The signal follows the *thread* that spawned the child, so labs are made on a long-lived
    thread."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children first), read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # The comm field may contain spaces and parentheses; ppid follows the last ')'.
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def stop_pid(proc: subprocess.Popen[bytes] | None, grace: float = 10.0) -> None:
    """SIGTERM a daemon we started, SIGKILL it after `grace` seconds; nothing if it is gone."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def stop_trees(procs: Sequence[subprocess.Popen[Any]], grace: float) -> None:
    """Stop each daemon and everything below it, all at once: SIGTERM to every PID, up to `grace`
    seconds for the daemons to exit, then SIGKILL to whatever is left. Sessions (a hung tool, a
    job step) are not our children and outlive the daemon unless killed by PID too."""
    victims: list[int] = []
    for proc in procs:
        victims += [proc.pid, *descendants(proc.pid)]
    for pid in victims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for pid in victims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    # SIGKILL is delivered when the process is next scheduled: on a loaded machine it can still
    # run (and hold its port) for a while. Return only once every victim has exited (a zombie
    # waiting for its reaper counts as gone), or after 30 s.
    deadline = time.monotonic() + 30.0
    while any(_alive(p) for p in victims) and time.monotonic() < deadline:
        time.sleep(0.01)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def owner_alive(mark: Path) -> bool:
    """Whether the process whose PID a reservation file holds still runs."""
    try:
        os.kill(int(mark.read_text().strip() or "0"), 0)
    except (OSError, ValueError) as e:
        return isinstance(e, PermissionError)
    return True


class Closeable(Protocol):
    def close(self) -> None: ...


_LIVE: set[Closeable] = set()


def close_at_exit(lab: Closeable) -> None:
    """Close `lab` at interpreter exit unless it was closed before (`closed`)."""
    _LIVE.add(lab)


def closed(lab: Closeable) -> None:
    _LIVE.discard(lab)


@atexit.register
def _close_all() -> None:
    for lab in list(_LIVE):
        lab.close()
