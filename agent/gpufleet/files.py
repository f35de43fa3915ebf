"""Reading a file the user named: the OS and parse errors become one sentence each.

Every command that reads a user's file (an expectations file, a saved report) says the same
thing for the same failure, so the translation lives here once.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


class FileError(Exception):
    """The file cannot be read or parsed; the message names the file and why."""


def read_parsed(path: Path, parse: Callable[[str], T], what: str,
                errors: tuple[type[Exception], ...] = (ValueError,)) -> T:
    """parse(text of path); "cannot read PATH: why" or "PATH is not WHAT: why" as FileError."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise FileError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        return parse(text)
    except errors as exc:
        raise FileError(f"{path} is not {what}: {exc}") from exc
