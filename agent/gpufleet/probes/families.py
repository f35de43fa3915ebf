"""The fact families, in the order collect() builds them (ansible-core's default_collectors).

Order matters where one family's errors must precede another's (errors keep probe order) and
where a family reads what an earlier one decided: the driver family is the first to ask
nvidia-smi's own failure (gpus.smi_error), which the gpus, topology, nvlink, fabric and
gpu_processes families then share. Adding a family: docs/add-a-fact.md.
"""

from __future__ import annotations

from gpufleet.probes import (
    containers,
    fabric,
    gdr,
    gpus,
    ib,
    kernel_log,
    kernels,
    nccl,
    nvlink_errors,
    pci,
    processes,
    recovery,
    system,
    tmpdir,
)
from gpufleet.probes import topology as topo
from gpufleet.probes.sections import Family

FAMILIES: tuple[Family, ...] = (
    system.OS,
    system.DRIVER,
    gpus.GPUS,
    topo.TOPOLOGY,
    topo.NVLINK,
    nvlink_errors.NVLINK_ERRORS,
    fabric.FABRIC,
    containers.TOOLKIT,
    containers.DOCKER,
    containers.CONTAINERD,
    containers.IMAGE,
    containers.CONTAINERS,
    system.NCCL,
    kernel_log.XID,
    processes.PROCESSES,
    nccl.NCCL_CONFIG,
    pci.PCI_GPUS,
    ib.IB_PORTS,
    kernels.KERNELS,
    kernels.BOOT_ID,
    recovery.GPU_RECOVERY,
    ib.IB_LINKS,
    gdr.GDR,
    tmpdir.TMPDIR,
)

# What collect() itself fills or reads, beside the families: the probe's frame and timing.
COLLECT_FIELDS = ("schema", "collected_at", "errors", "probe_duration_s")
COLLECT_SECTIONS = ("meta", "end")
COLLECT_ERRORS = ("probe",)
