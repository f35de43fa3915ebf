"""What each smoke level means: the one table.

The controller reads `timeout_s`; every other field travels to the host as one JSON argument
(`--level-spec`, see `Level.host_spec`), so the host-side code (smoke/remote/) looks values up
and never branches on the level's name.

`--level facts` on the CLI is not a smoke level: it means "no smoke test" and never reaches
this table (`SMOKE_LEVELS` are the levels a smoke run takes; `CHECK_LEVELS` what `check` accepts).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

MIB = 1 << 20
GIB = 1 << 30

# The checks each rank runs, in order (smoke/remote/registry.py names their code). The deep
# ones beyond readiness need seconds of GPU time each, so only the full level runs them.
QUICK_CHECKS = ("matmul", "allreduce_exact", "ddp", "amp", "readiness")
FULL_CHECKS = (*QUICK_CHECKS, "hostdev_bw", "scaling", "sdc", "membw", "p2p", "gemm", "gdr")


@dataclass(frozen=True)
class Level:
    """One smoke level."""

    name: str
    timeout_s: float  # the controller's wait for one host's (or world's) smoke run
    # Bus-bandwidth sweep sizes. GPUs follow nccl-tests' `-b 1M -e 4G -f 4` so results compare
    # with REFERENCE.md row by row; gloo on CPU measures the code path, not a fabric: keep CI fast.
    gpu_sizes: tuple[int, ...]
    cpu_sizes: tuple[int, ...]
    # Bytes moved per timed batch (iterations = this / size, 5..100) and timed batches per size:
    # the full level's larger batches keep harness jitter well under the 3 % it is judged on.
    batch_bytes: int
    reps: int
    matmul_cpu_n: int  # CPU ranks' matmul size (GPUs always use 8192, bf16)
    ddp_steps: int
    checks: tuple[str, ...]  # names in smoke/remote/registry.CHECKS
    readiness_compile: bool  # readiness also measures TF32's gain and compiles a small model
    sdc_seconds: float  # how long the SDC loop loads every GPU (GPUFLEET_SMOKE_SDC_SECONDS)
    # The host launcher's watchdog, seconds before each verdict. "stopped": a rank in T state
    # (SIGSTOP, a debugger). "stall": no rank changed its progress while some are further than
    # others (they wait for the ones behind: on GPUs a collective returns at once and the wait
    # is in the next sync, so "inside a collective" is not required). "beat": no heartbeat, or
    # D state, for that long (the process froze); longer than "stall", because a rank blocked
    # in a CUDA sync may hold the GIL and must not be mistaken for the rank it waits for.
    watchdog: Mapping[str, float] = field(default_factory=dict)

    def host_spec(self) -> dict[str, Any]:
        """The fields the host needs, as JSON-ready data (everything but the controller's)."""
        spec = asdict(self)
        del spec["timeout_s"]
        return spec


LEVELS: Mapping[str, Level] = {
    "quick": Level(
        "quick", timeout_s=300.0,
        gpu_sizes=(1 * MIB, 64 * MIB, 256 * MIB), cpu_sizes=(64 * 1024, 1 * MIB),
        batch_bytes=2 * GIB, reps=3, matmul_cpu_n=256, ddp_steps=5, checks=QUICK_CHECKS,
        readiness_compile=False, sdc_seconds=0.0,
        watchdog={"stopped": 3.0, "stall": 15.0, "beat": 25.0},
    ),
    "full": Level(
        "full", timeout_s=1800.0,
        gpu_sizes=(1 * MIB, 4 * MIB, 16 * MIB, 64 * MIB, 256 * MIB, 1 * GIB, 4 * GIB),
        cpu_sizes=(64 * 1024, 1 * MIB, 16 * MIB),
        batch_bytes=8 * GIB, reps=10, matmul_cpu_n=512, ddp_steps=20, checks=FULL_CHECKS,
        readiness_compile=True, sdc_seconds=8.0,
        watchdog={"stopped": 3.0, "stall": 45.0, "beat": 60.0},
    ),
}  # fmt: skip
SMOKE_LEVELS: tuple[str, ...] = tuple(LEVELS)
NO_SMOKE = "facts"  # check/node-check: facts and rules only
CHECK_LEVELS: tuple[str, ...] = (NO_SMOKE, *SMOKE_LEVELS)


def get(level: str) -> Level:
    """The Level named LEVEL (quick for an unknown name, as the host used to default)."""
    return LEVELS.get(level) or LEVELS["quick"]


def timeout(level: str) -> float:
    """The controller's default timeout for a smoke run at LEVEL (quick's for an unknown one)."""
    return get(level).timeout_s


def smoke_level(check_level: str) -> str | None:
    """The smoke level a `check`/`node-check --level` value asks for; None for `facts`."""
    return None if check_level == NO_SMOKE else check_level
