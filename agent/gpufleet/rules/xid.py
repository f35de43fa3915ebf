"""What an Xid asks of the node: NVIDIA's Xid catalog (data: xid_catalog.json) and the driver's
own GPU recovery action (`nvidia-smi -q` "GPU Recovery Action", NVML/DCGM field 1523).

The driver's recovery action is the primary verdict where the driver reports one: it knows the
GPU's state now, after whatever reset already happened. The catalog's immediate bucket is the
fallback (an older driver, or a GPU that fell off the bus and reports nothing). `Verdict` says
which of the two decided, so every finding can name its source.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Literal

Need = Literal["none", "app", "reset", "reboot", "inspect", "unknown"]

CATALOG_FILE = "xid_catalog.json"
# An Xid older than this is no longer current unless its effect lasts until a reset (LASTING).
XID_WINDOW_HOURS = 24
RECOVERY_SOURCE = ("https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/"
                   "error-recovery-and-response-flags.html (NVML_GPU_RECOVERY_ACTION_*)")


@dataclass(frozen=True)
class XidInfo:
    xid: int
    mnemonic: str
    description: str
    immediate: str | None  # NVIDIA's "Resolution Bucket (Immediate Action)"; None: not given
    investigatory: str | None
    source: str  # a URL or repo@commit:path (the catalog file's "sources" table)


# NVIDIA's immediate bucket -> what it asks of the node, and why we read it so. The bucket names
# are NVIDIA's (catalog page, "Resolution Buckets"); the mapping onto reset/reboot is ours.
BUCKET_NEED: Mapping[str, Need] = {
    "IGNORE": "none",
    "XID_154": "none",  # informational: the recovery action it announces is read directly
    "RESTART_APP": "app",  # the application's fault; escalation catches a GPU that repeats it
    "WORKFLOW_XID_13": "app",
    "WORKFLOW_XID_31": "app",
    "WORKFLOW_XID_45": "app",  # follows another Xid (e.g. 48), which carries the verdict
    "RESET_GPU": "reset",
    "WORKFLOW_XID_48": "reset",  # DBE: the memory error workflow ends in a GPU reset
    "WORKFLOW_NVLINK_ERR": "reset",  # Xid 74: reset the GPU, then look at the link
    "WORKFLOW_NVLINK5_ERR": "reset",  # Xid 144-150: per-unit decode; a reset covers the fatal ones
    "RESTART_BM": "reboot",  # bare metal: reboot the node
    "RESTART_VM": "reboot",
    "CHECK_MECHANICALS": "inspect",  # Xid 54: auxiliary power not connected
    "CONTACT_SUPPORT": "inspect",  # only "Unused" codes have it as their immediate bucket
    "UPDATE_SWFW": "inspect",
    "CHECK_UVM": "inspect",
}

# The driver's recovery action (probes/recovery.py normalises nvidia-smi's text to these).
RECOVERY_NEED: Mapping[str, Need] = {
    "none": "none", "gpu_reset": "reset", "drain_and_reset": "reset",
    "drain_p2p": "inspect", "node_reboot": "reboot",
}  # fmt: skip

# What each need means for the node: severity of an Xid that asks for it, and the fix.
NEED_SEVERITY: Mapping[Need, Literal["error", "warning", "info"]] = {
    "none": "info", "app": "info", "reset": "error", "reboot": "error", "inspect": "warning",
    "unknown": "warning",
}  # fmt: skip
NEED_FIX: Mapping[Need, str] = {
    "none": "nothing to do",
    "app": "restart the application; act only if it repeats on this GPU",
    "reset": "drain the node and reset the GPU: `ansible-playbook "
             "gpufleet.gpu.remediate_gpu_reset -l NODE -e remediate_gpu=GPU` (checks it is "
             "idle, then `nvidia-smi -r -i GPU`)",
    "reboot": "drain the node and reboot it: `ansible-playbook gpufleet.gpu.remediate_reboot "
              "-l NODE` (checks no GPU process runs, then proves every GPU came back)",
    "inspect": "drain the node and inspect it; collect `nvidia-bug-report.sh` for NVIDIA",
    "unknown": "look the code up in NVIDIA's Xid catalog",
}
# A fault whose effect lasts until the GPU or node is reset: current whatever its age while this
# boot's log holds it. The driver's recovery action reading None does not clear it (older drivers
# print None, or nothing, for a GPU that still needs the reset); a boot does (rules/faults.py).
LASTING: frozenset[Need] = frozenset({"reset", "reboot"})
# The line's own reset flag: NVIDIA's Xid 94/95 lines end "RST: No, D-RST: No" (example in
# https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/index.html); "Yes" in either asks for
# a GPU reset (D-RST: drain, then reset).
LINE_RESET_SOURCE = "https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/index.html (RST/D-RST)"


@dataclass(frozen=True)
class Verdict:
    need: Need
    decided_by: Literal["driver recovery action", "NVIDIA Xid catalog", "the Xid's own line"]
    source: str
    bucket: str | None = None  # the catalog bucket or the driver's recovery action

    @property
    def severity(self) -> Literal["error", "warning", "info"]:
        return NEED_SEVERITY[self.need]


@cache
def catalog() -> Mapping[int, XidInfo]:
    """The Xid catalog, by code (read once from the package's data file)."""
    doc = json.loads(resources.files("gpufleet.rules").joinpath(CATALOG_FILE).read_text())
    sources: Mapping[str, str] = doc["sources"]
    return {e["xid"]: XidInfo(e["xid"], e["mnemonic"], e["description"], e["immediate"],
                              e["investigatory"], sources[e["source"]])
            for e in doc["xids"]}


def verdict(xid: int, recovery: str | None = None) -> Verdict:
    """What `xid` asks of the node: the driver's recovery action when it reports one, else the
    catalog's immediate bucket (a code the catalog lacks: "unknown")."""
    if recovery is not None:
        return Verdict(RECOVERY_NEED.get(recovery, "unknown"), "driver recovery action",
                       RECOVERY_SOURCE, recovery)
    info = catalog().get(xid)
    if info is None:
        return Verdict("unknown", "NVIDIA Xid catalog",
                       "not in NVIDIA's Xid catalog (xid_catalog.json)")
    need = BUCKET_NEED.get(info.immediate or "", "unknown")
    return Verdict(need, "NVIDIA Xid catalog", info.source, info.immediate)
