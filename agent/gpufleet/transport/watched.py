"""A transport that remembers whether a command ran out of time (the sweep's probe asks it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpufleet.model import CommandResult
from gpufleet.transport.base import Transport


class Watched(Transport):
    """Passes everything through and remembers whether a command ran out of time."""

    def __init__(self, inner: Transport) -> None:
        self.name = inner.name
        self.inner = inner
        self.timed_out = False

    def run(self, argv: Sequence[str], *, timeout: float, stdin: bytes | None = None,
            env: Mapping[str, str] | None = None) -> CommandResult:
        result = self.inner.run(argv, timeout=timeout, stdin=stdin, env=env)
        self.timed_out = self.timed_out or result.timed_out
        return result

    def put(self, data: bytes, remote_path: str, mode: int = 0o644) -> None:
        self.inner.put(data, remote_path, mode)

    def close(self) -> None:
        self.inner.close()
