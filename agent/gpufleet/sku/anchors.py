"""Ours against the anchors: the smoke's H2D/D2H/HBM numbers against nvbandwidth's on the same GPU.

nvbandwidth (NVIDIA/nvbandwidth, built from source on the lent H200: benchmarks/README.md) is the
reference NVIDIA's own health checks and Azure's floors use for copy bandwidth. Its `-j` output
(v0.8: {"nvbandwidth": {"testcases": [{"name", "status", "bandwidth_matrix", "sum"}]}}) is parsed
here, never trusted: a testcase that did not pass or a matrix cell that is not a number is left
out. `compare` pairs each of our expectation lines with the testcase that measures the same copy,
counted the same way (host_to_device_memcpy_ce / device_to_host_memcpy_ce: one GPU's column;
device_local_copy: bytes counted once, as our membw check counts them) and says whether ours is
within TOLERANCE of it. The GEMM anchor is a plain-torch GEMM per dtype written independently
of the smoke (benchmarks/gemm_anchor.py): on the lent H200 the same 8192^3 GEMM moves by more
than 10 % with the order and length of the runs before it (the GPU's power state:
benchmarks/results/2026-12-01-nvidia-h200-s3-gemm-seconds.json), so ours and the anchor alternate
in swapped order every round and `gemm_pairs` compares the medians of the rounds.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

TOLERANCE = 0.02  # issue 25's acceptance: ours within 2 % of the anchor

# our metric -> nvbandwidth testcase (v0.8 names, NVIDIA/nvbandwidth@66746a3:testcase.h)
TESTCASES = {"h2d_gbps": "host_to_device_memcpy_ce", "d2h_gbps": "device_to_host_memcpy_ce",
             "hbm_gbps": "device_local_copy"}


@dataclass(frozen=True)
class Pair:
    metric: str
    gpu: int
    ours: float
    anchor: float
    testcase: str

    @property
    def ratio(self) -> float:
        return self.ours / self.anchor

    @property
    def within(self) -> bool:
        return abs(self.ratio - 1) <= TOLERANCE


def _cell(raw: Any) -> float | None:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) and value > 0 else None


def parse_nvbandwidth(doc: Any) -> dict[str, dict[int, float]]:
    """testcase -> GPU index -> GB/s from `nvbandwidth -j`; for the host<->device and local
    copies the matrix has one row and a column per GPU."""
    cases = ((doc or {}).get("nvbandwidth") or {}).get("testcases") if isinstance(doc, Mapping) \
        else None
    out: dict[str, dict[int, float]] = {}
    for case in cases if isinstance(cases, list) else ():
        if not isinstance(case, Mapping) or case.get("status") != "Passed":
            continue
        matrix = case.get("bandwidth_matrix")
        row = matrix[0] if isinstance(matrix, list) and matrix and isinstance(matrix[0], list) \
            else []
        cols = {i: v for i, raw in enumerate(row) if (v := _cell(raw)) is not None}
        if cols:
            out[str(case.get("name"))] = cols
    return out


def compare(expectations: Any, nvbandwidth: Mapping[str, Mapping[int, float]]) -> list[Pair]:
    """Each measured h2d/d2h/hbm line of hosts.<name>.expectations beside nvbandwidth's value."""
    pairs: list[Pair] = []
    for e in expectations or ():
        if not isinstance(e, Mapping) or e.get("metric") not in TESTCASES:
            continue
        case = TESTCASES[str(e["metric"])]
        gpu, ours = e.get("gpu"), _cell(e.get("measured"))
        anchor = nvbandwidth.get(case, {}).get(gpu) if isinstance(gpu, int) else None
        if ours is not None and anchor is not None and isinstance(gpu, int):
            pairs.append(Pair(str(e["metric"]), gpu, ours, anchor, case))
    return pairs


def gemm_pairs(doc: Any) -> list[Pair]:
    """benchmarks/gemm_anchor.py's result: per dtype, the median of ours beside the median of
    the plain-torch anchor over the interleaved rounds (metric `matmul_tflops.DTYPE`, GPU 0)."""
    rounds = doc.get("rounds") if isinstance(doc, Mapping) else None
    pairs: list[Pair] = []
    for dtype in ("bf16", "fp16", "tf32", "fp32", "fp8"):
        ours = [v for r in rounds or () if isinstance(r, Mapping)
                and (v := _cell(r.get(f"{dtype}_ours"))) is not None]
        anchor = [v for r in rounds or () if isinstance(r, Mapping)
                  and (v := _cell(r.get(f"{dtype}_anchor"))) is not None]
        if ours and anchor:
            pairs.append(Pair(f"matmul_tflops.{dtype}", 0, statistics.median(ours),
                              statistics.median(anchor), "plain-torch GEMM"))
    return pairs
