"""Fixtures for tests against the real-sshd test fleet (see tests/fleet/README.md).

`fleet` (session scope): SESSION_HOSTS (every profile under tests/fleet/profiles, h200x2 three
times, group `gpu`; two `no-nvidia-smi` hosts, group `cpu`) plus the four fault hosts (`faulty`).
Tests that need their own fleet use `make_fleet(tmp_path, [(name, profile), ...])`, a context
manager from fleetlib that stops every daemon by PID however the test ends.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fleetlib import (
    DESIRED_STATE,
    FAULTS,
    SESSION_HOSTS,
    Fleet,
    FleetError,
    FleetHost,
    build_fleet,
    make_fleet,
)

__all__ = [
    "DESIRED_STATE",
    "FAULTS",
    "SESSION_HOSTS",
    "Fleet",
    "FleetError",
    "FleetHost",
    "build_fleet",
    "make_fleet",
]


@pytest.fixture(scope="session")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    with make_fleet(tmp_path_factory.mktemp("fleet"), SESSION_HOSTS, faults=True) as f:
        yield f
