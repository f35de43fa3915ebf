"""OS, kernel, kernel module and system library facts (pure parsers)."""

from __future__ import annotations

import re
import shlex
from typing import Any

from gpufleet.model import DriverInfo, OsInfo
from gpufleet.probes.gpus import (
    nvml_library_version,
    parse_nvidia_smi_q_header,
    query_gpu_driver_version,
    smi_error,
)
from gpufleet.probes.sections import Family, ProbeOutput, tool_failure

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


# --------------------------------------------------------------------------- the families


def build_os(out: ProbeOutput) -> dict[str, Any]:
    out.fail("os", "os_release", "cat /etc/os-release")
    out.fail("kernel", "uname", "uname")
    return {"os": out.safe("os", OsInfo(), os_info, out.ok("os_release"), out.ok("uname"))}


def build_driver(out: ProbeOutput) -> dict[str, Any]:
    """Kernel module from /proc; userspace version from the first source that has it:
    --query-gpu, the -q header, the resolved libnvidia-ml, nvidia-smi's mismatch message."""
    module_version, flavor = out.safe("kernel_module", (None, None), parse_proc_driver_version,
                                      out.ok("proc_driver_version") or "")
    proc = out.get("proc_driver_version")
    if proc is not None and not proc.ok:
        out.errors["kernel_module"] = (
            "/proc/driver/nvidia/version: not present (NVIDIA kernel module not loaded)"
            if "No such file" in proc.text
            else tool_failure("cat /proc/driver/nvidia/version", proc, out.tool_timeout)
        )
    elif proc is not None and module_version is None:
        out.errors["kernel_module"] = (
            f"unrecognised /proc/driver/nvidia/version: {proc.stdout[:120]!r}")
    smi_error(out)
    q_driver, q_cuda = out.safe("driver", (None, None), parse_nvidia_smi_q_header,
                                out.ok("nvidia_smi_q") or "")
    first = out.get("query_gpu")
    csv = out.ok("query_gpu") or out.ok("query_gpu_basic") or ""
    version = (
        out.safe("driver", None, query_gpu_driver_version, csv)
        or q_driver
        or out.safe("driver", None, parse_ldconfig_nvml, out.ok("ldconfig") or "")
        or out.safe("driver", None, nvml_library_version, first.text if first is not None else "")
    )
    return {"driver": DriverInfo(version=version, kernel_module_version=module_version,
                                 kernel_module_flavor=flavor, cuda_version=q_cuda)}


def build_nccl(out: ProbeOutput) -> dict[str, Any]:
    """The system libnccl's version, from the ldconfig cache and its resolved links."""
    libs = out.ok("ldconfig")
    nccl = None
    if libs is not None:
        nccl = out.safe("nccl", None, parse_ldconfig_nccl, libs)
        if nccl is None and "nccl" not in out.errors:
            out.errors["nccl"] = (
                "libnccl is in the ldconfig cache but its version could not be resolved"
                if has_nccl(libs) else "no system libnccl in the ldconfig cache"
            )
    out.fail("nccl", "ldconfig", "ldconfig")
    return {"nccl_system_version": nccl}


OS = Family("os", sections=("os_release", "uname"), errors=("os", "kernel"), fields=("os",),
            build=build_os)
DRIVER = Family("driver", sections=("proc_driver_version", "query_gpu", "query_gpu_basic",
                                    "nvidia_smi_q", "ldconfig"),
                errors=("kernel_module", "driver", "nvidia_smi"), fields=("driver",),
                build=build_driver)
NCCL = Family("nccl", sections=("ldconfig",), errors=("nccl",),
              fields=("nccl_system_version",), build=build_nccl)
