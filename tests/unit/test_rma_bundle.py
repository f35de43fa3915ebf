"""`gpufleet rma-bundle`: one node's evidence from the run store in one archive with a manifest,
secrets redacted (report/rma_bundle.py), on facts the real probe script reads from host profiles."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import subprocess
import sys
import tarfile
from pathlib import Path

from test_rules_captures import _probe

from gpufleet.history.store import RunStore
from gpufleet.model import HostResult, HostSpec, Report
from gpufleet.report import document
from gpufleet.rules import evaluate

SECRET = "https://svc:Zx9-s3cr3t@registry.internal/v2 HF_TOKEN=hf_abcdefghijklmnopqrstuvwx"


def _save(store: RunStore, profile: str, at: str) -> None:
    f = _probe(profile)
    r = Report(hosts={"gpu07": HostResult("gpu07", "ok", None, f)},
               specs={"gpu07": HostSpec("gpu07", "gpu07")}, generated_at=at, level="facts")
    store.save(document(dataclasses.replace(r, findings=evaluate(r))))


def _bundle(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpufleet", "rma-bundle", "gpu07", "--store",
                           str(tmp_path / "runs"), "-o", str(tmp_path / "rma.tar.gz"), *extra],
                          capture_output=True, text=True, timeout=60, check=False)


def test_bundle_holds_identity_timeline_findings_and_a_manifest(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs")
    _save(store, "xid", "2026-11-29T12:00:00Z")
    _save(store, "xid-leaky", "2026-11-30T12:00:00Z")
    bug = tmp_path / "nvidia-bug-report.log.gz"
    bug.write_bytes(gzip.compress(f"nvidia-bug-report.sh\nproxy={SECRET}\n".encode()))
    proc = _bundle(tmp_path, "--bug-report", str(bug))
    assert proc.returncode == 0, proc.stderr
    with tarfile.open(tmp_path / "rma.tar.gz") as tar:
        names = tar.getnames()
        files = {n.split("/", 1)[1]: tar.extractfile(n).read() for n in names}  # type: ignore[union-attr]
    assert names[0] == "rma-gpu07/manifest.json"
    man = json.loads(files.pop("manifest.json"))
    assert man["host"] == "gpu07" and len(man["runs"]) == 2
    assert {n: m["sha256"] for n, m in man["files"].items()} == {
        n: hashlib.sha256(b).hexdigest() for n, b in files.items()}
    ident = json.loads(files["identity.json"])
    assert [g["serial"] for g in ident["gpus"]] == ["1653924170558", "1654024029552"]
    assert [g["bus_id"] for g in ident["gpus"]] == ["00000000:00:06.0", "00000000:00:07.0"]
    assert ident["gpus"][1]["vbios"] and ident["driver"]["version"] == "580.159.04"
    timeline = json.loads(files["xid-timeline.json"])
    assert [t["xid"] for t in timeline] == [48, 79, 79]  # the same lines once; the leaky one new
    assert {f["rule"] for f in json.loads(files["findings.json"])} >= {"GF405"}
    everything = b"".join(files.values()) + gzip.decompress(files["nvidia-bug-report.log.gz"])
    assert b"Zx9-s3cr3t" not in everything and b"hf_abcdefghijklmnop" not in everything
    assert b"HF_TOKEN=***" in gzip.decompress(files["nvidia-bug-report.log.gz"])


def test_bundle_refuses_a_host_without_runs_or_a_bad_name(tmp_path: Path) -> None:
    _save(RunStore(tmp_path / "runs"), "xid", "2026-11-29T12:00:00Z")
    other = subprocess.run([sys.executable, "-m", "gpufleet", "rma-bundle", "../etc", "--store",
                            str(tmp_path / "runs"), "-o", str(tmp_path / "x.tar.gz")],
                           capture_output=True, text=True, timeout=60, check=False)
    assert other.returncode == 2 and "is not a host name" in other.stderr
    assert not (tmp_path / "x.tar.gz").exists()
    bad = tmp_path / "not-gzip"
    bad.write_text("plain")
    proc = _bundle(tmp_path, "--bug-report", str(bad))
    assert proc.returncode == 2 and "not gzip" in proc.stderr
    assert not list(tmp_path.glob(".rma.tar.gz.*"))  # no temporary file left behind
