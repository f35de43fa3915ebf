"""Per-GPU facts from nvidia-smi (pure parsers) and nvidia-smi failure reasons."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpufleet.model import Gpu
from gpufleet.probes.sections import Family, ProbeOutput

NA = frozenset({"", "N/A", "[N/A]", "[Not Supported]", "Not Supported", "[Unknown Error]",
                "[Insufficient Permissions]", "[GPU requires reset]", "[Not Found]"})

# nvml.h nvmlClocksEventReason* bits (formerly ClocksThrottleReason*).
THROTTLE_BITS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)
# `nvidia-smi -q` "Clocks Event Reasons" labels -> the same names.
_THROTTLE_LABELS = {
    "Idle": "gpu_idle",
    "Applications Clocks Setting": "applications_clocks_setting",
    "SW Power Cap": "sw_power_cap",
    "HW Slowdown": "hw_slowdown",
    "Sync Boost": "sync_boost",
    "SW Thermal Slowdown": "sw_thermal_slowdown",
    "HW Thermal Slowdown": "hw_thermal_slowdown",
    "HW Power Brake Slowdown": "hw_power_brake_slowdown",
    "Display Clock Setting": "display_clock_setting",
}
_NVML_LIB = re.compile(r"NVML library version:\s*(\S+)")
_Q_GPU = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)\s*$")



def decode_throttle_mask(mask: str | int | None) -> tuple[str, ...]:
    """0x...1 -> ("gpu_idle",); unknown bits -> "unknown_0x..."."""
    if mask is None:
        return ()
    try:
        value = mask if isinstance(mask, int) else int(str(mask).strip(), 16)
    except ValueError:
        return ()
    names = [name for bit, name in THROTTLE_BITS if value & bit]
    rest = value & ~sum(bit for bit, _ in THROTTLE_BITS)
    if rest:
        names.append(f"unknown_{rest:#x}")
    return tuple(names)


def clean(raw: str | None) -> str | None:
    if raw is None:
        return None
    raw = raw.strip()
    return None if raw in NA else raw


def to_int(raw: str | None) -> int | None:
    value = clean(raw)
    if value is None:
        return None
    number = value.split()[0].rstrip("x")  # "143771 MiB", "16x"
    try:
        return int(number)
    except ValueError:
        return None


def to_bool(raw: str | None) -> bool | None:
    value = clean(raw)
    if value is None:
        return None
    lowered = value.lower()
    if lowered in {"yes", "enabled", "on", "true", "active"}:
        return True
    if lowered in {"no", "disabled", "off", "false", "not active"}:
        return False
    return None


def parse_csv(text: str, fields: Iterable[str] | None = None) -> list[dict[str, str]]:
    """nvidia-smi --format=csv output -> rows keyed by field name (units stripped from names).

    With `fields`, the text has no header (csv,noheader) and those names are used.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    # Line by line: nvidia-smi never quotes a newline, and one unreadable line (a field over
    # csv's 128 KiB limit, a NUL) must not lose the rows around it.
    rows: list[list[str]] = []
    for line in lines:
        try:
            rows += list(csv.reader(io.StringIO(line), skipinitialspace=True))
        except csv.Error:
            continue
    if not rows:
        return []
    if fields is None:
        header = [re.sub(r"\s*\[.*\]$", "", name.strip()) for name in rows[0]]
        rows = rows[1:]
    else:
        header = list(fields)
    return [dict(zip(header, (cell.strip() for cell in row), strict=False)) for row in rows]


def gpu_from_row(row: Mapping[str, str]) -> Gpu | None:
    index = to_int(row.get("index"))
    if index is None:
        return None
    mask = clean(
        row.get("clocks_event_reasons.active") or row.get("clocks_throttle_reasons.active")
    )
    return Gpu(
        index=index,
        name=clean(row.get("name")),
        uuid=clean(row.get("uuid")),
        bus_id=clean(row.get("pci.bus_id")),
        serial=clean(row.get("serial")),
        memory_total_mib=to_int(row.get("memory.total")),
        vbios=clean(row.get("vbios_version")),
        persistence_mode=to_bool(row.get("persistence_mode")),
        mig_mode=clean(row.get("mig.mode.current")),
        ecc_mode=clean(row.get("ecc.mode.current")),
        ecc_uncorrected_volatile=to_int(row.get("ecc.errors.uncorrected.volatile.total")),
        ecc_uncorrected_aggregate=to_int(row.get("ecc.errors.uncorrected.aggregate.total")),
        retired_pages_pending=to_bool(row.get("retired_pages.pending")),
        remapped_rows_pending=to_bool(row.get("remapped_rows.pending")),
        remapped_rows_failed=to_bool(row.get("remapped_rows.failure")),
        pcie_gen_current=to_int(row.get("pcie.link.gen.current")),
        pcie_gen_max=to_int(row.get("pcie.link.gen.max")),
        pcie_width_current=to_int(row.get("pcie.link.width.current")),
        pcie_width_max=to_int(row.get("pcie.link.width.max")),
        compute_cap=clean(row.get("compute_cap")),
        throttle_reasons=decode_throttle_mask(mask),
        throttle_mask=mask,
    )


