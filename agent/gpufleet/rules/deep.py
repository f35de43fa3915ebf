"""GF53x and GF604-GF609: the smoke test's deeper checks (smoke/smoke_deep.py), one rule per cause.

The script judges on the host, where every GPU's numbers meet; each failed judgement is a
`problem` in its check's data ({"kind", "rank", "message", "fix", "host"?}). Here each kind gets
its stable rule id, the host that owns the GPU, and the fix the script chose from what it saw.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from gpufleet.model import Finding, SmokeCheck
from gpufleet.rules.base import Ctx, finding
from gpufleet.rules.catalog import SMOKE_HINTS

# Smoke checks judged here rather than by GF601 (rules/smoke.py skips them).
DEEP_CHECKS = frozenset({"readiness", "hostdev_bw", "scaling", "sdc"})

KIND_RULE: Mapping[str, str] = {
    "gpu_slow": "GF530",
    "host_bound": "GF531",
    "low_scaling": "GF532",
    "slow_rank": "GF533",
    "sdc": "GF604",
    "cudnn_unavailable": "GF605",
    "compile_failed": "GF606",
    "compile_mismatch": "GF607",
    "compile_unavailable": "GF608",
    "env_disables": "GF609",
}

_EVIDENCE_SKIP = frozenset({"kind", "message", "fix", "host"})


def _tf32(label: str, world: tuple[str, ...], c: SmokeCheck) -> Iterator[Finding]:
    if c.data.get("tf32_matmul_default") is not False:
        return
    gain: Mapping[str, Any] | None = c.data.get("tf32_gain")
    what = (f"fp32 matmul {gain['fp32_tflops']:.1f} TFLOP/s, {gain['tf32_tflops']:.1f} with TF32 "
            f"({gain['speedup']:.1f}x)") if gain else "its gain is measured at --level full"
    yield finding("GF534", world, f"{label}: TF32 is off by default for fp32 matmul; {what}",
                  {"check": c.name, "tf32_gain": dict(gain) if gain else None,
                   "subject": "tf32"})


def check(ctx: Ctx) -> Iterator[Finding]:
    done: set[tuple[str, ...]] = set()
    for h, s in ctx.with_smoke():
        world = tuple(sorted(s.hosts)) if len(s.hosts) > 1 else (h.name,)
        if world in done:
            continue
        done.add(world)
        label = "+".join(world)
        for c in s.checks:
            if c.name not in DEEP_CHECKS:
                continue
            named = False
            for p in c.data.get("problems") or []:
                rule = KIND_RULE.get(str(p.get("kind")))
                if rule is None:
                    continue
                owner = p.get("host")
                hosts = (str(owner),) if owner in world else world
                evidence = {k: v for k, v in p.items() if k not in _EVIDENCE_SKIP}
                rank = p.get("rank")
                yield finding(rule, hosts, f"{label}: {p.get('message')}",
                              {"check": c.name, **evidence,
                               "subject": f"rank{rank}" if rank is not None else c.name},
                              fix=p.get("fix") or "see the check's detail")
                named = True
            if not c.passed and not named:
                yield finding("GF601", world,
                              f"{label}: smoke check {c.name} failed: {c.detail}",
                              {"check": c.name, "detail": c.detail, "data": dict(c.data),
                               "subject": c.name},
                              hint=SMOKE_HINTS.get(c.name, f"smoke check {c.name} failed"))
            if c.name == "readiness" and s.backend == "nccl":
                yield from _tf32(label, world, c)
