"""Frozen dataclasses that cross module boundaries.

Everything here is plain data: no I/O, no imports of other gpufleet modules but model_fabric
(the fabric's facts, re-exported here). JSON output is
`to_jsonable(obj)` of these objects (dataclasses become dicts, tuples become lists).
A fact that could not be read is `None`, and the reason is recorded in `Facts.errors[<family>]`.
"""

from __future__ import annotations

import dataclasses
import enum
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from gpufleet.model.fabric import FabricInfo as FabricInfo
from gpufleet.model.fabric import GdrSupport as GdrSupport
from gpufleet.model.fabric import GpuNvLinks as GpuNvLinks
from gpufleet.model.fabric import IbLink as IbLink
from gpufleet.model.fabric import IbPort as IbPort
from gpufleet.model.fabric import NvLink as NvLink
from gpufleet.model.fabric import NvLinkErrorCounts as NvLinkErrorCounts

REPORT_SCHEMA = "gpufleet.report/v1"
FACTS_SCHEMA = "gpufleet.facts/v1"

HostStatus = Literal[
    "ok", "unreachable", "auth_failed", "hostkey_mismatch", "hostkey_unknown", "timeout", "busy",
    "error"
]
Severity = Literal["error", "warning", "info"]
# The tuples are the Literals' own members, worst first: summaries, renderers and --fail-on's
# choices list them in this order.
HOST_STATUSES: tuple[str, ...] = typing.get_args(HostStatus)
SEVERITIES: tuple[str, ...] = typing.get_args(Severity)
SEVERITY_ORDER: Mapping[str, int] = {s: n for n, s in enumerate(reversed(SEVERITIES))}


def fmt_bytes(n: int) -> str:
    """A message size as people write it: "4 GiB", "512 KiB", else bytes ("1536 B")."""
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


# --------------------------------------------------------------------------- inventory


@dataclass(frozen=True)
class Expectations:
    """Desired state from inventory variables (role-prefixed names, see DESIGN.md).

    None means "not set": rules then compare with peers instead of skipping.
    """

    driver_version: str | None = None  # nvidia_driver_version (exact)
    driver_branch: str | None = None  # nvidia_driver_branch ("580")
    kernel_modules: str | None = None  # nvidia_driver_kernel_modules: open|proprietary|auto
    toolkit_version: str | None = None  # nvidia_container_toolkit_version
    container_engine: str | None = None  # container_runtime_engine: docker|containerd
    pytorch_image: str | None = None  # repo:tag
    pytorch_image_digest: str | None = None  # sha256:...
    gpu_count: int | None = None  # gpufleet_expected_gpu_count
    smoke_runtime: str | None = None  # gpufleet_smoke_runtime: docker|host (None = auto)
    smoke_python: str = "python3"  # gpufleet_smoke_python
    min_busbw_gbps: float | None = None  # gpufleet_min_busbw_gbps
    mig_expected: bool = False  # gpufleet_mig_expected
    smoke_address: str | None = None  # gpufleet_smoke_address (multinode rendezvous address)
    smoke_interface: str | None = None  # gpufleet_smoke_interface (NCCL/GLOO_SOCKET_IFNAME)
    domain: str | None = None  # gpufleet_domain (rack, pod: localize's first-level groups)
    multinode_min_busbw_gbps: float | None = None  # gpufleet_multinode_min_busbw_gbps
    slurm_node: str | None = None  # gpufleet_slurm_node (Slurm NodeName, for drain lines)
    # Xid escalation limits (rules/escalation.py; None: the sourced defaults there)
    xid_repeat_limit: int | None = None  # gpufleet_xid_repeat_limit (same Xid, one GPU, 24 h)
    xid13_31_limit: int | None = None  # gpufleet_xid13_31_limit (same GPC/TPC or GPU, 24 h)
    xid_reboot_limit: int | None = None  # gpufleet_xid_reboot_limit (reboots in 7 days -> RMA)
    xid74_link_limit: int | None = None  # gpufleet_xid74_link_limit (Xid 74, one NVLink, 24 h)
    remediation_limit: int | None = None  # gpufleet_remediation_limit (re-tests in 7 days)
    ib_symbol_errors_per_hour: float | None = None  # gpufleet_ib_symbol_errors_per_hour (120)
    ib_flaps_per_day: float | None = None  # gpufleet_ib_flaps_per_day (5)
    ib_ber_exponent: int | None = None  # gpufleet_ib_ber_exponent (12: effective BER < 1E-12)
    # pytorch_workspaces: workspace name -> the digest it runs (its image_digest, else
    # pytorch_image_digest); None: the host declares no workspaces
    workspaces: Mapping[str, str | None] | None = None
    # gpufleet_perf_floors: metric key ("hbm_gbps", "matmul_tflops.bf16") -> floor over the SKU
    # catalog's (sku/expect.py: override_key); None: the catalog's floors
    perf_floors: Mapping[str, float] | None = None


