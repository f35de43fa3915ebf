"""Every smoke check, once: (name, rank side, world verdict). Adding one is one entry here plus
its name in the levels that run it (gpufleet/smoke/levels.py); docs/add-a-smoke-check.md.

BASE checks run before the bandwidth sweep (a crash there ends the rank: the world is broken);
DEEP checks after it, each isolated (a crashed check is a failed check and the run goes on).
A check marked `stub` runs with the dynamo stub (dynamo.py) and, should the stub lack
something, again with the real torch._dynamo, together with its neighbours marked so.
"""

from __future__ import annotations

import os
from collections import namedtuple

from . import checks, deep, deep_verdict, gdr, gemm, membw, p2p


def _always(c):
    del c
    return True


def _gpu_ranks(c):
    return c.all_gpu


Check = namedtuple("Check", "name rank aggregate applies stub")
# rank(ctx) -> this rank's record (dict with "passed"); aggregate(ranks) -> (passed, detail,
# data) on rank 0; applies(ctx) -> whether this world runs it at all.
BASE = (
    Check("matmul", checks.rank_matmul, checks.agg_matmul, _always, False),
    Check("allreduce_exact", checks.rank_allreduce_exact, checks.agg_allreduce_exact, _always,
          False),
    Check("ddp", checks.rank_ddp, checks.agg_ddp, _always, True),
    Check("amp", checks.rank_amp, checks.agg_amp, _gpu_ranks, True),
)
DEEP = (
    Check("readiness", deep.rank_readiness, deep_verdict.agg_readiness, _always, False),
    Check("hostdev_bw", deep.rank_hostdev_bw, deep_verdict.agg_hostdev, _gpu_ranks, False),
    Check("scaling", deep.rank_scaling, deep_verdict.agg_scaling, _always, False),
    Check("sdc", deep.rank_sdc, deep_verdict.agg_sdc, _always, False),
    Check("membw", membw.rank_membw, membw.agg_membw, _always, False),
    Check("p2p", p2p.rank_p2p, p2p.agg_p2p, _gpu_ranks, False),
    Check("gemm", gemm.rank_gemm, gemm.agg_gemm, _always, False),
    Check("gdr", gdr.rank_gdr, gdr.agg_gdr, _gpu_ranks, False),
)
CHECKS = BASE + DEEP


def selected(names):
    """The level's DEEP check names to run; GPUFLEET_SMOKE_DEEP=a,b (or none) narrows them."""
    want = os.environ.get("GPUFLEET_SMOKE_DEEP")
    allowed = None if want in (None, "") else set(want.split(","))
    return [c.name for c in DEEP if c.name in names and (allowed is None or c.name in allowed)]
