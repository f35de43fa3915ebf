"""What a finding does to a Slurm node: the drain policy, one table (docs/slurm.md renders it;
tests/unit/test_drain_policy.py fails while the page is stale).

Only the state of the node's hardware and driver drains it: a job placed there fails or
corrupts. A security floor or CVE, an end-of-life branch and drift that jobs survive are
scheduled or warned about: they are true of many nodes at once (one advisory covers the whole
fleet), and draining for them empties a partition and spends the circuit breaker that a dead GPU
needs. Each drain has a class; the breaker counts only drains of the same class
(engines/slurm/drain.py), so software drains never keep a hardware fault in service.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from gpufleet.rules.catalog import FAMILIES, RULES

Outcome = Literal["drain", "schedule", "warn"]
DrainClass = Literal["hardware", "driver", "software"]
# The order in which a drain reason names its findings (after an RMA verdict and severity).
CLASS_RANK: Mapping[DrainClass, int] = {"hardware": 0, "driver": 1, "software": 2}


@dataclass(frozen=True)
class Policy:
    outcome: Outcome
    klass: DrainClass | None  # the breaker class of a drain; None when it does not drain
    reason: str


def _drain(klass: DrainClass, reason: str) -> Policy:
    return Policy("drain", klass, reason)


_SCHEDULE_SECURITY = Policy(
    "schedule", None, "a security floor or advisory: true of every node on that version at once, "
    "so it is a planned upgrade (rolling, `upgrade_*` playbooks), not a health fault; jobs run")
_SCHEDULE_EOL = Policy("schedule", None, "end of life: plan the upgrade; jobs run today")
_WARN_DRIFT = Policy("warn", None, "drift that jobs survive: align it at the next rollout")

# Per rule family (rules/catalog.py FAMILIES), the default.
FAMILY_POLICY: Mapping[str, Policy] = {
    "GF0xx": _drain("software", "the node's own state (disk full, check failed): jobs fail"),
    "GF1xx": Policy("schedule", None, "a version other than the pinned one: the next rollout "
                    "(`site.yml`) aligns it; jobs run"),
    "GF2xx": _WARN_DRIFT,
    "GF3xx": _drain("driver", "driver and library compatibility: CUDA or NVML fail on the node"),
    "GF4xx": _drain("hardware", "GPU, memory, NVLink, PCIe or RDMA state: jobs fail or "
                    "corrupt results"),
    "GF5xx": _drain("hardware", "measured performance below its floor: a slow GPU or link "
                    "slows every job that spans it"),
    "GF6xx": _drain("hardware", "the smoke test failed on the node's GPUs or fabric"),
    "GF7xx": Policy("warn", None, "an NCCL setting: jobs run, slower; fix the file"),
    "GF8xx": Policy("warn", None, "a workspace container: its owner's matter, not the node's"),
    "GF9xx": Policy("warn", None, "the health check's own outcome: never a reason to drain"),
}

# Rules whose family default does not fit them.
RULE_POLICY: Mapping[str, Policy] = {
    "GF005": Policy("warn", None, "busy: the check could not run now; the next one will"),
    "GF007": Policy("schedule", None, "a reboot pending for a newer kernel: reboot when idle"),
    "GF010": Policy("warn", None, "a fact not collected: said, not guessed"),
    "GF106": _drain("hardware", "fewer GPUs than expected: a GPU is gone"),
    "GF107": _drain("software", "the container engine is missing: container jobs fail"),
    "GF302": _SCHEDULE_EOL,
    "GF303": _SCHEDULE_SECURITY,
    "GF305": Policy("warn", None, "NCCL versions of a multinode group: the group's matter"),
    "GF306": _WARN_DRIFT,
    "GF307": _SCHEDULE_SECURITY,
    "GF308": _SCHEDULE_SECURITY,
    "GF309": _SCHEDULE_SECURITY,
    "GF310": _SCHEDULE_SECURITY,
    "GF409": _drain("driver", "persistence mode off: driver state, jobs start slowly or fail"),
    "GF410": _drain("driver", "MIG enabled where not expected: jobs see slices, not GPUs"),
    "GF414": _drain("driver", "ECC protection off: memory errors go undetected"),
    "GF415": _drain("driver", "nvidia-smi hung: the driver is wedged"),
    "GF460": Policy("warn", None, "no GPUDirect RDMA path: a configuration to fix, jobs run"),
    "GF542": Policy("warn", None, "no SKU reference: nothing to judge against"),
    "GF543": Policy("warn", None, "another process used the GPU: the measurement, not the node"),
    "GF605": _drain("software", "cuDNN missing from the image: torch jobs fail"),
    "GF606": _drain("software", "torch.compile failed in the image"),
    "GF607": _drain("software", "torch.compile differs from eager in the image"),
    "GF608": Policy("warn", None, "no triton in the image: eager still works"),
    "GF609": Policy("warn", None, "an environment variable: the job's setting"),
}


def policy(rule: str) -> Policy:
    """The policy of a rule id (an id no catalog knows drains as hardware: fail safe)."""
    found = RULE_POLICY.get(rule) or FAMILY_POLICY.get(rule[:3] + "xx")
    return found or _drain("hardware", "a rule this table does not know")


_RULE_IN_REASON = re.compile(r"\bGF\d{3}\b")


def class_of_reason(reason: str | None) -> DrainClass:
    """The class of a drain gpufleet wrote, read back from its reason (the first rule id).
    "remediating"/"re-validating" and reasons without an id are hardware: the remediation
    rungs exist for hardware faults. A drain for a rule that no longer drains (a security floor
    drained by an older gpufleet) is software: it never holds a hardware drain."""
    m = _RULE_IN_REASON.search(reason or "")
    if m is None:
        return "hardware"
    return policy(m.group(0)).klass or "software"


def render_markdown() -> str:
    """The table docs/slurm.md shows between its drain-policy markers."""
    rows = ["| rules | outcome | breaker class | why |", "|---|---|---|---|"]
    for fam, p in FAMILY_POLICY.items():
        rows.append(f"| {fam} ({FAMILIES[fam]}) | {p.outcome} | {p.klass or '—'} | {p.reason} |")
    for rule, p in RULE_POLICY.items():
        title = RULES[rule].title if rule in RULES else "?"
        rows.append(f"| {rule} ({title}) | {p.outcome} | {p.klass or '—'} | {p.reason} |")
    return "\n".join(rows) + "\n"
