"""The DDP/NCCL smoke test: smoke_ddp.py runs on the host under torchrun; runner.py drives it.

Importing this package never imports torch: only the shipped script does, on the host.
"""

from gpufleet.smoke.runner import SmokeOptions, run_multinode, run_smoke

__all__ = ["SmokeOptions", "run_multinode", "run_smoke"]