@dataclass(frozen=True)
class HostSpec:
    """One inventory host, with the connection settings Ansible users already write."""

    name: str
    address: str  # ansible_host, else the inventory name
    connection: Literal["ssh", "local"] = "ssh"
    port: int | None = None  # None: ~/.ssh/config or 22
    user: str | None = None
    key_files: tuple[str, ...] = ()
    proxy_jump: str | None = None  # "user@host:port[,more]" as OpenSSH's -J
    known_hosts_files: tuple[str, ...] = ()  # extra UserKnownHostsFile from ssh args
    strict_host_key_checking: bool = True
    become: bool = False
    become_user: str | None = None
    groups: tuple[str, ...] = ()
    expect: Expectations = field(default_factory=Expectations)


# --------------------------------------------------------------------------- transport


@dataclass(frozen=True)
class CommandResult:
    rc: int | None  # None when killed by timeout or the channel closed without status
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False


# --------------------------------------------------------------------------- facts


@dataclass(frozen=True)
class OsInfo:
    id: str | None = None  # os-release ID
    version_id: str | None = None
    pretty_name: str | None = None
    kernel: str | None = None  # uname -r
    arch: str | None = None  # uname -m


@dataclass(frozen=True)
class DriverInfo:
    version: str | None = None  # userspace (nvidia-smi / NVML)
    kernel_module_version: str | None = None  # /proc/driver/nvidia/version
    kernel_module_flavor: str | None = None  # "open" | "proprietary"
    cuda_version: str | None = None  # max CUDA the driver supports, "13.0"


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str | None = None
    uuid: str | None = None
    bus_id: str | None = None
    serial: str | None = None
    memory_total_mib: int | None = None
    vbios: str | None = None
    persistence_mode: bool | None = None
    mig_mode: str | None = None  # "Enabled" | "Disabled" | None (N/A)
    ecc_mode: str | None = None
    ecc_uncorrected_volatile: int | None = None
    ecc_uncorrected_aggregate: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failed: bool | None = None
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    compute_cap: str | None = None  # "9.0"
    throttle_reasons: tuple[str, ...] = ()  # decoded active reasons, e.g. ("gpu_idle",)
    throttle_mask: str | None = None  # raw "0x0000000000000001"


@dataclass(frozen=True)
class Topology:
    """`nvidia-smi topo -m` parsed. links[a][b] is "X", "NV18", "SYS", "PIX", …"""

    devices: tuple[str, ...] = ()  # column order: "GPU0", "GPU1", "NIC0", …
    links: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    cpu_affinity: Mapping[str, str] = field(default_factory=dict)  # "GPU0" -> "0-31"
    numa_affinity: Mapping[str, str] = field(default_factory=dict)  # "GPU0" -> "0"
    nics: Mapping[str, str] = field(default_factory=dict)  # "NIC0" -> "mlx5_0"

    def gpu_link_kinds(self, gpus: int | None = None) -> frozenset[str]:
        """The link kinds between distinct GPUs ("NV18", "SYS", …); see gpu_link_kinds."""
        return gpu_link_kinds(self.links, gpus)


