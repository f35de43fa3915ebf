"""Plain-torch anchors for the smoke's GEMM and copy numbers (issue 25): no gpufleet code.

Per dtype an 8192^3 product, mean of 20 after 3 warm-ups (REFERENCE.md's method), CUDA events;
a 4 GiB device copy (bytes counted once, as nvbandwidth's device_local_copy); pinned 1 GiB H2D
and D2H copies. Prints one JSON object.

    python3 benchmarks/gemm_anchor.py > results/DATE-MACHINE-anchors-torch.json
"""

from __future__ import annotations

import json
import sys

import torch

N = 8192


def _time(step, reps: int) -> float:
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(reps):
        step()
    e1.record()
    e1.synchronize()
    return e0.elapsed_time(e1) / 1e3


def gemm(dtype: str) -> float:
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    base = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(dtype, torch.float32)
    a = torch.randn(N, N, device="cuda", dtype=base)
    b = torch.randn(N, N, device="cuda", dtype=base)
    if dtype == "fp8":
        one = torch.tensor(1.0, device="cuda")
        a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn).t()

        def step() -> object:
            return torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    else:
        def step() -> object:
            return a @ b
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    return 2.0 * N ** 3 * 20 / _time(step, 20) / 1e12


def main() -> int:
    out: dict[str, object] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                              "method": "8192^3, mean of 20 after 3 warm-ups, CUDA events"}
    out["gemm_tflops"] = {d: round(gemm(d), 1) for d in ("bf16", "fp16", "tf32", "fp32", "fp8")}
    torch.backends.cuda.matmul.allow_tf32 = False
    src = torch.ones(4 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    secs = _time(lambda: dst.copy_(src), 10)
    out["hbm_copy_gbps_one_side"] = round((4 << 30) * 10 / secs / 1e9, 1)
    del src, dst
    host = torch.empty(1 << 30, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dev.copy_(host)
    out["pinned_h2d_gbps"] = round((1 << 30) * 10 / _time(lambda: dev.copy_(host), 10) / 1e9, 2)
    out["pinned_d2h_gbps"] = round((1 << 30) * 10 / _time(lambda: host.copy_(dev), 10) / 1e9, 2)
    json.dump(out, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
