"""GF53x and GF604-GF609: the smoke test's deeper checks (smoke/remote/deep.py), one rule per cause.

The script judges on the host, where every GPU's numbers meet; each failed judgement is a
`problem` in its check's data ({"kind", "rank", "message", "fix", "host"?}). Here each kind gets
its stable rule id, the host that owns the GPU, and the fix the script chose from what it saw.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from gpufleet.model import Finding, SmokeCheck
from gpufleet.rules.base import Ctx, finding

# The ids this module emits (tests/unit/test_rules_plumbing.py holds it to that).
RULES: tuple[str, ...] = ("GF530", "GF531", "GF532", "GF533", "GF534", "GF604", "GF605", "GF606",
                          "GF607", "GF608", "GF609")

# Smoke checks whose named problems are judged here rather than by GF601 (rules/smoke.py).
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


def names_a_rule(c: SmokeCheck) -> bool:
    """Whether one of a deeper check's problems has a rule here; a failed check whose problems
    have none (it crashed) is GF601's, in rules/smoke.py."""
    return any(str(p.get("kind")) in KIND_RULE for p in c.data.get("problems") or [])


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
    for _h, s, world in ctx.worlds():
        label = "+".join(world)
        for c in s.checks:
            if c.name not in DEEP_CHECKS:
                continue
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
            if c.name == "readiness" and s.backend == "nccl":
                yield from _tf32(label, world, c)
