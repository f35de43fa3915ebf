"""The desired-state inventory variables: the one table every reader derives from.

The roles write these variables' state onto a host; the agent checks it. `inventory.py` builds
`Expectations` from this table, node-check's expectations file and the gpu_facts action plugin
accept exactly these names, and a test proves that the healthcheck role's list
(`_gpufleet_healthcheck_expect_keys`) and the roles' `meta/argument_specs.yml` agree with it
(YAML cannot import Python). How to add one: docs/desired-state.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["text", "int", "number", "flag", "workspaces", "floors"]

AGENT = "agent"  # the scope of a variable only gpufleet reads (no role declares it)


@dataclass(frozen=True)
class Var:
    """One inventory variable: its name, the `Expectations` field it fills, how its value is
    read, and who reads it (role names whose argument_specs declare it, and/or "agent")."""

    name: str
    field: str
    kind: Kind
    scope: tuple[str, ...]
    doc: str


VARS: tuple[Var, ...] = (
    Var("nvidia_driver_version", "driver_version", "text", ("nvidia_driver", AGENT),
        "exact driver version (e.g. 580.65.06); wins over the branch"),
    Var("nvidia_driver_branch", "driver_branch", "text", ("nvidia_driver", AGENT),
        "driver branch (e.g. 580), compared as text"),
    Var("nvidia_driver_kernel_modules", "kernel_modules", "text", ("nvidia_driver", AGENT),
        "kernel module flavour: open, proprietary or auto"),
    Var("nvidia_container_toolkit_version", "toolkit_version", "text",
        ("nvidia_container_toolkit", AGENT), "NVIDIA Container Toolkit version"),
    Var("container_runtime_engine", "container_engine", "text", ("container_runtime", AGENT),
        "container engine: docker or containerd"),
    Var("pytorch_image", "pytorch_image", "text", ("pytorch_image", "pytorch_workspace", AGENT),
        "the PyTorch image as repository:tag"),
    Var("pytorch_image_digest", "pytorch_image_digest", "text",
        ("pytorch_image", "pytorch_workspace", AGENT), "the digest (sha256:…) it must resolve to"),
    Var("pytorch_workspaces", "workspaces", "workspaces", ("pytorch_workspace", AGENT),
        "workspace containers; the agent reads only each item's name, state and image_digest"),
    Var("gpufleet_expected_gpu_count", "gpu_count", "int", (AGENT,),
        "GPUs the host must show"),
    Var("gpufleet_smoke_runtime", "smoke_runtime", "text", (AGENT,),
        "where the smoke test runs: docker or host (unset: auto)"),
    Var("gpufleet_smoke_python", "smoke_python", "text", (AGENT,),
        "the host python for the smoke test (default python3)"),
    Var("gpufleet_min_busbw_gbps", "min_busbw_gbps", "number", (AGENT,),
        "floor for the single-host all-reduce bus bandwidth, GB/s"),
    Var("gpufleet_mig_expected", "mig_expected", "flag", (AGENT,),
        "MIG mode is meant to be on (default false)"),
    Var("gpufleet_smoke_address", "smoke_address", "text", (AGENT,),
        "the host's multinode rendezvous address"),
    Var("gpufleet_smoke_interface", "smoke_interface", "text", (AGENT,),
        "NCCL/GLOO socket interface for multinode smoke"),
    Var("gpufleet_domain", "domain", "text", (AGENT,),
        "rack or pod: localize's first-level groups"),
    Var("gpufleet_multinode_min_busbw_gbps", "multinode_min_busbw_gbps", "number", (AGENT,),
        "floor for the multinode all-reduce bus bandwidth, GB/s"),
    Var("gpufleet_slurm_node", "slurm_node", "text", (AGENT,),
        "the host's Slurm NodeName, for scontrol drain lines"),
    Var("gpufleet_xid_repeat_limit", "xid_repeat_limit", "int", (AGENT,),
        "GF430: the same Xid on one GPU this many times within 24 h escalates (default 5)"),
    Var("gpufleet_xid13_31_limit", "xid13_31_limit", "int", (AGENT,),
        "GF431: Xid 13 on one GPC/TPC or Xid 31 on one GPU this many times in 24 h (default 2)"),
    Var("gpufleet_xid_reboot_limit", "xid_reboot_limit", "int", (AGENT,),
        "GF432: reboots within 7 days that may not fix a GPU before it goes to RMA (default 2)"),
    Var("gpufleet_xid74_link_limit", "xid74_link_limit", "int", (AGENT,),
        "GF433: Xid 74 on one NVLink this many times within 24 h sends the GPU to RMA "
        "(default 3)"),
    Var("gpufleet_remediation_limit", "remediation_limit", "int", (AGENT,),
        "GF435: re-tests after a remediation rung within 7 days that send the node to RMA "
        "(default 5)"),
    Var("gpufleet_ib_symbol_errors_per_hour", "ib_symbol_errors_per_hour", "number", (AGENT,),
        "GF456's threshold: RDMA symbol errors per hour between runs (default 120)"),
    Var("gpufleet_ib_flaps_per_day", "ib_flaps_per_day", "number", (AGENT,),
        "GF458's threshold: RoCE link losses per 24 h between runs (default 5)"),
    Var("gpufleet_ib_ber_exponent", "ib_ber_exponent", "int", (AGENT,),
        "GF462's threshold: a port's effective BER must stay below 1E-N (default 12)"),
    Var("gpufleet_perf_floors", "perf_floors", "floors", (AGENT,),
        "floors over the SKU catalog's, by metric (matmul_tflops[.dtype], hbm_gbps, p2p_gbps, "
        "nic_gbps); host vars replace group vars (docs/expectations.md)"),
)

NAMES: frozenset[str] = frozenset(v.name for v in VARS)

# The keys of a pytorch_workspaces item the agent reads. Everything else (jupyter_token, keys,
# volumes…) never leaves the inventory through gpufleet: tokens are secrets.
WORKSPACE_KEYS: tuple[str, ...] = ("name", "state", "image_digest")


def carried(name: str, value: Any) -> Any:
    """`value` of variable `name` reduced to what the agent reads, for passing it on (the
    gpu_facts result, an expectations file): workspace items keep WORKSPACE_KEYS only."""
    if name != "pytorch_workspaces" or not isinstance(value, list):
        return value
    return [{k: item[k] for k in WORKSPACE_KEYS if k in item} if isinstance(item, Mapping)
            else item for item in value]
