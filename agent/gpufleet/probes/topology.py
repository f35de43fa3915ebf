"""`nvidia-smi topo -m` and `nvidia-smi nvlink -s` (pure parsers)."""

from __future__ import annotations

import re
from typing import Any

from gpufleet.model import GpuNvLinks, NvLink, Topology
from gpufleet.probes.gpus import smi_error
from gpufleet.probes.sections import Family, ProbeOutput

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_DEVICE = re.compile(r"^(GPU\d+|NIC\d+|mlx\d+_\d+|NVS\d+)$")
_NIC_LEGEND = re.compile(r"^\s*(NIC\d+):\s*(\S+)\s*$")
_GPU_LINE = re.compile(r"^GPU (\d+):")
_LINK_LINE = re.compile(r"^\s*Link (\d+):\s*(.*?)\s*$")
_SPEED = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)\s*GB/s")


def parse_topo_m(text: str) -> Topology:
    """The topology matrix: device columns, link types, CPU/NUMA affinity and the NIC legend.

    Columns are tab separated; the header begins with a tab. GPU rows carry "CPU Affinity",
    "NUMA Affinity" (then an empty cell) and "GPU NUMA ID" after the device cells.
    """
    lines = [_ANSI.sub("", line) for line in text.splitlines()]
    header_at = next((i for i, line in enumerate(lines) if "GPU0" in line and "\t" in line), None)
    if header_at is None:
        return Topology()
    columns = [cell.strip() for cell in lines[header_at].split("\t") if cell.strip()]
    devices = tuple(c for c in columns if _DEVICE.match(c))
    links: dict[str, dict[str, str]] = {}
    cpu: dict[str, str] = {}
    numa: dict[str, str] = {}
    for line in lines[header_at + 1:]:
        if not line.strip() or line.startswith("Legend"):
            if links:
                break
            continue
        cells = line.split("\t")
        row = cells[0].strip()
        if row not in devices:
            continue
        values = [c.strip() for c in cells[1:]]
        links[row] = {col: values[i] for i, col in enumerate(devices) if i < len(values)}
        rest = values[len(devices):]
        if row.startswith("GPU"):
            if rest and rest[0] and rest[0] != "N/A":
                cpu[row] = rest[0]
            if len(rest) > 1 and rest[1] and rest[1] != "N/A":
                numa[row] = rest[1]
    nics = {m.group(1): m.group(2) for m in map(_NIC_LEGEND.match, lines) if m}
    return Topology(devices=devices, links=links, cpu_affinity=cpu, numa_affinity=numa, nics=nics)


def parse_nvlink_status(text: str) -> tuple[GpuNvLinks, ...]:
    """`nvidia-smi nvlink -s`: "Link 3: 26.562 GB/s" active, "Link 3: <inactive>" not.

    A GPU printed without links (no NVLink, or "all links are inActive") gets an empty tuple.
    """
    result: list[GpuNvLinks] = []
    gpu: int | None = None
    links: list[NvLink] = []
    for line in text.splitlines():
        if line.startswith("GPU "):
            gpu_match = _GPU_LINE.match(line)
            if gpu_match:
                if gpu is not None:
                    result.append(GpuNvLinks(gpu, tuple(links)))
                gpu, links = int(gpu_match.group(1)), []
            continue
        link_match = _LINK_LINE.match(line) if "Link" in line else None
        if gpu is None or not link_match:
            continue
        state = link_match.group(2)
        speed = _SPEED.search(state)
        # "26.56.2 GB/s": up, at a speed we cannot read (None), rather than the whole host lost.
        active = "GB/s" in state and "inactive" not in state.lower()
        links.append(NvLink(
            link=int(link_match.group(1)),
            active=active,
            speed_gbps=float(speed.group(1)) if speed and active else None,
        ))
    if gpu is not None:
        result.append(GpuNvLinks(gpu, tuple(links)))
    return tuple(result)


def build_topology(out: ProbeOutput) -> dict[str, Any]:
    smi_error(out)
    topo_text = out.ok("topo")
    if topo_text is None:
        return {"topology": None}
    topology: Topology | None = out.safe("topology", Topology(), parse_topo_m, topo_text)
    if topology is not None and not topology.devices and "topology" not in out.errors:
        topology = None
        out.errors["topology"] = "nvidia-smi topo -m: no matrix in the output"
    return {"topology": topology}


def build_nvlink(out: ProbeOutput) -> dict[str, Any]:
    smi_error(out)
    return {"nvlink": out.safe("nvlink", (), parse_nvlink_status, out.ok("nvlink") or "")}


TOPOLOGY = Family("topology", sections=("topo",), errors=("topology",), fields=("topology",),
                  build=build_topology, smi="topo")
NVLINK = Family("nvlink", sections=("nvlink",), errors=("nvlink",), fields=("nvlink",),
                build=build_nvlink, smi="nvlink")
