"""Whether one multinode world passed: errors and hangs fail it, and so does being slow.

Slow means below the expectation for that member set. The expectation comes, in this order,
from an injected function (the topology expectation: links and NIC rates of the members), or
from the run itself, through one model of how bus bandwidth depends on the world size: it does
not grow with it (nccl-tests normalise busbw by 2(n-1)/n, so on one flat fabric it is flat; on
shared CPUs, or with more hops, bigger worlds are slower). So a world is compared only with
worlds of its own size or bigger: the worlds already judged good of size >= n (the reference
once there are MIN_REFERENCE of them; after the first level most new worlds contain a suspect,
so their own median would not be a baseline), else the worlds of exactly its size in this run.
A world of 8 is never judged against worlds of 3 (issue 27: a healthy 8-host world on 2 shared
cores ran at 0.027 GB/s against 0.10 for 3 hosts, and five good hosts were convicted).

The margin is taken on the logarithm of the bandwidth (bandwidths are ratios: a world "4x
slower"), so the threshold is median / factor and never at or below zero (issue 27: a linear
median-minus-MAD margin came out at -0.127 GB/s and passed a throttled host). When the reference
spreads so widely that only a world more than MAX_FACTOR times slower than its median would
stand out, a world above the threshold is not called good: `judged` is False with the numbers
(the search then says "inconclusive", never "all good"). A world below even that threshold is
still slow. Without a reference the world cannot be judged on speed (`judged` False).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

# Floor for the member set in GB/s, or None where the topology gives none.
Expectation = Callable[[Sequence[str]], float | None]

MIN_PEERS = 3
MIN_REFERENCE = 2
MAD_SCALE = 1.4826  # MAD -> standard deviation for normal noise
MAD_FACTOR = 3.0
MIN_MARGIN = 0.5  # without an outside reference, only half the median or less is slow
MAX_FACTOR = 4.0  # a reference that cannot tell 4x slower from noise judges nothing as good


@dataclass(frozen=True)
class Measured:
    """A finished world as the runner saw it."""

    members: tuple[str, ...]
    busbw_gbps: float | None  # the world's bus bandwidth at the largest size measured
    error: str | None = None  # errored or hung: the runner's sentence
    hung: bool = False
    duration_s: float = 0.0


@dataclass(frozen=True)
class Verdict:
    passed: bool
    judged: bool  # False: no error, but nothing (or nothing tight enough) to compare with
    threshold_gbps: float | None
    basis: str  # "error", "topology", "passing worlds", "same-size worlds", "spread", "none"
    reason: str


@dataclass(frozen=True)
class Baseline:
    median: float
    threshold: float  # median / factor: always > 0
    factor: float  # how many times below the median a world must be to be slow
    low: float
    high: float
    count: int

    @property
    def too_wide(self) -> bool:
        return self.factor > MAX_FACTOR

    def words(self, basis: str) -> str:
        return (f"median {self.median:.4g} of {self.count} {basis} "
                f"({self.low:.4g}-{self.high:.4g} GB/s) / {self.factor:.3g}")


def baseline(peers: Sequence[float]) -> Baseline:
    """Robust threshold of peer bandwidths: exp(median(log) - max(3 * 1.4826 * MAD(log),
    -log(1 - MIN_MARGIN))). Peers at or below zero carry no scale and are left out."""
    logs = [math.log(p) for p in peers if p > 0]
    if not logs:
        raise ValueError("no positive bandwidth to build a baseline from")
    med = statistics.median(logs)
    mad = statistics.median(abs(v - med) for v in logs)
    margin = max(MAD_FACTOR * MAD_SCALE * mad, -math.log(1 - MIN_MARGIN))
    pos = [p for p in peers if p > 0]
    return Baseline(math.exp(med), math.exp(med - margin), math.exp(margin), min(pos), max(pos),
                    len(logs))


def _bw(m: Measured) -> float | None:
    return m.busbw_gbps if m.error is None else None


def judge(
    world: Measured,
    peers: Sequence[Measured],
    expectation: Expectation | None = None,
    passing: Sequence[Measured] = (),
) -> Verdict:
    """The verdict on `world`.

    peers: other worlds of this run (those of exactly its size are its cohort, with `world`
    itself); passing: worlds already judged good, of which those of its size or bigger are the
    reference once there are MIN_REFERENCE of them.
    """
    if world.error is not None:
        kind = "hung" if world.hung else "failed"
        return Verdict(False, True, None, "error", f"world {kind}: {world.error}")
    bw = world.busbw_gbps
    if bw is None:
        return Verdict(False, True, None, "error", "world finished without a bandwidth figure")
    floor = expectation(world.members) if expectation is not None else None
    if floor is not None:
        ok = bw >= floor
        return Verdict(ok, True, floor, "topology",
                       f"{bw:.4g} GB/s {'>=' if ok else '<'} expected {floor:.4g} GB/s")
    n = len(world.members)
    ref = [b for m in passing if m is not world and len(m.members) >= n
           and (b := _bw(m)) is not None and b > 0]
    same = [b for m in peers if m is not world and len(m.members) == n
            and (b := _bw(m)) is not None] + [bw]
    if len(ref) >= MIN_REFERENCE:
        basis, label, values = "passing worlds", f"passing worlds of {n}+ hosts", ref
    elif len(same) >= MIN_PEERS and any(v > 0 for v in same):
        basis, label, values = "same-size worlds", f"worlds of {n} hosts", same
    else:
        return Verdict(True, False, None, "none",
                       f"{bw:.4g} GB/s, not judged: fewer than {MIN_PEERS} worlds of {n} hosts, "
                       f"fewer than {MIN_REFERENCE} passing worlds of {n}+ hosts, and no "
                       "topology expectation")
    base = baseline(values)
    if bw < base.threshold:
        return Verdict(False, True, base.threshold, basis,
                       f"{bw:.4g} GB/s < {base.threshold:.4g} GB/s ({base.words(label)})")
    if base.too_wide:
        return Verdict(True, False, base.threshold, "spread",
                       f"{bw:.4g} GB/s, not judged: the {base.count} {label} spread "
                       f"{base.low:.4g}-{base.high:.4g} GB/s (median {base.median:.4g}); only a "
                       f"world {base.factor:.3g}x below the median would stand out from that "
                       f"noise (more than {MAX_FACTOR:g}x is too wide to call a world good)")
    return Verdict(True, True, base.threshold, basis,
                   f"{bw:.4g} GB/s >= {base.threshold:.4g} GB/s ({base.words(label)})")