def gpu_link_kinds(links: Mapping[str, Any], gpus: int | None = None) -> frozenset[str]:
    """The kinds of link between two distinct GPUs in a `topo -m` matrix, on the model or on
    the report's JSON (rows may be null there).

    With `gpus`, only GPU0..GPU{gpus-1} and every pair of them: a pair the matrix lacks is the
    kind "" (unknown), so a partial matrix is never taken for a uniform one.
    """
    if gpus is not None:
        return frozenset(str((links.get(f"GPU{a}") or {}).get(f"GPU{b}") or "")
                         for a in range(gpus) for b in range(gpus) if a != b)
    return frozenset(str(kind) for a, row in links.items() for b, kind in (row or {}).items()
                     if a != b and a.startswith("GPU") and b.startswith("GPU"))


def topology_signature(gpu_count: int, links: Mapping[str, Any]) -> str:
    """"8x NV18", "2x NODE/SYS", "4x ?", "1x (one GPU)": how many GPUs and how they are joined
    (cohort key). One GPU has no GPU-GPU link to know: not "?" (issue 25)."""
    if gpu_count == 1:
        return "1x (one GPU)"
    return f"{gpu_count}x " + ("/".join(sorted(gpu_link_kinds(links))) or "?")


def gpu_model(names: Iterable[str | None]) -> str:
    """The host's GPU model from its GPUs' names: "NVIDIA H200", "A+B" when mixed, "no GPU"."""
    found = sorted({n for n in names if n})
    return "+".join(found) if found else "no GPU"


def cohort_label(model: str, topology: str, world_hosts: int) -> str:
    """Hosts measured alike (fleet baseline, GF502, the page's cohorts): model, links, world."""
    return f"{model}, {topology}, {'single-host' if world_hosts == 1 else f'{world_hosts}-host'}"


@dataclass(frozen=True)
class DockerInfo:
    server_version: str | None = None
    runtimes: tuple[str, ...] = ()
    default_runtime: str | None = None
    # `docker info` RuncCommit.ID: the `commit:` line of `runc --version` ("v1.3.3-0-gd842d771",
    # a distribution's "1.1.5+ds1-1+deb12u1"); None = not reported
    runc_commit: str | None = None
    # Plugins.Authorization: the daemon's AuthZ plugins (two Docker advisories need one)
    authz_plugins: tuple[str, ...] = ()


@dataclass(frozen=True)
class ImageInfo:
    ref: str | None = None  # the host's pytorch_image
    digests: tuple[str, ...] = ()  # RepoDigests present locally ("repo@sha256:…")
    env: tuple[str, ...] | None = None  # the image's Config.Env ("KEY=VALUE"); None = not read


# A Slurm node's break-fix state (engines/slurm/lifecycle.py), as reports and metrics carry it.
LifecycleState = Literal["in service", "suspect", "drained", "remediating", "re-validating",
                         "rma", "drained by someone else"]


@dataclass(frozen=True)
class XidEvent:
    xid: int
    timestamp: str | None  # as the kernel log gave it (ISO if known, else "[  12.34]")
    bus_id: str | None
    message: str
    # True: from the kernel ring buffer (dmesg), which holds this boot only; None: journald,
    # which may span boots
    this_boot: bool | None = None
    # Xid 74: the NVLink the message names ("… fatal error detected on link 14(0x0, …)"); None:
    # another code, or a message without a link
    nvlink: int | None = None


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    name: str
    gpu_uuid: str | None = None
    used_memory_mib: int | None = None


