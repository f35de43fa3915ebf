"""gpufleet_perf_floors: per-group (or per-host) floors over the SKU catalog's.

The variable is a mapping in group_vars or host_vars, metric key -> floor in the metric's unit:

    gpufleet_perf_floors:
      matmul_tflops.bf16: 600   # TFLOP/s per GPU (matmul_tflops alone: every dtype)
      hbm_gbps: 1900            # GB/s per GPU

Precedence is Ansible's own for one variable: a host's host_vars value replaces its groups'
(hash_behaviour=replace), a child group's replaces its parent's; a key the winning mapping lacks
falls back to the catalog's floor. An unknown key or a value that is not a positive number is an
inventory error naming the host, the key and what is allowed: a misspelt override that silently
judged nothing would be worse than none.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

DTYPES = ("bf16", "fp16", "tf32", "fp32", "fp8", "fp64")
# The metrics whose floor judges a finding on a lone host (GF540 GEMM, GF541 HBM, GF544 P2P copy,
# GF545 NIC rate). allreduce busbw has its own variable (gpufleet_min_busbw_gbps, GF501) and the
# host<->device copy is judged inside the smoke run (GF530): one home each.
METRICS = ("matmul_tflops", "hbm_gbps", "p2p_gbps", "nic_gbps")
KEYS: tuple[str, ...] = METRICS + tuple(f"matmul_tflops.{d}" for d in DTYPES)


def perf_floors(value: Any) -> dict[str, float]:
    """The validated mapping; ValueError says what is wrong (the caller names host and variable)."""
    if not isinstance(value, Mapping):
        # ansible-core tags what it parsed (_AnsibleTaggedList): name the YAML kind instead
        kind = "a list" if isinstance(value, (list, tuple)) else repr(value)
        raise ValueError(f"must be a mapping of metric to floor, not {kind}")
    out: dict[str, float] = {}
    for key, raw in value.items():
        if key not in KEYS:
            raise ValueError(f"unknown metric {key!r} (known: {', '.join(KEYS)})")
        if isinstance(raw, bool):
            raise ValueError(f"{key}={raw!r} is not a positive number")
        try:
            floor = float(raw)
        except (TypeError, ValueError):
            raise ValueError(f"{key}={raw!r} is not a positive number") from None
        if not math.isfinite(floor) or floor <= 0:
            raise ValueError(f"{key}={raw!r} is not a positive number")
        out[str(key)] = floor
    return out


def override_key(metric: str, dtype: str | None,
                 floors: Mapping[str, float] | None) -> str | None:
    """The key of `floors` that sets this line's floor: the dtype's own before the metric's."""
    for key in ((f"{metric}.{dtype}",) if dtype else ()) + (metric,):
        if floors and key in floors:
            return key
    return None
