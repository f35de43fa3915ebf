"""The RMA evidence bundle for one node: what NVIDIA (or the server vendor) asks for in one
archive with a manifest, every text redacted (redact.py) because a bundle leaves the site.

Built from the run store (`--save DIR` or node-check's `--history DIR`): the node's identity from
its latest facts (GPU serials, UUIDs, PCI bus ids, VBIOS, driver, the driver's recovery action,
the GPUs on the PCI bus), the Xid timeline over every saved run (each kernel log line once,
rules/escalation.py `events`), every finding that named the node per run with its evidence, and,
where the node had the tool, the output of `nvidia-bug-report.sh` (a .log.gz fetched by the
operator; decompressed, redacted line by line and compressed again).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import tarfile
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gpufleet import __version__, redact
from gpufleet.rules.escalation import events

BUNDLE_SCHEMA = "gpufleet.rma-bundle/v1"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")  # it names the archive's directory
_GPU_KEYS = ("index", "name", "uuid", "serial", "bus_id", "vbios", "memory_total_mib",
             "ecc_uncorrected_volatile", "ecc_uncorrected_aggregate", "remapped_rows_pending",
             "remapped_rows_failed")


class BundleError(Exception):
    """The bundle cannot be built; the message says why."""


def _identity(host: str, doc: Mapping[str, Any]) -> dict[str, Any]:
    facts = ((doc.get("hosts") or {}).get(host) or {}).get("facts") or {}
    return {
        "host": host, "from_run": doc.get("generated_at"),
        "os": facts.get("os"), "driver": facts.get("driver"),
        "gpus": [{k: g.get(k) for k in _GPU_KEYS} for g in facts.get("gpus") or []],
        "gpu_recovery": facts.get("gpu_recovery"), "pci_gpus": facts.get("pci_gpus"),
    }


def _findings(host: str, docs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [{"run": d.get("generated_at"), "rule": f.get("rule"), "severity": f.get("severity"),
             "message": f.get("message"), "evidence": f.get("evidence")}
            for d in docs for f in d.get("findings") or [] if host in (f.get("hosts") or [])]


def contents(host: str, docs: Sequence[Mapping[str, Any]],
             bug_report: bytes | None = None) -> dict[str, bytes]:
    """The bundle's files (name -> bytes) for `host` from its saved runs, oldest first."""
    if not _NAME.fullmatch(host):
        raise BundleError(f"{host!r} is not a host name (letters, digits, '.', '_', '-')")
    mine = [d for d in docs if host in (d.get("hosts") or {})]
    if not mine:
        raise BundleError(f"no saved run names {host!r}")
    timeline = [{"when": e.when.isoformat(), "xid": e.xid, "bus_id": e.bus,
                 "message": e.message} for e in sorted(events(mine), key=lambda e: e.when)
                if e.host == host]
    files = {
        "identity.json": _identity(host, mine[-1]),
        "xid-timeline.json": timeline,
        "findings.json": _findings(host, mine),
    }
    out = {name: (json.dumps(redact.clean(body), indent=2, ensure_ascii=False) + "\n").encode()
           for name, body in files.items()}
    if bug_report is not None:
        try:
            text = gzip.decompress(bug_report).decode("utf-8", "replace")
        except (OSError, EOFError) as exc:
            raise BundleError(f"the nvidia-bug-report file is not gzip: {exc}") from exc
        out["nvidia-bug-report.log.gz"] = gzip.compress(redact.text(text).encode(), mtime=0)
    return out


def manifest(host: str, files: Mapping[str, bytes], runs: Sequence[str]) -> bytes:
    doc = {"schema": BUNDLE_SCHEMA, "host": host, "gpufleet": __version__, "runs": list(runs),
           "redacted": "every text through gpufleet.redact (credentials, tokens, keys)",
           "files": {n: {"bytes": len(b), "sha256": hashlib.sha256(b).hexdigest()}
                     for n, b in sorted(files.items())}}
    return (json.dumps(doc, indent=2) + "\n").encode()


def write_bundle(path: Path, host: str, entries: Sequence[Mapping[str, Any]],
                 load: Callable[[Mapping[str, Any]], Mapping[str, Any]],
                 bug_report: bytes | None = None) -> dict[str, bytes]:
    """Write `path` (.tar.gz, through a temporary file beside it): manifest.json first, then
    the files it lists."""
    docs = [load(e) for e in entries]
    files = contents(host, docs, bug_report)
    runs = [str(e.get("file")) for e, d in zip(entries, docs, strict=True)
            if host in (d.get("hosts") or {})]
    members = {"manifest.json": manifest(host, files, runs), **files}
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
            for name, data in members.items():
                info = tarfile.TarInfo(f"rma-{host}/{name}")
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise BundleError(f"cannot write {path}: {exc.strerror}") from exc
    return members
