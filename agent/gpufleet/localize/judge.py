"""Whether one multinode world passed: errors and hangs fail it, and so does being slow.

Slow means below the expectation for that member set. The expectation comes, in this order,
from an injected function (the topology expectation: links and NIC rates of the members), or
from the run itself: the median bus bandwidth of the other worlds of the same size measured so
far, minus a robust margin (scaled MAD, at least MIN_MARGIN of the median); once worlds have
passed, their median is the reference instead (nccl-tests' busbw is normalised by 2(n-1)/n, so
on one flat fabric it does not depend on the world size). Without either, the world cannot be
judged on speed: `Verdict.judged` is False and the search builds a baseline first.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

# Floor for the member set in GB/s, or None where the topology gives none.
Expectation = Callable[[Sequence[str]], float | None]

MIN_PEERS = 3
MIN_REFERENCE = 2
MAD_SCALE = 1.4826  # MAD -> standard deviation for normal noise
MAD_FACTOR = 3.0
MIN_MARGIN = 0.3  # a world must be 30 % below the median to be slow: CI noise is large


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
    judged: bool  # False: no error, but nothing to compare the bandwidth with yet
    threshold_gbps: float | None
    basis: str  # "error", "topology", "same-size worlds", "all worlds", "none"
    reason: str


def baseline(peers: Sequence[float]) -> tuple[float, float]:
    """(median, threshold) of peer bandwidths: median - max(3 * 1.4826 * MAD, 30 % of median)."""
    med = statistics.median(peers)
    mad = statistics.median(abs(p - med) for p in peers)
    margin = max(MAD_FACTOR * MAD_SCALE * mad, MIN_MARGIN * med)
    return med, med - margin


def judge(
    world: Measured,
    peers: Sequence[Measured],
    expectation: Expectation | None = None,
    passing: Sequence[float] = (),
) -> Verdict:
    """The verdict on `world`.

    peers: other worlds of this run (those of a similar size, within one host, are the
    cohort, with `world` itself); passing: bandwidths of worlds already judged good, the
    reference once there are MIN_REFERENCE of them (after the first level, most new worlds
    contain a suspect, so their own median would not be a baseline).
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
    same = [w.busbw_gbps for w in peers if w.error is None and w.busbw_gbps is not None
            and abs(len(w.members) - n) <= 1 and w is not world] + [bw]
    if len(passing) >= MIN_REFERENCE:
        basis, ref = "passing worlds", list(passing)
    elif len(same) >= MIN_PEERS:
        basis, ref = "same-size worlds", same
    else:
        return Verdict(True, False, None, "none",
                       f"{bw:.4g} GB/s, not judged: fewer than {MIN_PEERS} worlds of its size "
                       "and no topology expectation")
    med, threshold = baseline(ref)
    ok = bw >= threshold
    return Verdict(ok, True, threshold, basis,
                   f"{bw:.4g} GB/s {'>=' if ok else '<'} {threshold:.4g} GB/s (median "
                   f"{med:.4g} of {len(ref)} {basis} minus margin)")
