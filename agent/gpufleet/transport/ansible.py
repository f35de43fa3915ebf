"""A host reached through an Ansible task's own connection (ssh, local, become: Ansible's job).

The gpu_facts action plugin builds one from its `_low_level_execute_command`, so the probe runs
exactly where and as the task runs, under AWX or ansible-playbook, and its output is parsed by
gpufleet's own parser on the controller.
"""

from __future__ import annotations

import math
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpufleet.model import CommandResult
from gpufleet.transport import _remote
from gpufleet.transport.base import Transport

# execute(command line, stdin) -> Ansible's result dict (rc, stdout, stderr): the action's
# `_low_level_execute_command(cmd, in_data=...)`.
Execute = Callable[[str, bytes | None], Mapping[str, Any]]

# Ansible's connection cannot stop a command it started, so the deadline is enforced on the
# host: timeout(1) ends the command at `timeout` seconds (TERM, KILL 5 s later) and exits 124.
# A host without timeout(1) runs the command unbounded, and the task's own `timeout:` keyword
# is then the only limit.
_DEADLINE = ('if command -v timeout >/dev/null 2>&1; then exec timeout -s TERM -k 5 "$@"; fi; '
             'shift; exec "$@"')
TIMED_OUT_RC = 124  # timeout(1)'s exit status when the deadline passed


class AnsibleTransport(Transport):
    """Runs each command with the task's connection; `timeout` is enforced on the host (above),
    and an exit of 124 reads as timed out (rc None)."""

    def __init__(self, name: str, execute: Execute) -> None:
        self.name = name
        self._execute = execute

    def run(self, argv: Sequence[str], *, timeout: float, stdin: bytes | None = None,
            env: Mapping[str, str] | None = None) -> CommandResult:
        envs = ["env", *(f"{k}={v}" for k, v in env.items())] if env else []
        line = shlex.join(["sh", "-c", _DEADLINE, "sh", str(math.ceil(timeout)), *envs,
                           *argv])
        started = time.monotonic()
        res = self._execute(line, stdin)
        rc = res.get("rc")
        timed_out = rc == TIMED_OUT_RC
        return CommandResult(rc=None if timed_out else rc, stdout=res.get("stdout", ""),
                             stderr=res.get("stderr", ""),
                             duration_s=time.monotonic() - started, timed_out=timed_out)

    def put(self, data: bytes, remote_path: str, mode: int = 0o644) -> None:
        _remote.put_by_shell(self, data, remote_path, mode, via=" through Ansible")

    def close(self) -> None:
        """Nothing to close: the connection is the task's, and Ansible closes it."""
