"""The shell text the transports send: one place that quotes and wraps a command, and the
`cat > "$1"` put for transports without a file channel."""

from __future__ import annotations

import math
import shlex
import threading
from collections.abc import Mapping, Sequence

from gpufleet.transport.base import Transport, TransportError

PGID_MARKER = b"gpufleet-pgid="

# Set once on Ctrl-C (transport.interrupt_all): every running command is killed on its host and
# its run() raises, so worker threads end now instead of at their timeouts.
CANCEL = threading.Event()
POLL_S = 0.5  # how soon a running command notices CANCEL

# Runs "$@" as the leader of its own process group and prints, first on stderr, that group id
# and its session id. A timeout kills the whole session: tools started under `timeout(1)` (as
# the probe does) sit in process groups of their own, but never leave the session sshd made.
# sshd already made the login shell a session leader, and `exec` keeps that pid; under sudo the
# session leader is sudo itself. `timeout` here is the host-side backstop: if the controller
# vanishes, the command still dies a few seconds after its deadline.
_WRAPPER = (
    "sid=; read -r _ _ _ _ _ sid _ </proc/$$/stat 2>/dev/null; "
    'echo "gpufleet-pgid=$$ $sid" >&2; '
    "if command -v timeout >/dev/null 2>&1; then exec timeout -s TERM -k 5 \"$@\"; fi; "
    'shift; exec "$@"'
)

# Kills a session (pkill -s) and a process group: TERM, up to 3 s of grace, then KILL.
_KILLER = (
    'pg=$1; sid=$2; '
    'sig() { [ -n "$sid" ] && pkill -"$1" -s "$sid" 2>/dev/null; kill -"$1" -"$pg" 2>/dev/null; }; '
    'alive() { kill -0 -"$pg" 2>/dev/null || { [ -n "$sid" ] && pgrep -s "$sid" >/dev/null; }; }; '
    "sig TERM; i=0; "
    "while [ $i -lt 30 ] && alive; do sleep 0.1; i=$((i+1)); done; "
    "sig KILL; exit 0"
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


def killer_argv(pgid: int, sid: int | None, become: bool, become_user: str | None) -> list[str]:
    return [*sudo_prefix(become, become_user), "sh", "-c", _KILLER, "sh", str(pgid),
            "" if sid is None else str(sid)]


def shell_line(argv: Sequence[str]) -> str:
    """One line for the remote login shell; every word quoted."""
    return "exec " + " ".join(shlex.quote(a) for a in argv)


Group = tuple[int, int | None]  # (process group id, session id)


def split_marker(stderr: bytes) -> tuple[Group | None, bytes]:
    """((pgid, sid), stderr without the wrapper's line) once that line has arrived.

    Usually the first line; sudo may print warnings before it ("unable to resolve host").
    """
    start = 0 if stderr.startswith(PGID_MARKER) else stderr.find(b"\n" + PGID_MARKER) + 1
    if start == 0 and not stderr.startswith(PGID_MARKER):
        return None, stderr
    end = stderr.find(b"\n", start)
    if end < 0:
        return None, stderr
    words = stderr[start + len(PGID_MARKER):end].split()
    try:
        pgid = int(words[0])
        sid = int(words[1]) if len(words) > 1 else None
    except (ValueError, IndexError):
        return None, stderr
    return (pgid, sid), stderr[:start] + stderr[end + 1:]


def put_by_shell(transport: Transport, data: bytes, remote_path: str, mode: int, *,
                 via: str = "") -> None:
    """Write data to remote_path through the transport's own run(): `cat` from stdin, then
    chmod (for hosts without sftp, and for transports that only run commands). The path and
    mode travel as arguments, never as shell text."""
    result = transport.run(["sh", "-c", 'cat > "$1" && chmod "$2" "$1"', "sh", remote_path,
                            f"{mode:o}"], timeout=max(60.0, len(data) / 1e6), stdin=data)
    if result.rc != 0:
        raise TransportError("error", f"{transport.name}: cannot write {remote_path}{via}: "
                             f"{result.stderr.strip()[:300]}")
