"""Transports: how a command reaches a host. `connect` picks local or SSH from the HostSpec."""

from __future__ import annotations

from gpufleet.model import HostSpec
from gpufleet.transport._remote import CANCEL
from gpufleet.transport.base import Transport, TransportError

__all__ = ["Transport", "TransportError", "connect", "interrupt_all"]


def interrupt_all() -> None:
    """Ctrl-C: kill every running command on its host; later connects and runs fail at once."""
    CANCEL.set()


def connect(
    spec: HostSpec, *, connect_timeout: float = 10.0, accept_new_host_keys: bool = False
) -> Transport:
    """An open transport to spec, or TransportError(status, sentence) saying why not."""
    if CANCEL.is_set():
        raise TransportError("error", f"{spec.name}: interrupted before connecting")
    if spec.connection == "local":
        from gpufleet.transport.local import LocalTransport  # noqa: PLC0415

        return LocalTransport(spec)
    # paramiko is imported only when a host needs SSH.
    from gpufleet.transport.ssh import connect_ssh  # noqa: PLC0415

    return connect_ssh(spec, connect_timeout=connect_timeout,
                       accept_new_host_keys=accept_new_host_keys)
