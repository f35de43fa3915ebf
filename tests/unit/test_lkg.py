"""`--save` keeps a healthy run as the host's last known-good, and later runs are judged against
it: `gpufleet history` on a store whose only run is healthy names that run (it said "none in the
store" on the real H200), and GF546 flags a line of hosts.<name>.expectations that fell more than
10 % below the host's own good runs while still above its SKU floor.

The runs: the capture-built 2xH200 fleet, full level, GEMM per dtype and HBM per GPU as the lent
H200 measured them (benchmarks/results/2026-12-01-nvidia-h200-s3-smoke-full.json: bf16 706.9,
fp8 1219.6, HBM 2132.5); the later run has gpu01's GPU 1 HBM at 1850 (-13 %, floor 1771) and fp8
at 1100 (-10 %: inside the margin).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from clirun import Ran
from test_rules_builders import fleet, smoke

from gpufleet.history import RunStore
from gpufleet.model import SmokeCheck
from gpufleet.report import document
from gpufleet.report.pipeline import judge
from gpufleet.rules.lkg import lkg_findings

GEMM = {"bf16": 706.9, "fp16": 657.3, "tf32": 349.0, "fp32": 50.8, "fp8": 1219.6}


def full_run(stamp: str, hbm: dict[int, float], fp8: float = GEMM["fp8"]) -> dict[str, Any]:
    def host_smoke(name: str) -> Any:
        s = smoke(name)
        gemm = {str(r): {"tflops": {**GEMM, "fp8": fp8 if name == "gpu01" and r == 1
                                    else GEMM["fp8"]}} for r in (0, 1)}
        membw = {str(r): {"gbps": hbm.get(r, 2132.5) if name == "gpu01" else 2132.5,
                          "counted": "one side"} for r in (0, 1)}
        return dataclasses.replace(s, level="full", checks=(
            *s.checks, SmokeCheck("gemm", True, "", {"per_rank": gemm}),
            SmokeCheck("membw", True, "", {"per_rank": membw, "judged": False, "per_rank_gbps": {
                k: v["gbps"] for k, v in membw.items()}})))
    base = fleet({h: {"smoke": host_smoke(h)} for h in ("gpu01", "gpu02")},
                 hosts=("gpu01", "gpu02"), with_expect=False)
    r = judge(dataclasses.replace(base, generated_at=stamp, level="full"))
    return json.loads(json.dumps(document(r)))


def test_a_healthy_saved_run_is_the_last_known_good(tmp_path: Path,
                                                    cli: Callable[..., Ran]) -> None:
    store = RunStore(tmp_path / "runs")
    doc = full_run("2026-12-01T19:00:00Z", {})
    assert not [f for f in doc["findings"] if f["severity"] in ("error", "warning")]
    store.save(doc)
    r = cli("history", "--store", str(store.root))
    assert r.returncode == 0, r.stderr
    assert "gpu01: last known-good run 2026-12-01T19:00:00Z (gpufleet-2026-12-01T19" in r.stdout
    assert "gpu01: last known-good run none" not in r.stdout
    assert "  nothing changed since" in r.stdout
    entry = store.entries()[-1]["hosts"]["gpu01"]
    assert entry["measured"]["hbm_gbps gpu1"] == 2132.5, "the index keeps each measured line"
    assert entry["measured"]["matmul_tflops.fp8 gpu0"] == 1219.6


def test_a_drop_against_its_own_past_is_named(tmp_path: Path,
                                              cli: Callable[..., Ran]) -> None:
    store = RunStore(tmp_path / "runs")
    store.save(full_run("2026-12-01T19:00:00Z", {}))
    later = full_run("2026-12-01T20:00:00Z", {1: 1850.0}, fp8=1100.0)
    assert not [f for f in later["findings"] if f["rule"] == "GF541"], "above the SKU floor"
    found = lkg_findings(later, store.entries())
    assert [(f.rule, f.hosts, f.evidence["line"]) for f in found] == [
        ("GF546", ("gpu01",), "hbm_gbps gpu1")]
    ev = found[0].evidence
    assert ev["baseline"] == 2132.5 and ev["measured"] == 1850.0 and ev["floor"] < 1850.0
    assert "hbm_gbps gpu1 1850.0 GB/s is 13% below its own known-good 2132.5" in found[0].message
    assert "nvidia-smi -q -d PERFORMANCE,CLOCK,POWER -i 1" in found[0].remediation
    # as `check --save` saves it: with the findings the store judged (cli/saved.py with_history)
    later["findings"] += [json.loads(json.dumps(dataclasses.asdict(f))) for f in found]
    store.save(later)
    r = cli("history", "--store", str(store.root), "gpu01")
    assert r.returncode == 1, "drift against its own past"
    assert "drift GF546" in r.stdout
    assert "gpu01: last known-good run 2026-12-01T19:00:00Z" in r.stdout, \
        "a run with a warning is not known-good"


def test_a_store_saved_before_the_measured_lines_still_reads(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs")
    store.save(full_run("2026-12-01T19:00:00Z", {}))
    index = json.loads((store.root / "index.json").read_text())
    for h in index["runs"][0]["hosts"].values():
        del h["measured"]
    (store.root / "index.json").write_text(json.dumps(index))
    assert lkg_findings(full_run("2026-12-01T20:00:00Z", {1: 1000.0}), store.entries()) == []


@pytest.mark.parametrize("line", ["allreduce_busbw_gbps @4294967296", "matmul_tflops.bf16 gpu0"])
def test_busbw_and_bf16_matmul_stay_with_gf520_gf521(line: str) -> None:
    from gpufleet.rules.lkg import ELSEWHERE  # noqa: PLC0415

    assert line.startswith(ELSEWHERE)
