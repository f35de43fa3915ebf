"""What a rule id is (RuleInfo), its families and the remediation templates the catalog's
tables share (rules/catalog.py assembles the tables)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpufleet.model import Severity


@dataclass(frozen=True)
class RuleInfo:
    id: str
    severity: Severity  # usual severity; a rule may report lower where its meaning says so
    title: str
    remediation: str
    # When it fires, for docs/rules.md (generated from this table: scripts/rules_doc.py).
    meaning: str = ""
    # What docs/rules.md shows in place of the remediation's per-finding values ({fix}, {hint}).
    doc_fill: Mapping[str, str] = field(default_factory=dict)

    @property
    def family(self) -> str:
        return FAMILIES[self.id[:3] + "xx"]


FAMILIES: Mapping[str, str] = {
    "GF0xx": "host state",
    "GF1xx": "desired state",
    "GF2xx": "peer drift",
    "GF3xx": "compatibility",
    "GF4xx": "hardware",
    "GF5xx": "performance",
    "GF6xx": "smoke",
    "GF7xx": "configuration",
    "GF8xx": "workspaces",
    "GF9xx": "node-local (Slurm)",
}

_SITE = "ansible-playbook gpufleet.gpu.site"
# -i: the inventory the check ran on; an exact nvidia_driver_version there wins over a branch,
# so moving to a branch clears it on the command line.
_UPGRADE = "ansible-playbook -i INVENTORY gpufleet.gpu.upgrade_driver -l {host}"
_WS = _SITE + " --tags pytorch_workspace -l {host}"
_DRIFT = (
    "align {host} with the majority ({majority}): pin the variable in group_vars, then run "
    "`" + _SITE + " --tags {tag} -l {host}`"
)

_RERUN = " (on {host}); then rerun `gpufleet smoke -l {host} --level full`"