def parse_query_gpu_csv(text: str, fields: Iterable[str] | None = None) -> tuple[Gpu, ...]:
    """`nvidia-smi --query-gpu=... --format=csv` -> GPUs; any subset of fields works."""
    gpus = (gpu_from_row(row) for row in parse_csv(text, fields))
    return tuple(sorted((g for g in gpus if g is not None), key=lambda g: g.index))


def query_gpu_driver_version(text: str) -> str | None:
    versions = {clean(row.get("driver_version")) for row in parse_csv(text)} - {None}
    return sorted(v for v in versions if v)[0] if versions else None


# --------------------------------------------------------------------------- nvidia-smi -q


@dataclass(frozen=True)
class SmiQuery:
    """`nvidia-smi -q` parsed: header values plus one flat {"A/B/C": value} dict per GPU."""

    driver_version: str | None = None
    cuda_version: str | None = None
    attached_gpus: int | None = None
    gpus: tuple[Mapping[str, str], ...] = field(default_factory=tuple)


def parse_nvidia_smi_q(text: str) -> SmiQuery:
    """Indentation-structured `nvidia-smi -q` text -> SmiQuery (GPU order = nvidia-smi index)."""
    header: dict[str, str] = {}
    gpus: list[dict[str, str]] = []
    current: dict[str, str] | None = None
    stack: list[tuple[int, str]] = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("="):
            continue
        indent = len(line) - len(line.lstrip(" "))
        key, sep, value = line.strip().partition(":")
        key = key.strip()
        if indent == 0:
            gpu_line = _Q_GPU.match(line)
            if gpu_line:
                current = {"Bus Id": gpu_line.group(1)}
                gpus.append(current)
                stack = []
            elif sep:
                header[key] = value.strip()
            continue
        if current is None:
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = "/".join([name for _, name in stack] + [key])
        if sep:
            current[path] = value.strip()
        else:
            stack.append((indent, key))
    attached = header.get("Attached GPUs")
    return SmiQuery(
        driver_version=clean(header.get("Driver Version")),
        cuda_version=clean(header.get("CUDA Version")),
        attached_gpus=int(attached) if attached and attached.isdigit() else None,
        gpus=tuple(gpus),
    )


def parse_nvidia_smi_q_header(text: str) -> tuple[str | None, str | None]:
    """(Driver Version, CUDA Version) of `nvidia-smi -q` without parsing every GPU block."""
    driver = re.search(r"(?m)^Driver Version\s*: (\S+)", text)
    cuda = re.search(r"(?m)^CUDA Version\s*: (\S+)", text)
    return (clean(driver.group(1)) if driver else None), (clean(cuda.group(1)) if cuda else None)


def gpu_from_q(index: int, values: Mapping[str, str]) -> Gpu:
    """A Gpu from one `nvidia-smi -q` block (used when --query-gpu failed)."""
    reasons_key = next(
        (k for k in ("Clocks Event Reasons", "Clocks Throttle Reasons") if f"{k}/Idle" in values),
        "Clocks Event Reasons",
    )
    reasons = tuple(
        name for label, name in _THROTTLE_LABELS.items()
        if any(to_bool(v) for k, v in values.items()
               if k.startswith(reasons_key + "/") and k.rsplit("/", 1)[-1] == label)
    )
    return Gpu(
        index=index,
        name=clean(values.get("Product Name")),
        uuid=clean(values.get("GPU UUID")),
        bus_id=clean(values.get("PCI/Bus Id") or values.get("Bus Id")),
        serial=clean(values.get("Serial Number")),
        memory_total_mib=to_int(values.get("FB Memory Usage/Total")),
        vbios=clean(values.get("VBIOS Version")),
        persistence_mode=to_bool(values.get("Persistence Mode")),
        mig_mode=clean(values.get("MIG Mode/Current")),
        ecc_mode=clean(values.get("ECC Mode/Current")),
        ecc_uncorrected_volatile=_sum_ints(values, "ECC Errors/Volatile/", "Uncorrectable"),
        ecc_uncorrected_aggregate=_sum_ints(values, "ECC Errors/Aggregate/", "Uncorrectable"),
        retired_pages_pending=to_bool(values.get("Retired Pages/Pending Page Blacklist")),
        remapped_rows_pending=to_bool(values.get("Remapped Rows/Pending")),
        remapped_rows_failed=to_bool(values.get("Remapped Rows/Remapping Failure Occurred")),
        pcie_gen_current=to_int(values.get("PCI/GPU Link Info/PCIe Generation/Current")),
        pcie_gen_max=to_int(values.get("PCI/GPU Link Info/PCIe Generation/Max")),
        pcie_width_current=to_int(values.get("PCI/GPU Link Info/Link Width/Current")),
        pcie_width_max=to_int(values.get("PCI/GPU Link Info/Link Width/Max")),
        throttle_reasons=reasons,
    )


