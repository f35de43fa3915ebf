"""GPUDirect RDMA's kernel paths: how an HCA could reach GPU memory on this host.

A NIC registers GPU memory one of two ways (NVIDIA's GPU Operator, "GPUDirect RDMA and GPUDirect
Storage", docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-operator-rdma.html:
"DMA-BUF from the Linux kernel or the legacy nvidia-peermem kernel module"; NVIDIA recommends
DMA-BUF):

- peer memory: the `nvidia_peermem` module of the driver (R470+), or Mellanox's older
  `nv_peer_mem`, registered as the client `nv_mem` with MLNX_OFED's ib_core peer-memory API
  (NVIDIA/open-gpu-kernel-modules kernel-open/nvidia-peermem/nvidia-peermem.c: DRV_NAME "nv_mem",
  MODULE_VERSION the driver's; its body compiles only where ib_core has the MLNX peer-memory
  symbols, so on an inbox ib_core it loads and does nothing). NCCL takes any of
  /sys/kernel/mm/memory_peers/nv_mem/version, .../nv_mem_nc/version or
  /sys/module/nvidia_peermem/version as "GDR module loaded" (NVIDIA/nccl@276b2fe4
  src/transport/net_ib/gdr.cc ncclIbGdrSupport);
- DMA-BUF: the kernel's RDMA dma-buf import (ib_umem_dmabuf, Linux 5.12+: oneCCL's dmabuf page
  states the same floor, "Linux kernel version >= 5.12") and a driver that exports GPU memory as
  dma-buf (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, which NCCL asks in src/init.cc before it logs
  "DMA-BUF is available on GPU device N"); the open GPU kernel modules are the flavor that does
  (the GPU Operator installs them for DMA-BUF: driver.kernelModuleType=open). That the
  proprietary flavor does not is an inference from those docs. The kernel release and the
  module flavor are the os and driver families' facts; rules/fabric_gdr.py combines them.

probe.sh prints `module NAME VERSION` per module directory under /sys/module (nvidia_peermem,
nv_peer_mem, ib_core, ib_uverbs) and `memory_peer NAME VERSION` per
/sys/kernel/mm/memory_peers/NAME; VERSION is empty where the version file is missing.
"""

from __future__ import annotations

import re
from typing import Any

from gpufleet.model import GdrSupport
from gpufleet.probes.sections import Family, ProbeOutput

_MODULES = ("nvidia_peermem", "nv_peer_mem", "ib_core", "ib_uverbs")
_LINE = re.compile(r"^(module|memory_peer) ([A-Za-z0-9_]{1,32})(?: ([A-Za-z0-9._+-]{0,40}))?$")
MAX_PEERS = 16  # MLNX_OFED registers a handful of clients; more is not sysfs


def parse_gdr(text: str) -> GdrSupport:
    """probe.sh's gdr section -> the modules and peer-memory clients it lists.

    A line of any other shape, or a module the probe does not ask about, is host text gpufleet
    does not trust, and is skipped."""
    modules: dict[str, str] = {}
    peers: dict[str, str] = {}
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if not m:
            continue
        kind, name, version = m.group(1), m.group(2), m.group(3) or ""
        if kind == "module" and name in _MODULES:
            modules[name] = version
        elif kind == "memory_peer" and len(peers) < MAX_PEERS:
            peers[name] = version
    return GdrSupport(modules=dict(sorted(modules.items())),
                      memory_peers=dict(sorted(peers.items())))


def build_gdr(out: ProbeOutput) -> dict[str, Any]:
    text = out.ok("gdr")
    return {"gdr": None if text is None else out.safe("gdr", None, parse_gdr, text)}


GDR = Family("gdr", sections=("gdr",), errors=("gdr",), fields=("gdr",), build=build_gdr)