@dataclass(frozen=True)
class KernelsInfo:
    """The kernels a reboot could start, beside the running one (`os.kernel`)."""

    installed: tuple[str, ...] = ()  # releases of /boot/vmlinuz-RELEASE, sorted by version
    reboot_required: bool | None = None  # /var/run/reboot-required (Debian/Ubuntu); None = n/a


@dataclass(frozen=True)
class PciFunction:
    """An NVIDIA display or 3D controller on the PCI bus, as the kernel's sysfs lists it."""

    address: str  # "0000:18:00.0" (domain:bus:device.function)
    class_code: str  # "0x030200" (3D controller) | "0x030000" (VGA compatible)
    device_id: str | None = None  # "0x2335"


@dataclass(frozen=True)
class GpuRecovery:
    """The driver's recovery action for one GPU (`nvidia-smi -q` "GPU Recovery Action")."""

    bus_id: str  # nvidia-smi's "00000000:18:00.0"
    action: str  # NVML's name, lower case: none | gpu_reset | node_reboot | drain_p2p | …
    raw: str  # as nvidia-smi printed it ("Reset")


@dataclass(frozen=True)
class NcclSetting:
    """One NCCL_* setting and where it comes from (a file path, "environment" or "image")."""

    name: str
    value: str
    source: str


@dataclass(frozen=True)
class NcclConfig:
    """NCCL's configuration as a process started over SSH would see it (gpufleet.probes.nccl).

    `settings` holds every setting found, `effective` the one that wins per name (environment,
    then NCCL_CONF_FILE or ~/.nccl.conf, then /etc/nccl.conf). `image_env` is for the pinned
    image's Env (filled where the image is inspected); None = not read.
    """

    settings: tuple[NcclSetting, ...] = ()
    effective: tuple[NcclSetting, ...] = ()
    files: Mapping[str, str] = field(default_factory=dict)  # path -> "read" | "absent" | error
    image_env: tuple[NcclSetting, ...] | None = None


@dataclass(frozen=True)
class TempDir:
    """Where the probe and the smoke write their temporary files ($TMPDIR or /tmp) and what the
    probe found there (gpufleet.probes.tmpdir)."""

    path: str  # "/tmp"
    free_bytes: int | None  # df's available space; None = df could not say
    writable: bool  # a file written there kept its content (False: full, ENOSPC)
    fallback: str | None = None  # where the probe went instead ("/dev/shm"), when not writable


@dataclass(frozen=True)
class Facts:
    schema: str = FACTS_SCHEMA
    collected_at: str | None = None  # ISO 8601 UTC on the controller
    os: OsInfo = field(default_factory=OsInfo)
    driver: DriverInfo = field(default_factory=DriverInfo)
    gpus: tuple[Gpu, ...] = ()
    topology: Topology | None = None
    nvlink: tuple[GpuNvLinks, ...] = ()
    fabric: FabricInfo | None = None
    toolkit_version: str | None = None
    docker: DockerInfo | None = None
    containerd_version: str | None = None
    image: ImageInfo | None = None
    nccl_system_version: str | None = None  # "2.28.3" from the system libnccl
    xid_events: tuple[XidEvent, ...] = ()
    gpu_processes: tuple[GpuProcess, ...] = ()
    # family -> reason, e.g. {"nvidia_smi": "nvidia-smi: not found"}; "hung" reasons say so
    errors: Mapping[str, str] = field(default_factory=dict)
    probe_duration_s: float | None = None
    nccl_config: NcclConfig | None = None  # NCCL settings in files and the ssh environment
    containers: tuple[ContainerInfo, ...] = ()  # running containers (workspaces and others)
    # GPUs on the PCI bus whether or not the driver enumerates them; None = sysfs not read
    pci_gpus: tuple[PciFunction, ...] | None = None
    # RDMA ports and their rates (sysfs); () = no RDMA device, None = not read
    ib_ports: tuple[IbPort, ...] | None = None
    # Kernels installed (/boot/vmlinuz-*) and the distribution's reboot flag; None = not read
    kernels: KernelsInfo | None = None
    # /proc/sys/kernel/random/boot_id: new at every boot, so saved runs tell reboots apart (GF432)
    boot_id: str | None = None
    # The driver's recovery action per GPU; None = not read (no `-q`, or a driver without it)
    gpu_recovery: tuple[GpuRecovery, ...] | None = None
    ib_links: tuple[IbLink, ...] | None = None  # per-port state and counters; None: not read
    # NVLink replay/recovery/CRC counters per GPU and link; None: not read
    nvlink_errors: tuple[NvLinkErrorCounts, ...] | None = None
    tmpdir: TempDir | None = None  # the temporary directory; None = not read
    gdr: GdrSupport | None = None  # GPUDirect RDMA's kernel paths; None = not read

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)


