"""Fixtures shared by the unit tests."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from clirun import Ran, in_process


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., Ran]:
    """`gpufleet ARGS` in this process (the same main() the console script runs)."""
    return in_process(capsys)
