"""NVSwitch fabric: per-GPU fabric state (`nvidia-smi -q`), fabric manager, switch count."""

from __future__ import annotations

import re
from typing import Any

from gpufleet.model import FabricInfo
from gpufleet.probes.gpus import SmiQuery, smi_error
from gpufleet.probes.sections import Family, ProbeOutput

_Q_GPU_SPLIT = re.compile(r"\nGPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d[ \t]*(?=\n)")
_Q_FABRIC = re.compile(
    r"\n    Fabric[ \t]*\n[ \t]+State[ \t]*: (?P<state>[^\n]*)"
    r"(?:\n[ \t]+Status[ \t]*: (?P<status>[^\n]*))?"
)
_NVSWITCH_CLASS = re.compile(r"^\S+ 0680: 10de:", re.MULTILINE)


def parse_nvidia_smi_q_fabric(text: str | SmiQuery) -> tuple[dict[int, str], dict[int, str]]:
    """-q "Fabric" blocks -> ({index: State}, {index: Status}); GPUs without one are absent.

    From text this is a regex scan: an 8-GPU -q is ~2800 lines and the fleet parses one per host.
    """
    if isinstance(text, str):
        return _fabric_scan(text)
    query = text
    states: dict[int, str] = {}
    status: dict[int, str] = {}
    for index, values in enumerate(query.gpus):
        if "Fabric/State" in values:
            states[index] = values["Fabric/State"]
        if "Fabric/Status" in values:
            status[index] = values["Fabric/Status"]
    return states, status


def _fabric_scan(text: str) -> tuple[dict[int, str], dict[int, str]]:
    states: dict[int, str] = {}
    status: dict[int, str] = {}
    for index, block in enumerate(_Q_GPU_SPLIT.split(text)[1:]):
        match = _Q_FABRIC.search(block)
        if match:
            states[index] = match.group("state").strip()
            if match.group("status") is not None:
                status[index] = match.group("status").strip()
    return states, status


def parse_lspci_nvswitch(text: str) -> int:
    """`lspci -n -d 10de:` -> number of NVIDIA bridges (class 0680), i.e. NVSwitches."""
    return len(_NVSWITCH_CLASS.findall(text))


def parse_fabric_manager(text: str) -> tuple[bool | None, bool]:
    """The probe's fabric_manager section -> (running, installed).

    Lines: `installed=PATH`, `systemd=active|inactive|...`, `pgrep=PIDS`. running is None
    when neither systemd nor pgrep could be asked.
    """
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    installed = bool(values.get("installed"))
    answers: list[bool] = []
    if "systemd" in values:
        answers.append(values["systemd"] == "active")
    if "pgrep" in values:
        answers.append(bool(values["pgrep"]))
    return (any(answers) if answers else None), installed


def fabric_info(
    states: dict[int, str],
    status: dict[int, str],
    manager_text: str | None,
    nvswitch_count: int,
) -> FabricInfo | None:
    """None when the host shows nothing fabric-related at all."""
    running, installed = parse_fabric_manager(manager_text or "")
    applicable = nvswitch_count > 0 or installed or bool(running)
    if not applicable:
        running = None  # a host without NVSwitches has no fabric manager to run
    if not (states or status or applicable):
        return None
    return FabricInfo(
        gpu_states=states, gpu_status=status, manager_running=running, nvswitch_count=nvswitch_count
    )


def _fabric(out: ProbeOutput) -> FabricInfo | None:
    states, status = parse_nvidia_smi_q_fabric(out.ok("nvidia_smi_q") or "")
    lspci = out.get("lspci")
    count = parse_lspci_nvswitch(lspci.stdout) if lspci is not None and lspci.ok else 0
    manager = out.get("fabric_manager")
    return fabric_info(states, status, manager.stdout if manager else None, count)


def build_fabric(out: ProbeOutput) -> dict[str, Any]:
    smi_error(out)
    return {"fabric": out.safe("fabric", None, _fabric, out)}


FABRIC = Family("fabric", sections=("nvidia_smi_q", "lspci", "fabric_manager"),
                errors=("fabric",), fields=("fabric",), build=build_fabric, smi="nvidia_smi_q")
