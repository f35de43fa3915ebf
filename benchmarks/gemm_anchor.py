"""Our GEMM check against a plain-torch GEMM on the same GPU, interleaved (issue 25's anchor).

    python3 benchmarks/gemm_anchor.py OUT.json [ROUNDS]

Ours is the smoke's own code path (gpufleet.smoke.remote.gemm: its operands and `_rate`, at the
SECONDS it ships with). The anchor is written here independently: preallocated N x N operands,
`torch.matmul(a, b, out=c)` (fp8: `torch._scaled_mm` with a column-major second operand), the
same number of products ours ran, timed with CUDA events. A GPU's clock follows its power state,
which moves by more than 10 % with the length and order of the runs before it
(benchmarks/results/2026-12-01-nvidia-h200-s3-gemm-seconds.json): so the two alternate, in
swapped order every round, and the medians of the per-round values are compared.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "agent"))

from gpufleet.smoke.remote import gemm


def anchor_step(dev: torch.device, dtype: str):
    n = gemm.N
    base = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(dtype, torch.float32)
    a = torch.randn(n, n, device=dev, dtype=base)
    b = torch.randn(n, n, device=dev, dtype=base)
    if dtype == "fp8":
        scale = torch.ones((), device=dev)
        a8 = a.to(torch.float8_e4m3fn)
        b8 = b.t().contiguous().to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm wants
        return lambda: torch._scaled_mm(a8, b8, scale_a=scale, scale_b=scale,
                                        out_dtype=torch.bfloat16)
    c = torch.empty(n, n, device=dev, dtype=base)
    return lambda: torch.matmul(a, b, out=c)


def anchor_rate(step, reps: int) -> float:
    for _ in range(2):
        step()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(reps):
        step()
    e1.record()
    e1.synchronize()
    return 2.0 * gemm.N ** 3 * reps / (e0.elapsed_time(e1) / 1e3) / 1e12


def main() -> None:
    out_path, rounds = Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 9
    dev = torch.device("cuda")
    doc: dict = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(dev),
                 "n": gemm.N, "seconds": gemm.SECONDS, "rounds": [], "median": {}}
    t0 = time.perf_counter()
    reps = {}  # the anchor runs as many products as ours chose in a first, unrecorded pass
    for d in gemm.DTYPES:
        torch.backends.cuda.matmul.allow_tf32 = d == "tf32"
        _, reps[d], _ = gemm._rate(torch, gemm._operands(torch, dev, d))
    torch.cuda.empty_cache()
    doc["reps"] = reps
    for r in range(rounds):
        row = {}
        for d in gemm.DTYPES:
            torch.backends.cuda.matmul.allow_tf32 = d == "tf32"
            ours_step, mine = gemm._operands(torch, dev, d), anchor_step(dev, d)
            for who in ("ours", "anchor") if r % 2 == 0 else ("anchor", "ours"):
                if who == "ours":
                    row[d + "_ours"], row[d + "_reps"], _ = gemm._rate(torch, ours_step)
                else:
                    row[d + "_anchor"] = anchor_rate(mine, reps[d])
            del ours_step, mine
            torch.cuda.empty_cache()
        doc["rounds"].append(row)
        print(r, {k: round(v, 1) for k, v in row.items() if not k.endswith("_reps")}, flush=True)
    for d in gemm.DTYPES:
        ours = statistics.median(x[d + "_ours"] for x in doc["rounds"])
        anchor = statistics.median(x[d + "_anchor"] for x in doc["rounds"])
        doc["median"][d] = {"ours": ours, "anchor": anchor, "ratio": ours / anchor}
    doc["wall_s"] = time.perf_counter() - t0
    print({d: round(v["ratio"], 4) for d, v in doc["median"].items()}, flush=True)
    out_path.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
