"""Reference tables the rules judge against. Every row names its source (see REFERENCE.md).

Update these tables when NVIDIA publishes a new CUDA release, driver branch or security bulletin;
the rule ids that use them do not change meaning.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date

# --------------------------------------------------------------------------- CUDA -> driver
# Source: CUDA Toolkit release notes, Table 2 ("CUDA Toolkit and Minimum Required Driver Version
# for CUDA Minor Version Compatibility") and Table 3 (toolkit driver versions), Linux x86_64.
CUDA_SOURCE = "CUDA Toolkit release notes, Tables 2-3 (Linux x86_64)"

# Full-feature minimum driver per CUDA runtime release ("major.minor" -> driver).
CUDA_MIN_DRIVER: Mapping[str, str] = {
    "11.0": "450.51.06",
    "11.1": "455.23",
    "11.2": "460.27.03",
    "11.3": "465.19.01",
    "11.4": "470.42.01",
    "11.5": "495.29.05",
    "11.6": "510.39.01",
    "11.7": "515.43.04",
    "11.8": "520.61.05",
    "12.0": "525.60.13",
    "12.1": "530.30.02",
    "12.2": "535.54.03",
    "12.3": "545.23.06",
    "12.4": "550.54.14",
    "12.5": "555.42.02",
    "12.6": "560.28.03",
    # There is no CUDA 12.7.
    "12.8": "570.26",
    "12.9": "575.51.03",
    "13.0": "580.65.06",
    "13.1": "590.44.01",
    "13.2": "595.45.04",
}

# Minor-version compatibility: any runtime of a CUDA major runs (with limited features: PTX newer
# than the driver cannot JIT) on a driver at or above this floor.
CUDA_MINOR_COMPAT_FLOOR: Mapping[int, str] = {
    11: "450.80.02",
    12: "525.60.13",
    13: "580.0",
}

# Forward compatibility (cuda-compat-* packages) lets a newer CUDA run on an older driver, but only
# on data-center GPUs. Matched against the nvidia-smi product name.
DATACENTER_GPU_MARKERS: tuple[str, ...] = (
    "A100", "A30", "A40", "A10", "A16", "A2 ", "H100", "H200", "H20", "H800", "A800",
    "B100", "B200", "B300", "GB200", "GB300", "L40", "L4", "T4", "V100",
)

# --------------------------------------------------------------------------- driver branches
# Source: NVIDIA data-center "supported drivers" / driver lifecycle pages (REFERENCE.md).
DRIVER_BRANCH_SOURCE = "NVIDIA data-center driver lifecycle (supported drivers pages)"


@dataclass(frozen=True)
class Branch:
    kind: str  # "LTSB" | "PB" | "NFB"
    eol: date


DRIVER_BRANCH_EOL: Mapping[int, Branch] = {
    535: Branch("LTSB", date(2026, 6, 30)),
    580: Branch("LTSB", date(2028, 6, 30)),
    595: Branch("PB", date(2027, 3, 31)),
    610: Branch("NFB", date(2026, 8, 31)),
    620: Branch("LTSB", date(2029, 9, 30)),
}
# R470 .. R575 are past end of life; anything older than the oldest branch in this table too.
DRIVER_BRANCHES_PAST_EOL_BELOW = 580  # branches < 580 that are not in the table above
# Warn this many days before a branch reaches end of life (info finding).
DRIVER_EOL_NOTICE_DAYS = 90

# Container toolkit, driver, runc and Docker security floors: security_floors.yaml (security.py).

# XIDs: NVIDIA's Xid catalog and the driver's recovery action live in rules/xid.py and
# rules/xid_catalog.json.

# --------------------------------------------------------------------------- clock events
# The reasons that are findings (GF411), by the names probes/gpus.py THROTTLE_BITS decodes the
# NVML mask into; the benign ones (idle, application clocks, sync boost, …) are not.
THROTTLE_BAD: frozenset[str] = frozenset(
    {"hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}
)

# --------------------------------------------------------------------------- performance
# Fleet outliers: below median - MAD_K * 1.4826 * MAD and at least OUTLIER_MIN_DROP below median.
MAD_K = 3.0
OUTLIER_MIN_DROP = 0.10
OUTLIER_MIN_SAMPLES = 3
