"""Where a report goes (stdout or a file written atomically) and how a saved one is read back.

The one place for "is stdout a terminal", the terminal width, "the output's directory must
exist" and reading a JSON report: every command goes through `Output` and `read_report`.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufleet.cli.options import UsageError
from gpufleet.files import FileError, read_parsed
from gpufleet.report import Format, render_doc


def check_dir(output: Path | None) -> None:
    """Refuse an output file whose directory does not exist, before any work is done."""
    if output is not None and not output.parent.is_dir():
        raise UsageError(f"cannot write {output}: {output.parent} is not a directory")


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
    # Write beside, then rename: node_exporter's textfile collector (or a CI job) never reads a
    # half-written report. The temp file is new and ours (O_EXCL, unique name): a planted
    # symlink is never followed and concurrent runs never share one.
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".tmp",
                                   dir=output.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        umask = os.umask(0o022)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # what a plain open() would have made, not mkstemp's 0600
        os.replace(tmp, output)
    except OSError as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise UsageError(f"cannot write {output}: {exc.strerror}") from exc


def read_report(path: Path, *, complete: bool = True) -> dict[str, Any]:
    """A saved JSON report. `complete`: also checked enough that every renderer can work on it
    (hosts with a status, findings with rule, severity, hosts and message)."""
    try:
        doc = read_parsed(path, json.loads, "a JSON report", (json.JSONDecodeError,))
    except FileError as exc:
        raise UsageError(str(exc)) from exc
    if not isinstance(doc, dict) or "hosts" not in doc:
        raise UsageError(f"{path} is not a gpufleet JSON report (no 'hosts')")
    if not complete:
        return doc
    if not isinstance(doc["hosts"], dict):
        raise UsageError(f"{path} is not a gpufleet JSON report (no 'hosts')")
    doc.setdefault("findings", [])
    for name, h in doc["hosts"].items():
        if not isinstance(h, dict) or "status" not in h:
            raise UsageError(f"{path}: host {name!r} has no status")
    for f in doc["findings"]:
        if not isinstance(f, dict) or not {"rule", "severity", "hosts", "message"} <= set(f):
            raise UsageError(f"{path}: a finding lacks rule, severity, hosts or message")
        f.setdefault("remediation", "")
    return doc
