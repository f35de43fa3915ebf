"""The run store `--save DIR` keeps: one JSON report per run plus index.json.

The index holds, per run, a small summary of each host (status, worst finding, busbw at the largest
size, TFLOP/s per GPU) so history and the drift rule read one file, not every run. It is rewritten
under a lock, beside and renamed, so two checks saving at once both land; a lost or broken index is
rebuilt from the run files.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gpufleet.history.analysis import summarize_run

STORE_SCHEMA = "gpufleet.store/v1"
INDEX = "index.json"
RUN_GLOB = "gpufleet-*.json"


class StoreError(Exception):
    """The store cannot be read or written; the message says which file and why."""


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise StoreError(f"cannot read {path}: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise StoreError(f"{path} is not JSON: {exc}") from exc


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise StoreError(f"cannot write {path}: {exc.strerror}") from exc


def _entry(file: str, doc: Mapping[str, Any]) -> dict[str, Any]:
    return {"file": file, "generated_at": doc.get("generated_at") or "",
            "level": doc.get("level"), "hosts": summarize_run(doc)}


class RunStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    @contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreError(f"cannot use {self.root} as a run store: {exc.strerror}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def entries(self) -> list[dict[str, Any]]:
        """Index entries, oldest first; [] for a store that does not exist yet."""
        if not self.root.is_dir():
            return []
        index = self.root / INDEX
        if index.exists():
            try:
                doc = _read_json(index)
            except StoreError:
                doc = None
            if isinstance(doc, dict) and doc.get("schema") == STORE_SCHEMA:
                runs = [r for r in doc.get("runs", []) if (self.root / r["file"]).exists()]
                return sorted(runs, key=lambda r: (r["generated_at"], r["file"]))
        return self._scan()

    def _scan(self) -> list[dict[str, Any]]:
        runs = []
        for path in sorted(self.root.glob(RUN_GLOB)):
            try:
                doc = _read_json(path)
            except StoreError:
                continue  # a half-copied or foreign file is not a run
            if isinstance(doc, dict) and isinstance(doc.get("hosts"), dict):
                runs.append(_entry(path.name, doc))
        return sorted(runs, key=lambda r: (r["generated_at"], r["file"]))

    def load(self, entry: Mapping[str, Any]) -> dict[str, Any]:
        doc = _read_json(self.root / str(entry["file"]))
        if not isinstance(doc, dict) or not isinstance(doc.get("hosts"), dict):
            raise StoreError(f"{self.root / str(entry['file'])} is not a gpufleet JSON report")
        return doc

    def save(self, doc: Mapping[str, Any]) -> Path:
        """Write the run as gpufleet-<UTC time>.json and add it to the index."""
        stamp = str(doc.get("generated_at") or "undated").replace(":", "")
        with self._locked():
            runs = self.entries()
            name, n = f"gpufleet-{stamp}.json", 1
            while (self.root / name).exists():
                name, n = f"gpufleet-{stamp}-{n}.json", n + 1
            path = self.root / name
            _write_atomic(path, json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
            runs.append(_entry(name, doc))
            index = {"schema": STORE_SCHEMA, "runs": runs}
            _write_atomic(self.root / INDEX, json.dumps(index, separators=(",", ":")) + "\n")
        return path
