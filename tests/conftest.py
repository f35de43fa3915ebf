"""Shared test configuration. Fleet fixtures live in tests/fleet/conftest.py."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

# A runner started in the background by a non-interactive shell (`cmd &`) inherits SIGINT
# ignored (POSIX), and so would every process the tests start: the Ctrl-C tests would then test
# nothing but that. Python's own handler here gives children the default disposition on exec.
signal.signal(signal.SIGINT, signal.default_int_handler)

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES
