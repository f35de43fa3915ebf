"""The driver's GPU recovery action per GPU, from the `nvidia-smi -q` text the gpus family reads.

`GPU Recovery Action : None` sits in each GPU block of `nvidia-smi -q` on drivers that have NVML's
recovery-action field (captured: 580.159.04 on H200 in tests/fixtures/h200x2-2026-11-30, and
third-party captures of 570/575 drivers); older drivers print no such line, and the fact is None.
Values and their meaning: NVIDIA, docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/
error-recovery-and-response-flags.html (rules/xid.py RECOVERY_WORDS has the mapping).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gpufleet.model import GpuRecovery
from gpufleet.probes.gpus import clean, parse_nvidia_smi_q
from gpufleet.probes.sections import Family, ProbeOutput

KEY = "GPU Recovery Action"

# `nvidia-smi -q` "GPU Recovery Action" text -> the NVML enum it prints. Drivers print the short
# words (captures: "None", "Reset"; 575.57.08 and 580.159.04 print "None"); some print the enum
# name ("GPU_RESET", a GB200 capture). Source of the values: the NVIDIA page above and the NVML enum
# nvmlDeviceGpuRecoveryAction_t (0 NONE, 1 GPU_RESET, 2 NODE_REBOOT, 3 DRAIN_P2P,
# 4 DRAIN_AND_RESET); "Reboot", "Drain P2P", "Drain and Reset" are inferred from the enum's
# descriptions, not captured.
RECOVERY_WORDS: Mapping[str, str] = {
    "none": "none", "no action needed": "none",
    "reset": "gpu_reset", "gpu_reset": "gpu_reset", "gpu reset": "gpu_reset",
    "reboot": "node_reboot", "node_reboot": "node_reboot", "node reboot": "node_reboot",
    "drain p2p": "drain_p2p", "drain_p2p": "drain_p2p",
    "drain and reset": "drain_and_reset", "drain_and_reset": "drain_and_reset",
}  # fmt: skip


def recovery_action(text: str | None) -> str | None:
    """nvidia-smi's "GPU Recovery Action" value -> the NVML name, lower case (unknown: as given)."""
    if text is None:
        return None
    word = " ".join(text.strip().lower().split())
    return RECOVERY_WORDS.get(word, re.sub(r"[^a-z0-9]+", "_", word).strip("_")) or None


def parse_gpu_recovery(text: str) -> tuple[GpuRecovery, ...] | None:
    """`nvidia-smi -q` -> one GpuRecovery per GPU block that has the line; None when none has."""
    found = []
    for block in parse_nvidia_smi_q(text).gpus:
        raw = clean(block.get(KEY))
        action = recovery_action(raw)
        if raw is not None and action is not None:
            # The text came from the host: keep it short and printable.
            found.append(GpuRecovery(bus_id=block["Bus Id"], action=action[:40],
                                     raw="".join(c for c in raw if c.isprintable())[:80]))
    return tuple(found) or None


def build_gpu_recovery(out: ProbeOutput) -> dict[str, Any]:
    text = out.ok("nvidia_smi_q")
    return {"gpu_recovery": None if text is None else out.safe("gpu_recovery", None,
                                                              parse_gpu_recovery, text)}


GPU_RECOVERY = Family("gpu_recovery", sections=("nvidia_smi_q",), errors=("gpu_recovery",),
                      fields=("gpu_recovery",), build=build_gpu_recovery)
