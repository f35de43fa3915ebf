"""GF415: nvidia-smi hung on the host (a wedged GPU or driver), from the facts alone.

The probe kills nvidia-smi after its tool timeout and records "nvidia-smi hung (no answer in N s)"
(probes/gpus.py); NVML answering nothing while the driver is loaded is what a GPU that fell off
the bus or a stuck driver looks like, so the host is drain-worthy: an error with its own id, not
only "fact not collected" (GF010). The smoke test does not start on such a host (runner.py).
"""

from __future__ import annotations

from collections.abc import Iterator

from gpufleet.model import Finding
from gpufleet.rules.base import Ctx, finding

# The ids this module emits (tests/unit/test_rules_plumbing.py holds it to that).
RULES: tuple[str, ...] = ("GF415",)
HUNG = "nvidia-smi hung"


def check(ctx: Ctx) -> Iterator[Finding]:
    for h, f in ctx.with_facts():
        err = f.errors.get("nvidia_smi") or ""
        if err.startswith(HUNG):
            yield finding("GF415", [h.name], f"{h.name}: {err}: the GPU or driver is wedged",
                          {"error": err, "pci_gpus": len(f.pci_gpus or ())})
