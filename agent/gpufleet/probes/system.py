"""OS, kernel, kernel module and system library facts (pure parsers)."""

from __future__ import annotations

import re
import shlex

from gpufleet.model import OsInfo

_MODULE = re.compile(
    r"NVRM version:\s*NVIDIA UNIX (?P<open>Open )?(?:\S+ )?Kernel Module(?: for \S+)?\s+"
    r"(?P<version>\d+\.\d+(?:\.\d+)?)"
)
_NCCL = re.compile(r"libnccl\.so\.(\d+\.\d+\.\d+)")
_NVML = re.compile(r"libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)")


def parse_os_release(text: str) -> dict[str, str]:
    """/etc/os-release KEY=value lines (values shell-quoted) -> dict."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, raw = line.strip().partition("=")
        if not sep or not key or key.startswith("#"):
            continue
        try:
            words = shlex.split(raw)
        except ValueError:
            words = [raw.strip("\"'")]
        values[key] = " ".join(words)
    return values


def parse_uname(text: str) -> tuple[str | None, str | None]:
    """`uname -r -m` ("6.8.0-45-generic x86_64") -> (kernel, arch).

    Also accepts `uname -a` (Linux HOST RELEASE #... ARCH ... GNU/Linux).
    """
    words = text.split()
    if len(words) == 2:
        return words[0], words[1]
    if len(words) >= 3 and words[0] == "Linux":
        arch = next((w for w in words if w in {"x86_64", "aarch64", "ppc64le", "s390x"}), None)
        return words[2], arch
    return (words[0] if words else None), None


def os_info(os_release: str | None, uname: str | None) -> OsInfo:
    values = parse_os_release(os_release or "")
    kernel, arch = parse_uname(uname or "")
    return OsInfo(
        id=values.get("ID"),
        version_id=values.get("VERSION_ID"),
        pretty_name=values.get("PRETTY_NAME"),
        kernel=kernel,
        arch=arch,
    )


def parse_proc_driver_version(text: str) -> tuple[str | None, str | None]:
    """/proc/driver/nvidia/version -> (kernel module version, "open" | "proprietary").

    Open:  NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build
    Other: NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Jun 23 ...
    """
    match = _MODULE.search(text)
    if not match:
        return None, None
    return match.group("version"), ("open" if match.group("open") else "proprietary")


def parse_ldconfig_nccl(text: str) -> str | None:
    """The system libnccl version from ldconfig output plus resolved links ("2.28.3").

    Accepts the probe's `resolved PATH => REAL` lines and `ls -l` style link listings; the
    soname alone (libnccl.so.2) carries no full version, so it gives None.
    """
    found = _NCCL.findall(text)
    return found[0] if found else None


def has_nccl(text: str) -> bool:
    return "libnccl.so" in text


def parse_ldconfig_nvml(text: str) -> str | None:
    """Userspace driver version from the resolved libnvidia-ml.so.1 ("580.159.04")."""
    found = _NVML.findall(text)
    return found[0] if found else None


def parse_proc_gpu_information(text: str) -> list[dict[str, str]]:
    """/proc/driver/nvidia/gpus/*/information blocks ("Model: ...", "Bus Location: ...").

    The kernel's own view of its GPUs: it lists a GPU even when NVML cannot talk to it.
    """
    gpus: list[dict[str, str]] = []
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key = key.strip()
        if not sep or key not in _GPU_INFO_KEYS:
            continue
        if key == "Model":
            gpus.append({})
        if gpus:
            gpus[-1][key] = value.strip()
    return gpus


_GPU_INFO_KEYS = frozenset({
    "Model", "IRQ", "GPU UUID", "Video BIOS", "Bus Type", "DMA Size", "DMA Mask",
    "Bus Location", "Device Minor", "GPU Firmware", "GPU Excluded",
})
