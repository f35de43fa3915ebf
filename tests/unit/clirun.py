"""`gpufleet ARGS` run in the test's own process, for tests that want its exit code and output."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from gpufleet.cli import main


@dataclasses.dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


def in_process(capsys: pytest.CaptureFixture[str]) -> Callable[..., Ran]:
    """A caller of the same main() the console script runs, its output captured by CAPSYS."""
    def call(*args: str) -> Ran:
        with pytest.raises(SystemExit) as exc:
            main(list(args))
        out = capsys.readouterr()
        return Ran(int(exc.value.code or 0), out.out, out.err)
    return call
