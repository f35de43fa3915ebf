"""GF701-GF704: NCCL settings that cut bandwidth or hide hardware (gpufleet.ncclconf).

Read at `--level facts` from /etc/nccl.conf, the user file (NCCL_CONF_FILE or ~/.nccl.conf)
and the ssh user's environment; only the setting NCCL would actually use is judged.
"""

from __future__ import annotations

from collections.abc import Iterator

from gpufleet.model import Finding
from gpufleet.ncclconf import ENVIRONMENT, degrading
from gpufleet.rules.base import Ctx, finding

# The ids this module emits (tests/unit/test_rules_plumbing.py holds it to that).
RULES: tuple[str, ...] = ("GF701", "GF702", "GF703", "GF704")


def _multinode(ctx: Ctx, host: str) -> bool:
    """In a named inventory group with another host: it may run multinode jobs."""
    groups = set(ctx.groups(host)) - {"all"}
    return any(set(s.groups) & groups for n, s in ctx.report.specs.items() if n != host)


def check(ctx: Ctx) -> Iterator[Finding]:
    for h, f in ctx.with_facts():
        conf = f.nccl_config
        if conf is None or not f.gpus:
            continue
        multinode = _multinode(ctx, h.name)
        for s, d in degrading(conf):
            if d.rule == "GF702" and not multinode:
                continue
            where = "the ssh user's environment" if s.source == ENVIRONMENT else s.source
            fix = (f"unset {s.name} where the environment is set (~/.ssh/environment, "
                   "/etc/environment, sshd SetEnv)" if s.source == ENVIRONMENT
                   else f"remove the {s.name} line from {s.source}")
            yield finding(d.rule, [h.name], f"{h.name}: {s.name}={s.value} in {where}: {d.why}",
                          {"name": s.name, "value": s.value, "source": s.source,
                           "why": d.why, "reference": d.source, "subject": s.name},
                          fix=fix)
        conf_file = next((s.value for s in conf.effective if s.name == "NCCL_CONF_FILE"), None)
        if conf_file and conf.files.get(conf_file) in ("absent", "unreadable"):
            yield finding("GF704", [h.name],
                          f"{h.name}: NCCL_CONF_FILE={conf_file} is {conf.files[conf_file]}",
                          {"path": conf_file, "state": conf.files[conf_file]})
