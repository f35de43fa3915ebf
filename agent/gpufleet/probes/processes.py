"""GPU compute processes (a busy host), pure parser."""

from __future__ import annotations

from typing import Any

from gpufleet.model import GpuProcess
from gpufleet.probes.gpus import clean, parse_csv, smi_error, to_int
from gpufleet.probes.sections import Family, ProbeOutput


def parse_compute_apps(text: str) -> tuple[GpuProcess, ...]:
    """`nvidia-smi --query-compute-apps=pid,process_name,used_gpu_memory,gpu_uuid --format=csv`."""
    processes: list[GpuProcess] = []
    for row in parse_csv(text):
        pid = to_int(row.get("pid"))
        if pid is None:
            continue
        processes.append(GpuProcess(
            pid=pid,
            name=clean(row.get("process_name")) or "?",
            gpu_uuid=clean(row.get("gpu_uuid")),
            used_memory_mib=to_int(row.get("used_gpu_memory")),
        ))
    return tuple(processes)


def build_processes(out: ProbeOutput) -> dict[str, Any]:
    smi_error(out)
    return {"gpu_processes": out.safe("gpu_processes", (), parse_compute_apps,
                                      out.ok("compute_apps") or "")}


PROCESSES = Family("gpu_processes", sections=("compute_apps",), errors=("gpu_processes",),
                   fields=("gpu_processes",), build=build_processes, smi="compute_apps")
