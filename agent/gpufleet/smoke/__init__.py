"""The DDP/NCCL smoke test: remote/ runs on the host (shipped as one zip, bundle.py) under torchrun
or its own launcher; runner.py drives it, levels.py says what each level means.

Importing this package never imports torch: only the shipped package does, on the host.
"""

from gpufleet.smoke.runner import SmokeOptions, run_multinode, run_smoke

__all__ = ["SmokeOptions", "run_multinode", "run_smoke"]
