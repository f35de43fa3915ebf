"""GF901-GF907: what node-check --slurm-drain did in Slurm, as findings.

Not part of `rules.evaluate`: these judge no facts. They report the outcome of applying the
verdict to Slurm (engines/slurm/drain.py decides and acts; this module only names the outcome),
so node-check calls `findings` after the drain, with the plan's action and detail.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpufleet.model import Finding
from gpufleet.rules.base import finding

RULES: tuple[str, ...] = ("GF901", "GF902", "GF903", "GF904", "GF905", "GF906", "GF907")

# The drain plan's action -> the rule that reports it ("none": nothing to say).
_BY_ACTION: Mapping[str, str] = {
    "breaker": "GF901", "drain": "GF902", "keep": "GF902", "resume": "GF903",
    "leave": "GF904", "error": "GF905", "rma": "GF906", "relabel": "GF907",
}  # fmt: skip


def findings(node: str, action: str, detail: str, evidence: Mapping[str, object], *,
             share: float) -> list[Finding]:
    """The finding for the drain plan's `action` on `node` (none for "none")."""
    rule = _BY_ACTION.get(action)
    if rule is None:
        return []
    if rule == "GF901":
        return [finding(rule, [node], detail, evidence, share=f"{share:g}")]
    if rule == "GF905":
        detail = f"{node}: Slurm not updated: {detail}"
    return [finding(rule, [node], detail, evidence)]
