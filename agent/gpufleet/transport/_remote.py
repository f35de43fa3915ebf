"""The shell text both transports send: one place that quotes and wraps a command."""

from __future__ import annotations

import math
import shlex
import threading
from collections.abc import Mapping, Sequence

PGID_MARKER = b"gpufleet-pgid="

# Set once on Ctrl-C (transport.interrupt_all): every running command is killed on its host and
# its run() raises, so worker threads end now instead of at their timeouts.
CANCEL = threading.Event()
POLL_S = 0.5  # how soon a running command notices CANCEL

# Runs "$@" as the leader of its own process group and prints that group id first on stderr,
# so a timeout can kill the whole group. `timeout` (coreutils/busybox) is the host-side
# backstop: if the controller vanishes, the group still dies a few seconds after the deadline.
# sshd already made the login shell a session leader, and `exec` keeps that pid; under sudo,
# `timeout` makes its own group (setpgid) with the same pid as this shell.
_WRAPPER = (
    'echo "gpufleet-pgid=$$" >&2; '
    "if command -v timeout >/dev/null 2>&1; then exec timeout -s TERM -k 5 \"$@\"; fi; "
    'shift; exec "$@"'
)

# Kills a process group: TERM, up to 3 s of grace, then KILL.
_KILLER = (
    'kill -TERM -"$1" 2>/dev/null || exit 0; i=0; '
    'while [ $i -lt 30 ] && kill -0 -"$1" 2>/dev/null; do sleep 0.1; i=$((i+1)); done; '
    'kill -KILL -"$1" 2>/dev/null; exit 0'
)


def sudo_prefix(become: bool, become_user: str | None) -> list[str]:
    if not become:
        return []
    return ["sudo", "-n", *(["-u", become_user] if become_user else []), "--"]


def wrapped_argv(
    argv: Sequence[str],
    timeout: float,
    env: Mapping[str, str] | None,
    become: bool,
    become_user: str | None,
) -> list[str]:
    """argv as it must run on the host: become, own process group, env, host-side deadline."""
    host_deadline = str(math.ceil(timeout) + 5)
    envs = ["env", *(f"{k}={v}" for k, v in env.items())] if env else []
    return [*sudo_prefix(become, become_user), "sh", "-c", _WRAPPER, "sh", host_deadline,
            *envs, *argv]


def killer_argv(pgid: int, become: bool, become_user: str | None) -> list[str]:
    return [*sudo_prefix(become, become_user), "sh", "-c", _KILLER, "sh", str(pgid)]


def shell_line(argv: Sequence[str]) -> str:
    """One line for the remote login shell; every word quoted."""
    return "exec " + " ".join(shlex.quote(a) for a in argv)


def split_pgid(stderr: bytes) -> tuple[int | None, bytes]:
    """(pgid, the rest of stderr) when the wrapper's first line is there."""
    if not stderr.startswith(PGID_MARKER):
        return None, stderr
    line, sep, rest = stderr.partition(b"\n")
    if not sep:
        return None, stderr
    try:
        return int(line[len(PGID_MARKER):]), rest
    except ValueError:
        return None, stderr
