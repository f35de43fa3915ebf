"""What one smoke run knows about each host (HostRun) and the knobs tests set (SmokeOptions)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpufleet.model import CommandResult, Facts, HostSpec, NcclConfig
from gpufleet.sku.bandwidth import LinkBound
from gpufleet.transport.base import Transport

MARKER = "GPUFLEET_SMOKE_RUN"
LABEL = "gpufleet.smoke"  # on every container of a run, value = the run id
LOG_TAIL_BYTES = 6000
CPU_RANKS = 2  # ranks on a host without GPUs: enough for real collectives, cheap for CI


@dataclass(frozen=True)
class SmokeOptions:
    """Knobs the CLI does not expose; tests and benchmarks set them (or GPUFLEET_SMOKE_* env)."""

    pg_timeout: float | None = None  # per collective; default derived from the overall timeout
    nproc: int | None = None  # ranks per host; default: GPU count, or CPU_RANKS without GPUs
    sizes: tuple[int, ...] | None = None  # bandwidth sweep sizes (bytes), overriding the level
    test_hang_rank: int | None = None  # test-only: this global rank stops before a collective
    test_hang_phase: str = "allreduce_exact"
    bw_method: str = "auto"  # auto|graph|loop: how small all-reduces are launched (see script)
    env: Mapping[str, str] = field(default_factory=dict)  # extra environment for the ranks
    launcher: str = "auto"  # auto: the package's --spawn on one node with host python; torchrun

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> SmokeOptions:
        hang = environ.get("GPUFLEET_SMOKE_TEST_HANG")  # "RANK" or "RANK:PHASE"
        rank, _, ph = (hang or "").partition(":")
        sizes = environ.get("GPUFLEET_SMOKE_SIZES")
        pg = environ.get("GPUFLEET_SMOKE_PG_TIMEOUT")
        nproc = environ.get("GPUFLEET_SMOKE_NPROC")
        return cls(
            pg_timeout=float(pg) if pg else None,
            nproc=int(nproc) if nproc else None,
            sizes=tuple(int(s) for s in sizes.split(",") if s) if sizes else None,
            test_hang_rank=int(rank) if rank else None,
            test_hang_phase=ph or "allreduce_exact",
            launcher=environ.get("GPUFLEET_SMOKE_LAUNCHER", "auto"),
            # the launcher's watchdog limits (smoke.levels, `watchdog`) reach the ranks' environment
            env={k: v for k, v in environ.items() if k.startswith("GPUFLEET_SMOKE_WATCHDOG_")},
        )


@dataclass
class HostRun:
    """What the preflight learned about one host, and the run's state there."""

    spec: HostSpec
    transport: Transport
    facts: Facts  # from gpufleet.probes.collect
    run_id: str
    run_dir: str = ""
    gpu_count: int | None = None  # nvidia-smi's count; None = unknown
    gpu_names: tuple[str, ...] = ()
    link: str | None = None
    busy: tuple[str, ...] = ()
    runtime: str = "host"
    runtimes: tuple[str, ...] = ()  # docker's runtimes (docker info), when known
    nproc: int = 0
    script: str = ""
    versions: dict[str, Any] = field(default_factory=dict)
    launch: CommandResult | None = None
    files: dict[str, str] = field(default_factory=dict)
    leftover: str = ""
    error: str | None = None
    expectation: LinkBound | None = None  # None: no GPUs, or unknown topology
    nccl: NcclConfig | None = None  # NCCL settings: the facts', or read by the preflight
    ended_by_runner: str = ""  # multinode: why the runner ended this host's part early