def _sum_ints(values: Mapping[str, str], prefix: str, word: str) -> int | None:
    numbers = [
        to_int(v) for k, v in values.items()
        if k.startswith(prefix) and word in k.rsplit("/", 1)[-1]
    ]
    known = [n for n in numbers if n is not None]
    return sum(known) if known else None


# --------------------------------------------------------------------------- other outputs


def nvml_library_version(text: str) -> str | None:
    """The "NVML library version: 580.159" line nvidia-smi prints on a version mismatch."""
    match = _NVML_LIB.search(text)
    return match.group(1) if match else None


def nvidia_smi_failure(rc: int | None, text: str, tool_timeout: str = "?") -> str:
    """A sentence for a failed nvidia-smi call (rc != 0)."""
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if rc == 127:
        return "nvidia-smi: not found"
    if rc in (124, 137):
        if first.startswith("skipped:"):
            return first
        return f"nvidia-smi hung (no answer in {tool_timeout} s)"
    if "Failed to initialize NVML:" in text:
        reason = text.split("Failed to initialize NVML:", 1)[1].splitlines()[0].strip()
        library = nvml_library_version(text)
        return f"NVML: {reason}" + (f" (NVML library version {library})" if library else "")
    if "couldn't communicate with the NVIDIA driver" in text:
        return "nvidia-smi: couldn't communicate with the NVIDIA driver (driver not loaded?)"
    if "is not a valid field to query" in text:
        return f"nvidia-smi: {first}"
    return f"nvidia-smi exited {rc}: {first}" if first else f"nvidia-smi exited {rc}"


# --------------------------------------------------------------------------- the family


def smi_error(out: ProbeOutput) -> str | None:
    """nvidia-smi's own failure, once: errors["nvidia_smi"] when the first query failed for a
    reason other than an unknown field; else each failed nvidia-smi family section's reason
    under that family (and "nvidia_smi" when one hung). Decided on first use, so the errors
    keep the probe's order whichever family asks first."""
    if out.smi is not None:
        return out.smi[0]
    first = out.get("query_gpu")
    error: str | None = None
    if first is not None and not first.ok and "is not a valid field" not in first.text:
        error = nvidia_smi_failure(first.rc, first.text, out.tool_timeout)
        out.errors["nvidia_smi"] = error
    for name, family in out.smi_sections if error is None else ():
        section = out.get(name)
        if section is not None and not section.ok:
            out.errors[family] = nvidia_smi_failure(section.rc, section.text, out.tool_timeout)
            if section.hung and "nvidia_smi" not in out.errors and "skipped" not in section.text:
                out.errors["nvidia_smi"] = f"nvidia-smi hung (no answer in {out.tool_timeout} s)"
    out.smi = (error,)
    return error


def _gpus_from_q(q_text: str) -> tuple[Gpu, ...]:
    query = parse_nvidia_smi_q(q_text)
    return tuple(gpu_from_q(i, values) for i, values in enumerate(query.gpus))


def build_gpus(out: ProbeOutput) -> dict[str, Any]:
    """The --query-gpu CSV (full, else the basic field set); `nvidia-smi -q` when both failed."""
    smi = smi_error(out)
    q_text = out.ok("nvidia_smi_q") or ""
    gpus = out.safe("gpus", (), parse_query_gpu_csv,
                    out.ok("query_gpu") or out.ok("query_gpu_basic") or "")
    if not gpus and q_text:
        gpus = out.safe("gpus", (), _gpus_from_q, q_text)
    first = out.get("query_gpu")
    if first is not None and not first.ok and smi is None and not gpus:
        out.errors["gpus"] = nvidia_smi_failure(first.rc, first.text, out.tool_timeout)
    return {"gpus": gpus}


GPUS = Family("gpus", sections=("query_gpu", "query_gpu_basic", "nvidia_smi_q"),
              errors=("gpus", "nvidia_smi"), fields=("gpus",), build=build_gpus)
