"""Keep one GPU busy, as a stray process would: the fault injected by smoke_device.py's
hog-* scenarios (another process's matmuls slow a rank's steps; its copies share the GPU's
PCIe link; "mem" holds --fraction of the GPU's memory and computes nothing). Runs until killed
or --seconds pass; prints "ready" once the load runs.

    python3 benchmarks/gpu_hog.py --gpu 1 --mode copy --seconds 120
"""

from __future__ import annotations

import argparse
import sys
import time

import torch


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpu", type=int, required=True)
    ap.add_argument("--mode", choices=("matmul", "copy", "mem"), required=True)
    ap.add_argument("--seconds", type=float, default=300.0)
    ap.add_argument("--fraction", type=float, default=0.8)
    args = ap.parse_args()
    dev = torch.device("cuda", args.gpu)
    torch.cuda.set_device(dev)
    if args.mode == "mem":
        free, _total = torch.cuda.mem_get_info(dev)
        held = torch.empty(int(free * args.fraction), dtype=torch.uint8, device=dev)
        held.fill_(1)

        def work() -> None:
            time.sleep(0.2)
    elif args.mode == "matmul":
        a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
        b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)

        def work() -> None:
            for _ in range(20):
                a @ b
    else:
        host = torch.empty(1 << 30, dtype=torch.uint8, pin_memory=True)
        gpu = torch.empty(1 << 30, dtype=torch.uint8, device=dev)

        def work() -> None:
            gpu.copy_(host, non_blocking=True)
            host.copy_(gpu, non_blocking=True)

    work()
    torch.cuda.synchronize(dev)
    print("ready", flush=True)
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        work()
        torch.cuda.synchronize(dev)
    return 0


if __name__ == "__main__":
    sys.exit(main())
