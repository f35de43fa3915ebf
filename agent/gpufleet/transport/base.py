"""The Transport contract. Only transport/ modules import paramiko or subprocess for remote work."""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence

from gpufleet.model import CommandResult, HostStatus


class TransportError(Exception):
    """A host-level failure, already translated into a sentence a human can act on.

    `status` is the HostResult status it maps to (unreachable, auth_failed, hostkey_mismatch,
    hostkey_unknown, timeout, error).
    """

    def __init__(self, status: HostStatus, message: str) -> None:
        super().__init__(message)
        self.status: HostStatus = status
        self.message = message


class Transport(abc.ABC):
    """One connection to one host. Not thread-safe; one per host per fan-out worker."""

    name: str

    @abc.abstractmethod
    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        """Run argv (quoted with shlex.quote for remote shells) in its own process group.

        On timeout the whole process group is killed on the host and the result has
        timed_out=True, rc=None. Never raises for a non-zero exit; raises TransportError when
        the host itself cannot be used.
        """

    @abc.abstractmethod
    def put(self, data: bytes, remote_path: str, mode: int = 0o644) -> None:
        """Write data to remote_path (parent directory must exist)."""

    @abc.abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
