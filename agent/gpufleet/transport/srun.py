"""One node of a Slurm allocation: each command is a job step on it (`srun --overlap`, one task).

Used by `gpufleet smoke --slurm` (engines/slurm/smoke.py): the smoke runner's commands, which it
would send over SSH, go through srun instead, so the same script runs with the same checks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpufleet.model import CommandResult, HostSpec
from gpufleet.transport import _remote
from gpufleet.transport.base import Transport
from gpufleet.transport.local import LocalTransport


class SrunTransport(Transport):
    """One allocated node: each command is a job step on it (`srun --overlap`, one task)."""

    def __init__(self, spec: HostSpec, job_id: str) -> None:
        self.name = spec.name
        self._job = job_id
        self._local = LocalTransport(HostSpec(name=spec.name, address="localhost",
                                              connection="local"))

    def _prefix(self) -> list[str]:
        # --overlap: the smoke steps share the allocation's CPUs with each other; --quiet: only
        # the command's own output comes back; --kill-on-bad-exit: a dead rank ends the step.
        return ["srun", f"--jobid={self._job}", "--overlap", "--nodes=1", "--ntasks=1",
                f"--nodelist={self.name}", "--quiet", "--kill-on-bad-exit=1", "--"]

    def run(self, argv: Sequence[str], *, timeout: float, stdin: bytes | None = None,
            env: Mapping[str, str] | None = None) -> CommandResult:
        full = self._prefix()
        if env:
            full += ["env", *(f"{k}={v}" for k, v in env.items())]
        return self._local.run([*full, *argv], timeout=timeout, stdin=stdin)

    def put(self, data: bytes, remote_path: str, mode: int = 0o644) -> None:
        _remote.put_by_shell(self, data, remote_path, mode, via=" through srun")

    def close(self) -> None:
        self._local.close()
