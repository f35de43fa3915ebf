"""Node-local counter history: the RDMA and NVLink counters of one node's recent runs, kept in
one small file on the node, so `node-check --counters FILE` judges counter deltas (the rules of
rules/fabric_delta.py, judged in report/pipeline.py: this module only stores and reads) without
the run store or a central one.

Slurm runs node-check every few minutes, and a pair of consecutive runs is the wrong window for
most of these rules: five carrier flaps spread over a day never show between two runs five
minutes apart, and a `link_downed` that rose once would drain the node and the next run would
resume it. So each rule is judged against the sample its threshold is about:

- the window (the oldest sample of the last 24 h, WINDOW_S): fatal counters, flaps per 24 h and
  NVLink errors (fabric_delta.WINDOW_RULES). A rise stays a finding for the window, so a drain
  is not undone by the next run (and ends on its own once the rise leaves the window);
- the hour (the newest sample at least an hour old, else the oldest): the rates per hour, minute
  or second (fabric_delta.RATE_RULES).

A counter that went down between the last sample and this run was reset (driver reload,
reboot): the older samples then mean nothing against the new counts, and the history restarts
from this run. The file holds only counters, never a whole report: RETAIN_S of samples, at most
MAX_SAMPLES, at least MIN_SPACING_S apart (a node checked every 30 s keeps one sample a
minute). A file that cannot be read as a counter history is moved aside (FILE.unreadable) with
a note, never silently overwritten; FILE.lock serialises two runs at once.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from gpufleet.files import FileError, open_regular, read_json, write_atomic

SCHEMA = "gpufleet.counters/v1"
WINDOW_S = 24 * 3600.0
RATE_S = 3600.0
RETAIN_S = WINDOW_S + RATE_S
MAX_SAMPLES = 1500
MIN_SPACING_S = 60.0
_LINK_KEYS = ("device", "port", "counters", "hw_counters", "netdev", "carrier_changes")


def when(sample: Mapping[str, Any]) -> datetime | None:
    try:
        return datetime.fromisoformat(str(sample.get("collected_at")).replace("Z", "+00:00"))
    except ValueError:
        return None


def sample_of(host_doc: Mapping[str, Any]) -> dict[str, Any] | None:
    """The counters of one host entry of a report document; None without facts or a time."""
    facts = host_doc.get("facts")
    if not isinstance(facts, Mapping) or not isinstance(facts.get("collected_at"), str):
        return None
    links = [{k: link.get(k) for k in _LINK_KEYS} for link in facts.get("ib_links") or ()
             if isinstance(link, Mapping)]
    return {"collected_at": facts["collected_at"], "ib_links": links,
            "nvlink_errors": list(facts.get("nvlink_errors") or ())}


def as_doc(host: str, sample: Mapping[str, Any]) -> dict[str, Any]:
    """A sample as the report document shape delta_findings reads."""
    return {"hosts": {host: {"status": "ok", "facts": dict(sample)}}}


def _values(sample: Mapping[str, Any]) -> dict[tuple[str, ...], int]:
    out: dict[tuple[str, ...], int] = {}
    for link in sample.get("ib_links") or ():
        if not isinstance(link, Mapping):
            continue
        nic = (str(link.get("device")), str(link.get("port")))
        for table in ("counters", "hw_counters"):
            for name, value in (link.get(table) or {}).items():
                if isinstance(value, int):
                    out[(*nic, table, str(name))] = value
        if isinstance(link.get("carrier_changes"), int):
            out[(*nic, "carrier_changes")] = link["carrier_changes"]
    for gpu in sample.get("nvlink_errors") or ():
        if isinstance(gpu, Mapping) and isinstance(gpu.get("links"), Mapping):
            who = str(gpu.get("uuid") or gpu.get("gpu"))
            for k, counts in gpu["links"].items():
                for name, value in (counts.items() if isinstance(counts, Mapping) else ()):
                    if isinstance(value, int):
                        out[("nvlink", who, str(k), str(name))] = value
    return out


def was_reset(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Any counter lower in `new` than in `old`: the driver or the node restarted them."""
    before = _values(old)
    return any(key in before and value < before[key] for key, value in _values(new).items())


def baseline(samples: Sequence[Mapping[str, Any]], now: datetime,
              age_s: float) -> Mapping[str, Any] | None:
    """For the window (age_s = WINDOW_S): the oldest sample not older than age_s. For the rates
    (age_s = RATE_S): the newest sample at least age_s old, else the oldest one."""
    timed = [(t, s) for s in samples if (t := when(s)) is not None and t < now]
    if not timed:
        return None
    if age_s >= WINDOW_S:
        inside = [s for t, s in timed if (now - t).total_seconds() <= age_s]
        return inside[0] if inside else None
    old_enough = [s for t, s in timed if (now - t).total_seconds() >= age_s]
    return old_enough[-1] if old_enough else timed[0][1]


def kept(samples: Sequence[Mapping[str, Any]], current: Mapping[str, Any]) -> list[Any]:
    """The history after this run: restarted on a reset, pruned to RETAIN_S, spaced, capped;
    a sample of the same second as `current` (collected_at has whole seconds) gives way to it."""
    now = when(current)
    if now is None:
        return list(samples)
    if samples and was_reset(samples[-1], current):
        samples = []
    out: list[Mapping[str, Any]] = []
    for s in samples:
        t = when(s)
        if t is None or t >= now or (now - t).total_seconds() > RETAIN_S:
            continue
        last = when(out[-1]) if out else None
        if last is None or (t - last).total_seconds() >= MIN_SPACING_S:
            out.append(s)
    return [*out, current][-MAX_SAMPLES:]


class CounterHistory:
    """The node-local file: {"schema", "host", "samples": [...]} as JSON."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.notes: list[str] = []

    def load(self, host: str) -> list[Mapping[str, Any]]:
        """The host's samples, oldest first; [] for a new file. A file of another host or of
        another shape is set aside (renamed FILE.unreadable) with a note, and [] returned."""
        if not self.path.exists() and not self.path.is_symlink():
            return []
        why = None
        try:
            doc = read_json(self.path, "a gpufleet counter history", follow=False)
        except FileError as exc:
            why, doc = str(exc), None
        if why is None:
            if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or \
                    not isinstance(doc.get("samples"), list):
                why = f"{self.path} is not a gpufleet counter history ({SCHEMA})"
            elif doc.get("host") != host:
                why = f"{self.path} holds the counters of another host"
        if why is not None:
            aside = self.path.with_name(self.path.name + ".unreadable")
            try:
                os.replace(self.path, aside)
                self.notes.append(f"{why}: moved to {aside}, history restarts")
            except OSError as exc:
                self.notes.append(f"{why}; cannot move it aside: {exc.strerror}")
            return []
        return [s for s in doc["samples"] if isinstance(s, dict)]

    def save(self, host: str, samples: Sequence[Mapping[str, Any]]) -> None:
        """Raises OSError."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, json.dumps({"schema": SCHEMA, "host": host,
                                            "samples": list(samples)}, sort_keys=True) + "\n",
                     in_place=False)


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock on FILE.lock (never a link or FIFO planted there). Raises OSError."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = open_regular(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