@dataclass(frozen=True)
class ContainerInfo:
    """A running container (`docker inspect`); workspace fields from the pytorch_workspace role's
    labels and, for workspaces, from checks run inside the container."""

    id: str
    name: str
    image: str | None = None  # as created: "repo@sha256:…" or "repo:tag"
    image_digest: str | None = None  # the sha256:… of `image`, when it names one
    workspace: str | None = None  # label gpufleet.workspace
    user: str | None = None  # workspace user (label), else Config.User
    uid: int | None = None
    gpus: tuple[str, ...] = ()  # DeviceRequests' device IDs (indices/UUIDs), "all" for --gpus all
    ports: tuple[str, ...] = ()  # "127.0.0.1:28000->8888/tcp"
    memory_bytes: int = 0  # 0: no limit
    nano_cpus: int = 0
    jupyter_status: int | None = None  # HTTP status of /api/contents without a token (inside)
    jupyter_uids: tuple[int, ...] = ()
    ssh_password_auth: bool | None = None  # the running sshd's effective config (sshd -T)
    ssh_root_login: str | None = None
    check_error: str | None = None  # why the inside checks gave nothing
    pids: tuple[int, ...] = ()  # host PIDs of the container's processes (workspaces only)
    assigned_gpus: tuple[str, ...] = ()  # label gpufleet.workspace.gpus: what the role gave it
    runtime: str | None = None  # HostConfig.Runtime ("runc", "nvidia"; None: the engine's default)
    gpu_env: str | None = None  # NVIDIA_VISIBLE_DEVICES in Config.Env (that key only); None: unset


# --------------------------------------------------------------------------- smoke

SmokeStatus = Literal["pass", "fail", "error", "timeout", "busy", "skipped"]


@dataclass(frozen=True)
class SmokeCheck:
    name: str  # "versions", "device_count", "matmul", "allreduce_exact", "ddp", "amp", "busbw"
    passed: bool
    detail: str = ""
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RankInfo:
    rank: int
    host: str | None = None
    local_rank: int = 0
    torch: str | None = None
    cuda: str | None = None
    cudnn: str | None = None
    nccl: str | None = None  # "2.28.9"
    device: str | None = None  # "cuda:0" | "cpu"
    device_name: str | None = None


@dataclass(frozen=True)
class NcclConnection:
    """One rank-to-rank connection as NCCL's init log names it (smoke/nccl_paths.py)."""

    src: int  # global rank
    dst: int
    transport: str  # "P2P/CUMEM", "P2P/IPC", "SHM/direct/direct", "NET/IB", "NET/Socket", …
    channels: int = 0  # how many channel lines named it
    net_dev: int | None = None  # NET: the NCCL net device index
    gdr: bool | None = None  # NET: GPUDirect RDMA ("/GDRDMA"); None for P2P/SHM
    proxy: bool = False  # NET: sent through another rank's NIC (PXN)


