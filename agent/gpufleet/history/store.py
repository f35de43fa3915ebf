"""The run store `--save DIR` keeps: one JSON report per run plus index.json.

The index holds, per run, a small summary of each host (status, worst finding, busbw at the largest
size, TFLOP/s per GPU) so history and the drift rule read one file, not every run. It is rewritten
under a lock, through a fresh temp file and renamed, so two checks saving at once both land; a
lost or broken index is rebuilt from the run files.
"""

from __future__ import annotations

import errno
import fcntl
import fnmatch
import json
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gpufleet.files import (
    REPORT_SCHEMA,
    STORE_SCHEMA,
    FileError,
    not_regular,
    open_regular,
    read_checked,
    write_atomic,
)
from gpufleet.history.analysis import summarize_run
from gpufleet.redact import text as inert

STORE_SCHEMA_ID = "gpufleet.store/v1"  # schema/store-v1.json
WHAT = "a gpufleet JSON report"
INDEX = "index.json"
RUN_GLOB = "gpufleet-*.json"


class StoreError(Exception):
    """The store cannot be read or written; the message says which file and why."""


def _entry(file: str, doc: Mapping[str, Any]) -> dict[str, Any]:
    return {"file": file, "generated_at": doc.get("generated_at") or "",
            "level": doc.get("level"), "hosts": summarize_run(doc)}


def _write(target: Path, text: str) -> None:
    """A store file through a fresh temp file and rename; whatever was planted at `target` that
    is not a regular file (a link, a FIFO, a device) is refused, never written through."""
    try:
        kind = not_regular(os.lstat(target).st_mode)
    except FileNotFoundError:
        kind = None
    except OSError as exc:
        raise StoreError(f"cannot write {target}: {exc.strerror}") from exc
    if kind is not None:
        raise StoreError(f"cannot write {target}: it is {kind}, not a regular file (planted in "
                         "the store?); not written")
    try:
        write_atomic(target, text, in_place=False)
    except OSError as exc:
        raise StoreError(f"cannot write {target}: {exc.strerror}") from exc


class RunStore:
    """A shared directory: anyone who can write it may have planted links or forged files, so
    every file is read through the validation layer without following links, every write goes
    through a fresh temp file, and an index entry names a run file inside the store, never a
    path. A file that fails is left out with a note (`notes`), so one bad file never blocks
    every later --save."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.notes: list[str] = []

    @contextmanager
    def _locked(self) -> Iterator[None]:
        lock = self.root / ".lock"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd = open_regular(lock, os.O_RDWR | os.O_CREAT)
        except OSError as exc:
            why = "a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
            raise StoreError(f"cannot use {self.root} as a run store: {lock}: {why}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _run_file(self, name: str) -> Path | None:
        """The store's own regular file `name` (no separator, not a link), else None."""
        path = self.root / name
        if "/" in name or not fnmatch.fnmatchcase(name, RUN_GLOB) or path.is_symlink():
            return None
        return path if path.is_file() else None

    def entries(self) -> list[dict[str, Any]]:
        """Index entries, oldest first; [] for a store that does not exist yet."""
        if not self.root.is_dir():
            return []
        index = self.root / INDEX
        if index.exists() or index.is_symlink():
            try:
                doc = read_checked(index, STORE_SCHEMA, "a gpufleet run store index",
                                   follow=False)
            except FileError as exc:
                self.notes.append(f"{exc}; the index is rebuilt from the run files")
            else:
                runs = [r for r in doc["runs"] if self._run_file(r["file"]) is not None]
                return sorted(runs, key=lambda r: (r["generated_at"], r["file"]))
        return self._scan()

    def _scan(self) -> list[dict[str, Any]]:
        runs = []
        for path in sorted(self.root.glob(RUN_GLOB)):
            try:
                doc = read_checked(path, REPORT_SCHEMA, WHAT, follow=False)
            except FileError as exc:
                self.notes.append(f"{exc}; left out of the history")
                continue  # a half-copied, foreign or forged file is not a run
            runs.append(_entry(path.name, doc))
        return sorted(runs, key=lambda r: (r["generated_at"], r["file"]))

    def load(self, entry: Mapping[str, Any]) -> dict[str, Any]:
        path = self._run_file(str(entry.get("file")))
        if path is None:
            raise StoreError(f"{self.root}: index entry {inert(entry.get('file'))[:80]!r} is "
                             "not a run file of this store")
        try:
            doc: dict[str, Any] = read_checked(path, REPORT_SCHEMA, WHAT, follow=False)
        except FileError as exc:
            raise StoreError(str(exc)) from exc
        return doc

    def prune(self, before: str) -> int:
        """Drop the runs generated before `before` (an ISO time, compared as the index sorts):
        a node-local store written every health-check interval would otherwise fill the disk.
        Returns how many runs went."""
        with self._locked():
            runs = self.entries()
            old = [r for r in runs if str(r["generated_at"]) < before]
            if not old:
                return 0
            index = {"schema": STORE_SCHEMA_ID, "runs": [r for r in runs if r not in old]}
            _write(self.root / INDEX, json.dumps(index, separators=(",", ":")) + "\n")
            try:
                for r in old:  # after the index, so no entry names a removed file
                    if (path := self._run_file(str(r["file"]))) is not None:
                        path.unlink()
            except OSError as exc:
                raise StoreError(f"cannot prune {self.root}: {exc.strerror}") from exc
        return len(old)

    def save(self, doc: Mapping[str, Any]) -> Path:
        """Write the run as gpufleet-<UTC time>.json and add it to the index."""
        stamp = re.sub(r"[^A-Za-z0-9._+-]", "", str(doc.get("generated_at") or "undated"))
        with self._locked():
            runs = self.entries()
            name, n = f"gpufleet-{stamp}.json", 1
            while os.path.lexists(self.root / name):  # a dangling link is taken too
                name, n = f"gpufleet-{stamp}-{n}.json", n + 1
            path = self.root / name
            runs.append(_entry(name, doc))
            index = {"schema": STORE_SCHEMA_ID, "runs": runs}
            for target, text in (
                    (path, json.dumps(doc, indent=2, ensure_ascii=False) + "\n"),
                    (self.root / INDEX, json.dumps(index, separators=(",", ":")) + "\n")):
                _write(target, text)
        return path
