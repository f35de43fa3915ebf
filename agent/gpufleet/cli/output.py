"""Where a report goes (stdout or a file written atomically) and how a saved one is read back.

The one place for "is stdout a terminal", the terminal width, "the output's directory must
exist" (and the run store's, `check_store`) and reading a JSON report: every command goes
through `Output` and `read_report`.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufleet.cli.options import UsageError
from gpufleet.files import REPORT_SCHEMA, FileError, read_checked, write_atomic
from gpufleet.report import Format, render_doc


def check_dir(output: Path | None) -> None:
    """Refuse an output file whose directory does not exist, before any work is done."""
    if output is not None and not output.parent.is_dir():
        raise UsageError(f"cannot write {output}: {output.parent} is not a directory")


def check_store(store: Path | None, option: str = "--save") -> None:
    """Refuse a run store that cannot be created or written, before any work is done: a
    sweep at --level full runs up to 30 minutes, and --save is found bad only at its end."""
    if store is None:
        return
    if store.exists() and not store.is_dir():
        raise UsageError(f"{option} {store}: cannot use it as a run store: {store} is not a "
                         "directory")
    if store.is_dir():
        if not os.access(store, os.W_OK | os.X_OK):
            raise UsageError(f"{option} {store}: cannot use it as a run store: {store} is not "
                             "writable")
        return
    # Created on save (mkdir -p): the nearest existing ancestor must be a writable directory.
    parent = store.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise UsageError(f"{option} {store}: cannot create the run store: {parent} is not a "
                         "directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {store}: cannot create the run store: {parent} is not "
                         "writable")


@dataclass(frozen=True)
class Output:
    """stdout (`path` None) or a file; colour and the terminal's width only on a terminal."""

    path: Path | None = None

    @property
    def tty(self) -> bool:
        return self.path is None and sys.stdout.isatty()

    def width(self, default: int = 120) -> int:
        return shutil.get_terminal_size().columns if self.tty else default

    def render(self, doc: Mapping[str, Any], fmt: Format | str) -> None:
        """`doc` rendered in `fmt` and written."""
        self.write(render_doc(doc, fmt, color=self.tty, width=self.width()))

    def write(self, text: str) -> None:
        if not text.endswith("\n"):
            text += "\n"
        if self.path is None:
            sys.stdout.write(text)
            sys.stdout.flush()
            return
        _replace(self.path, text)


def _replace(output: Path, text: str) -> None:
    # node_exporter's textfile collector (or a CI job) never reads a half-written report.
    try:
        write_atomic(output, text)
    except OSError as exc:
        raise UsageError(f"cannot write {output}: {exc.strerror}") from exc


def read_report(path: Path) -> dict[str, Any]:
    """A saved JSON report, checked against the shipped schema (gpufleet/schema/report-v1.json)
    before any renderer sees it: a hostile or truncated file is one sentence naming the file
    and the field, never a traceback or a verdict built from half of it."""
    try:
        doc: dict[str, Any] = read_checked(path, REPORT_SCHEMA, "a gpufleet JSON report")
    except FileError as exc:
        raise UsageError(str(exc)) from exc
    return doc
