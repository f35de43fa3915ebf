"""Ours within 2 % of nvbandwidth (built from source on the lent H200) for H2D, D2H and HBM, in
the same device session: the committed evidence of two sessions (benchmarks/results/
2026-12-01-nvidia-h200-s3-*: run 1 = smoke_device.py full beside nvbandwidth; run 3 = the branch's
`gpufleet check --level full` then nvbandwidth on the same machine)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufleet.sku.anchors import TOLERANCE, compare, gemm_pairs, parse_nvbandwidth

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
P = "2026-12-01-nvidia-h200-s3"


def load(name: str) -> object:
    return json.loads((RESULTS / f"{P}-{name}").read_text())


@pytest.mark.parametrize(("ours", "lines", "anchor"), [
    ("smoke-full.json", lambda d: d["expectations"], "nvbandwidth.json"),
    ("check-full-1.json", lambda d: next(iter(d["hosts"].values()))["expectations"],
     "nvbandwidth-run3-1.json"),
])
def test_ours_within_two_percent_of_nvbandwidth(ours: str, lines, anchor: str) -> None:
    pairs = compare(lines(load(ours)), parse_nvbandwidth(load(anchor)))
    assert sorted(p.metric for p in pairs) == ["d2h_gbps", "h2d_gbps", "hbm_gbps"]
    off = [(p.metric, round(p.ours, 1), round(p.anchor, 1)) for p in pairs if not p.within]
    assert off == [], f"more than {TOLERANCE:.0%} from the anchor"


def test_our_gemm_within_two_percent_of_a_plain_torch_gemm_per_dtype() -> None:
    """benchmarks/gemm_anchor.py on the lent H200: 9 interleaved rounds, medians compared."""
    pairs = gemm_pairs(load("gemm-anchor.json"))
    assert [p.metric for p in pairs] == [f"matmul_tflops.{d}"
                                         for d in ("bf16", "fp16", "tf32", "fp32", "fp8")]
    off = [(p.metric, round(p.ours, 1), round(p.anchor, 1)) for p in pairs if not p.within]
    assert off == [], f"more than {TOLERANCE:.0%} from the anchor"


def test_gemm_rounds_without_numbers_are_no_anchor() -> None:
    rounds = [{"bf16_ours": 700.0, "bf16_anchor": "nan"}, {"fp16_ours": 1.0}, "x",
              {"fp32_ours": 50.0, "fp32_anchor": 60.0}]
    [pair] = gemm_pairs({"rounds": rounds})
    assert (pair.metric, pair.within) == ("matmul_tflops.fp32", False)
    assert gemm_pairs(["not", "a", "result"]) == []


def test_a_failed_or_garbled_testcase_is_no_anchor() -> None:
    doc = {"nvbandwidth": {"testcases": [
        {"name": "device_local_copy", "status": "Waived", "bandwidth_matrix": [["2094.08"]]},
        {"name": "host_to_device_memcpy_ce", "status": "Passed",
         "bandwidth_matrix": [["N/A", "nan", "55.3"]]},
        {"name": "device_to_host_memcpy_ce", "status": "Passed", "bandwidth_matrix": "x"}]}}
    assert parse_nvbandwidth(doc) == {"host_to_device_memcpy_ce": {2: 55.3}}
    assert parse_nvbandwidth(["not", "a", "report"]) == {}
    lines = [{"metric": "h2d_gbps", "gpu": 2, "measured": 50.0},
             {"metric": "hbm_gbps", "gpu": 0, "measured": 2100.0}]
    [pair] = compare(lines, parse_nvbandwidth(doc))
    assert (pair.metric, pair.gpu, pair.within) == ("h2d_gbps", 2, False)
