"""How to time small all-reduces from torch: harness variants side by side (torchrun, NCCL).

    torchrun --standalone --nproc_per_node=2 benchmarks/smoke_bw_probe.py

Prints busbw per size for: a CUDA graph of N all-reduces (N=100 and N=20), the same after a
matmul burst (clocks up), and a plain launch loop. Compare with REFERENCE.md's nccl-tests figures;
run it under different NCCL/torch environments to see what the harness costs.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist

MIB = 1 << 20
SIZES = [1 * MIB, 4 * MIB, 16 * MIB, 64 * MIB, 256 * MIB]


def timed(fn, iters: int, pre=None) -> float:
    best = None
    for rep in range(4):
        dist.all_reduce(torch.zeros(1, device="cuda"))
        if pre is not None:
            pre()  # queued ahead of the timed region, so the GPU is busy (clocked up) into it
        else:
            torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        s = e0.elapsed_time(e1) / 1e3 / iters
        if rep:
            best = s if best is None else min(best, s)
    t = torch.tensor([best], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t)


def main() -> int:
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    n = dist.get_world_size()
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    rows = []
    for size in SIZES:
        t = torch.zeros(size // 4, device="cuda")
        for _ in range(5):
            dist.all_reduce(t)
        res = {}
        for iters in (100, 20):
            g = torch.cuda.CUDAGraph()
            torch.cuda.synchronize()
            with torch.cuda.graph(g):
                for _ in range(iters):
                    dist.all_reduce(t)
            res[f"graph{iters}"] = timed(g.replay, iters)
            if iters == 100:
                res["graph100-hot"] = timed(g.replay, iters,
                                            pre=lambda: [a @ a for _ in range(5)])
            del g

        def loop(t: torch.Tensor = t) -> None:
            for _ in range(100):
                dist.all_reduce(t)

        res["loop100"] = timed(loop, 100)
        rows.append((size, res))
        del t
    if rank == 0:
        env = " ".join(
            f"{k}={v}"
            for k, v in sorted(os.environ.items())
            if k.startswith(("NCCL_GRAPH", "TORCH_FR", "TORCH_NCCL"))
        )
        print(f"## env: {env or '(defaults)'}")
        for size, res in rows:
            cells = "  ".join(
                f"{k} {size / s / 1e9 * 2 * (n - 1) / n:6.1f}" for k, s in res.items()
            )
            print(f"{size >> 20:>4} MiB  {cells}")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
