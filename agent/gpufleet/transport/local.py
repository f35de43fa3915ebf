"""This machine, through subprocess: same contract as SSH, no network."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from typing import IO, Any

from gpufleet.model import CommandResult, HostSpec
from gpufleet.transport import _remote, capture
from gpufleet.transport.base import Transport, TransportError


def _session_members(sid: int) -> list[int]:
    """pids whose session is sid (Linux /proc; elsewhere just the leader's group)."""
    members = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return [sid]
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        fields = stat[stat.rfind(b")") + 2:].split()
        # after "pid (comm) ": state ppid pgrp session ...
        if len(fields) > 3 and fields[3] == str(sid).encode() and fields[0] != b"Z":
            members.append(int(entry))
    return members


def _signal_session(sid: int, sig: int) -> None:
    for pid in _session_members(sid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(sid, sig)


def _thread(target: Any, *args: Any) -> threading.Thread:
    t = threading.Thread(target=target, args=args, daemon=True)
    t.start()
    return t


def _pump(stream: IO[bytes], into: capture.Capped) -> None:
    with contextlib.suppress(OSError, ValueError):
        while chunk := stream.read1(1 << 16):  # type: ignore[attr-defined]
            into.add(chunk)


def _feed(stream: IO[bytes], data: bytes) -> None:
    with contextlib.suppress(OSError, ValueError):  # the command may exit without reading it
        try:
            stream.write(data)
        finally:
            stream.close()


class LocalTransport(Transport):
    def __init__(self, spec: HostSpec) -> None:
        self.name = spec.name
        self._spec = spec
        # Becoming root when we already are root needs no sudo (and may have none).
        self._sudo = spec.become and not (
            os.geteuid() == 0 and spec.become_user in (None, "root")
        )

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        full = [*_remote.sudo_prefix(self._sudo, self._spec.become_user), *argv]
        if env and self._sudo:
            # sudo resets the environment; env(1) re-applies ours inside it.
            full = [*_remote.sudo_prefix(True, self._spec.become_user), "env",
                    *(f"{k}={v}" for k, v in env.items()), *argv]
        started = time.monotonic()
        try:
            proc = subprocess.Popen(
                full,
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=None if env is None or self._sudo else {**os.environ, **env},
                start_new_session=True,
            )
        except FileNotFoundError:
            return CommandResult(rc=127, stdout="", stderr=f"{full[0]}: not found",
                                 duration_s=time.monotonic() - started)
        except OSError as exc:
            return CommandResult(rc=126, stdout="", stderr=f"{full[0]}: {exc.strerror}",
                                 duration_s=time.monotonic() - started)
        timed_out = False
        deadline = started + timeout
        out, err = capture.Capped(), capture.Capped()
        # Threads, not communicate(): it would keep all output, however much the command prints.
        pumps = [_thread(_pump, proc.stdout, out), _thread(_pump, proc.stderr, err)]
        if stdin is not None:
            pumps.append(_thread(_feed, proc.stdin, stdin))
        try:
            while any(p.is_alive() for p in pumps[:2]):
                if _remote.CANCEL.is_set():
                    raise TransportError("error", f"{self.name}: interrupted")  # killed below
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    timed_out = True
                    self._kill_group(proc)
                    break
                # Short slices so Ctrl-C (CANCEL) is noticed; the pumps keep reading meanwhile.
                pumps[0].join(min(remaining, _remote.POLL_S))
                pumps[1].join(0 if pumps[0].is_alive() else min(remaining, _remote.POLL_S))
            proc.wait()
            for p in pumps:
                p.join(5.0)
        except BaseException:
            # Interrupted (Ctrl-C): never leave the group running behind us.
            self._kill_group(proc)
            raise
        return CommandResult(
            rc=None if timed_out else proc.returncode,
            stdout=out.text(),
            stderr=err.text(),
            duration_s=time.monotonic() - started,
            timed_out=timed_out,
        )

    def _kill_group(self, proc: subprocess.Popen[bytes]) -> None:
        """TERM then KILL everything in the command's session (its own: start_new_session).

        A session, not only a process group: tools run under timeout(1) get groups of their own.
        """
        if self._sudo:
            subprocess.run(
                _remote.killer_argv(proc.pid, proc.pid, True, self._spec.become_user),
                stdin=subprocess.DEVNULL, capture_output=True, timeout=10, check=False,
            )
        else:
            _signal_session(proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(3.0)
            deadline = time.monotonic() + 3.0
            while _session_members(proc.pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            _signal_session(proc.pid, signal.SIGKILL)
        proc.wait()

    def put(self, data: bytes, remote_path: str, mode: int = 0o644) -> None:
        if self._sudo:
            result = self.run(["sh", "-c", 'cat > "$1" && chmod "$2" "$1"', "sh",
                               remote_path, f"{mode:o}"], timeout=60, stdin=data)
            if result.rc != 0:
                raise TransportError("error", f"cannot write {remote_path}: {result.stderr}")
            return
        try:
            fd = os.open(remote_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(remote_path, mode)
        except OSError as exc:
            raise TransportError("error", f"cannot write {remote_path}: {exc.strerror}") from exc

    def close(self) -> None:
        pass