@dataclass(frozen=True)
class TransportRecord:
    """Which transports a smoke world's collectives really used (issue 27 item 3)."""

    source: str  # "nccl init log" | "gloo" (gloo has no transport choice: TCP)
    network: str | None = None  # NCCL's "Using network IB|Socket"; "gloo/tcp"; None: not logged
    connections: tuple[NcclConnection, ...] = ()
    hcas: tuple[str, ...] = ()  # "NET/IB : Using [0]mlx5_0:1/IB ..." -> "mlx5_0:1/IB"
    ib_absent: bool = False  # "NET/IB : No device found."
    nvls_channels: int | None = None  # "N nvls channels" (0: NVLS not used)


@dataclass(frozen=True)
class SmokeResult:
    status: SmokeStatus
    level: str = "quick"
    backend: str | None = None  # "nccl" | "gloo"
    world_size: int = 0
    device_count: int | None = None
    ranks: tuple[RankInfo, ...] = ()
    checks: tuple[SmokeCheck, ...] = ()
    busbw_gbps: Mapping[int, float] = field(default_factory=dict)  # message bytes -> GB/s
    matmul_tflops: Mapping[int, float] = field(default_factory=dict)  # local rank -> TFLOP/s
    timings_s: Mapping[str, float] = field(default_factory=dict)
    hung_ranks: tuple[int, ...] = ()
    error: str | None = None
    hosts: tuple[str, ...] = ()  # multinode: the hosts of the world
    log_tail: str | None = None
    # Why it failed, per rank (exit code or signal, OOM hint, last phase and collective,
    # errors), the launcher watchdog's verdict, new kernel XID lines, deadlines (smoke/verdict.py)
    causes: Mapping[str, Any] = field(default_factory=dict)
    transport: TransportRecord | None = None  # None: not recorded (single GPU, no log)


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Expected:
    """One expectation a host was judged against (gpufleet/sku/expect.py; docs/expectations.md).

    metric is one of EXPECTED_METRICS; measured sits beside it after a smoke run (None before)."""

    metric: str
    unit: str  # "TFLOP/s" | "GB/s"
    expected: float
    floor: float
    source: str  # the citation(s) the number rests on
    basis: str  # how it was formed: "catalog x measured ratio", "borrowed ratio", "links", ...
    gpu: int | None = None
    dtype: str | None = None  # matmul_tflops only
    bytes: int | None = None  # allreduce_busbw_gbps only: the message size
    measured: float | None = None
    peer: int | None = None  # p2p_gbps only: the GPU read from in the line's measured copy


EXPECTED_METRICS: tuple[str, ...] = (
    "allreduce_busbw_gbps", "matmul_tflops", "hbm_gbps", "h2d_gbps", "d2h_gbps", "p2p_gbps",
    "nvlink_link_gbps", "nic_gbps",
)


@dataclass(frozen=True)
class HostResult:
    name: str
    status: HostStatus
    error: str | None = None
    facts: Facts | None = None
    smoke: SmokeResult | None = None
    duration_s: float | None = None
    # What the host was judged against (filled by report.pipeline.judge, at every level).
    expectations: tuple[Expected, ...] = ()


@dataclass(frozen=True)
class Finding:
    rule: str  # "GF101"; ids never change meaning
    severity: Severity
    hosts: tuple[str, ...]
    message: str
    evidence: Mapping[str, Any] = field(default_factory=dict)
    remediation: str = ""


@dataclass(frozen=True)
class Report:
    hosts: Mapping[str, HostResult]
    findings: tuple[Finding, ...] = ()
    specs: Mapping[str, HostSpec] = field(default_factory=dict)  # not serialised
    generated_at: str | None = None
    level: str = "facts"
    summary: Mapping[str, Any] = field(default_factory=dict)
    schema: str = REPORT_SCHEMA


# --------------------------------------------------------------------------- JSON


def to_jsonable(obj: Any) -> Any:
    """Dataclasses → dicts, tuples → lists, mapping keys → str, enums → values."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {
            f.name: to_jsonable(getattr(obj, f.name))
            for f in dataclasses.fields(obj)
            if not (isinstance(obj, Report) and f.name == "specs")
        }
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    return obj
