"""The fabric's facts: NVLink state and errors, the NVSwitch fabric, RDMA ports and links, and
what GPUDirect RDMA can register GPU memory through. Plain data as in gpufleet.model, which
re-exports every name here (import them from there).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class NvLink:
    link: int
    active: bool
    speed_gbps: float | None = None


@dataclass(frozen=True)
class GpuNvLinks:
    gpu_index: int
    links: tuple[NvLink, ...] = ()


@dataclass(frozen=True)
class FabricInfo:
    """NVSwitch fabric: per-GPU state from `nvidia-smi -q` plus the fabric manager service."""

    # index -> "Completed" | "In Progress" | "N/A"
    gpu_states: Mapping[int, str] = field(default_factory=dict)
    gpu_status: Mapping[int, str] = field(default_factory=dict)  # index -> "Success" | error text
    manager_running: bool | None = None  # None: not applicable / unknown
    nvswitch_count: int = 0


@dataclass(frozen=True)
class IbPort:
    """One RDMA port (InfiniBand or RoCE) as /sys/class/infiniband/DEVICE/ports/PORT/rate says."""

    device: str  # "mlx5_0"
    port: str  # "1"
    rate: str  # "400 Gb/sec (4X NDR)", as the kernel prints it
    rate_gbit: float | None = None  # 400.0; None when the rate text has no "N Gb/sec"


@dataclass(frozen=True)
class IbLink:
    """One RDMA port's health as /sys/class/infiniband/DEVICE/ports/PORT shows it (probes/ib.py
    has the layout and its sources). A field not read is None (or empty)."""

    device: str  # "mlx5_0"
    port: str  # "1"
    state: str | None = None  # "ACTIVE" (state: "4: ACTIVE")
    phys_state: str | None = None  # "LinkUp" (phys_state: "5: LinkUp")
    link_layer: str | None = None  # "InfiniBand" | "Ethernet" (RoCE)
    counters: Mapping[str, int] = field(default_factory=dict)  # counters/*: link_downed, …
    hw_counters: Mapping[str, int] = field(default_factory=dict)  # hw_counters/* (driver's)
    pkeys: tuple[str, ...] = ()  # the non-zero pkeys/* entries, "0xffff"
    gid0: str | None = None  # gids/0
    netdev: str | None = None  # RoCE: gid_attrs/ndevs/0
    carrier_changes: int | None = None  # /sys/class/net/NETDEV/carrier_changes (RoCE)
    ber: str | None = None  # mlxlink's Effective Physical BER, "15E-255"; None: not collected
    raw_ber: str | None = None  # mlxlink's Raw Physical BER (before FEC), "3E-10"
    ber_note: str | None = None  # why ber is None: "mlxlink not installed", "port not ACTIVE", …


@dataclass(frozen=True)
class NvLinkErrorCounts:
    """One GPU's NVLink error counters, `nvidia-smi nvlink -e` (probes/nvlink_errors.py)."""

    gpu: int
    uuid: str | None = None
    links: Mapping[int, Mapping[str, int]] = field(default_factory=dict)  # k -> replay, …


@dataclass(frozen=True)
class GdrSupport:
    """What GPUDirect RDMA can register GPU memory through, from sysfs (probes/gdr.py)."""

    # /sys/module/NAME present -> its version file ("" where it has none): nvidia_peermem,
    # nv_peer_mem, ib_core, ib_uverbs
    modules: Mapping[str, str] = field(default_factory=dict)
    # /sys/kernel/mm/memory_peers/NAME -> its version: a client registered with ib_core
    memory_peers: Mapping[str, str] = field(default_factory=dict)
