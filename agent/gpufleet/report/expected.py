"""Measured against expected (hosts.<name>.expectations) for the table and Markdown renderers.

Only lines with a measured value are shown (after a smoke run); at --level facts the JSON keeps
the expectations and the text formats stay short.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpufleet.model import fmt_bytes

HEADER = ("host", "measured", "value", "expected", "floor", "verdict")


def label(e: Mapping[str, Any]) -> str:
    """'GPU 0 matmul bf16', 'allreduce_busbw @ 4 GiB', 'GPU 3 p2p from GPU 5': one line's name in
    every format."""
    name = str(e.get("metric", "?")).removesuffix("_gbps").removesuffix("_tflops")
    if e.get("dtype"):
        name += f" {e['dtype']}"
    if isinstance(e.get("bytes"), int) and e["bytes"] > 0:
        name += f" @ {fmt_bytes(e['bytes'])}"
    if e.get("gpu") is not None:
        name = f"GPU {e['gpu']} {name}"
    if e.get("peer") is not None:  # p2p: the pair the line measured (the reading GPU first)
        name += f" from GPU {e['peer']}"
    return name


def rows(doc: Mapping[str, Any]) -> list[tuple[str, str, str, str, str, str]]:
    out = []
    for host in sorted(doc.get("hosts") or {}):
        for e in doc["hosts"][host].get("expectations") or ():
            got = e.get("measured")
            if got is None:
                continue
            unit = e.get("unit", "")
            got, exp, floor = float(got), float(e["expected"]), float(e["floor"])
            verdict = "ok" if got >= floor else f"below floor ({100 * got / exp:.0f}%)"
            out.append((host, label(e), f"{got:.1f} {unit}", f"{exp:.1f}", f"{floor:.1f}",
                        verdict))
    return out
