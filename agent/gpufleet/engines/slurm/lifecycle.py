"""A node's break-fix lifecycle, kept where the breaker keeps its state: in the Slurm drain
reason gpufleet writes, so every node and every admin reads it with `sinfo -R`.

    in service -> suspect (breaker held the drain) -> drained ("gpufleet: GFxxx …")
      -> remediating ("gpufleet: remediating …", written by playbooks/remediate_*.yml)
      -> re-validating ("gpufleet: re-validating …", written when the remediation succeeded)
      -> in service (the next health check finds nothing: resumed)
       | drained again (the re-test failed: the reason names the finding again)
       | rma ("gpufleet: RMA GF43x …": the GPU keeps failing; never resumed by gpufleet)

Each health check reports its transition (GF902-GF907 evidence `lifecycle`: from, to), so the
report, the saved history, the HTML page and the Prometheus findings show every step.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from gpufleet.model import LifecycleState
from gpufleet.rules import escalation

State = LifecycleState

PREFIX = "gpufleet:"
RMA = "gpufleet: RMA "
REMEDIATING = "gpufleet: remediating "
REVALIDATING = "gpufleet: re-validating "
RMA_RULES = escalation.RMA_RULES
# A remediation that wrote "remediating" and never finished (its playbook died): after this the
# health check takes the node back (re-drains or resumes it).
REMEDIATING_TTL_S = 3600.0


def state_of(reason: str | None, drained: bool) -> State:
    """The lifecycle state a node's Slurm state and reason say."""
    if not drained:
        return "in service"
    text = reason or ""
    if not text.startswith(PREFIX):
        return "drained by someone else"
    for prefix, state in ((RMA, "rma"), (REMEDIATING, "remediating"),
                          (REVALIDATING, "re-validating")):
        if text.startswith(prefix):
            return state  # type: ignore[return-value]
    return "drained"


def stale(reason_time: dt.datetime | None, now: dt.datetime) -> bool:
    return reason_time is not None and (now - reason_time).total_seconds() > REMEDIATING_TTL_S


def wants_rma(rules: Iterable[str]) -> bool:
    return bool(RMA_RULES & set(rules))
