"""NVLink error counters per GPU and link: `nvidia-smi nvlink -e` (section nvlink_errors).

Format (a third-party capture of an H100, stas00/ml-engineering@62d4359e:
compute/accelerator/nvidia/debug.md; the same shape as `nvlink -s`, captured here in
tests/fixtures/h200x2-2026-11-30/nvlink-s.txt): a `GPU N: NAME (UUID: …)` line, then per link
`Link K: Replay Errors: N`, `Link K: Recovery Errors: N`, `Link K: CRC Errors: N`. Counters only
mean something as deltas between runs: rules/fabric.py GF459.
"""

from __future__ import annotations

import re
from typing import Any

from gpufleet.model import NvLinkErrorCounts
from gpufleet.probes import gpus
from gpufleet.probes.sections import Family, ProbeOutput

_GPU = re.compile(r"^GPU ([0-9]{1,3}): .{0,120}?(?:\(UUID: (GPU-[0-9a-fA-F-]{1,64})\))?$")
_COUNTER = re.compile(r"^Link ([0-9]{1,3}): (Replay|Recovery|CRC) Errors: ([0-9]{1,20})$")


def parse_nvlink_errors(text: str) -> tuple[NvLinkErrorCounts, ...]:
    """`nvidia-smi nvlink -e` -> the counters per GPU; lines of another shape are skipped."""
    out: list[dict[str, Any]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if m := _GPU.match(line):
            out.append({"gpu": int(m.group(1)), "uuid": m.group(2), "links": {}})
        elif (m := _COUNTER.match(line)) and out:
            link = out[-1]["links"].setdefault(int(m.group(1)), {})
            link[m.group(2).lower()] = int(m.group(3))
    return tuple(NvLinkErrorCounts(**g) for g in out)


def build_nvlink_errors(out: ProbeOutput) -> dict[str, Any]:
    gpus.smi_error(out)  # a failed section is this family's error there, reported once
    text = out.ok("nvlink_errors")
    if text is None:
        return {"nvlink_errors": None}
    return {"nvlink_errors": out.safe("nvlink_errors", None, parse_nvlink_errors, text)}


NVLINK_ERRORS = Family("nvlink_errors", sections=("nvlink_errors",), errors=("nvlink_errors",),
                       fields=("nvlink_errors",), build=build_nvlink_errors, smi="nvlink_errors")
