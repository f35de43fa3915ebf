"""GF0xx: a host that could not be checked is itself a finding."""

from __future__ import annotations

from collections.abc import Iterator

from gpufleet.model import Finding
from gpufleet.rules.base import Ctx, finding
from gpufleet.rules.catalog import FACT_HINT_DEFAULT, FACT_HINTS

# The ids this module emits (tests/unit/test_rules_plumbing.py holds it to that).
RULES: tuple[str, ...] = ("GF001", "GF002", "GF003", "GF008", "GF004", "GF005", "GF006", "GF010")

_BY_STATUS = {
    "unreachable": ("GF001", "unreachable"),
    "auth_failed": ("GF002", "SSH authentication failed"),
    "hostkey_mismatch": ("GF003", "SSH host key does not match known_hosts"),
    "hostkey_unknown": ("GF008", "SSH host key not yet known"),
    "timeout": ("GF004", "timed out"),
    "error": ("GF006", "check failed"),
}


def check(ctx: Ctx) -> Iterator[Finding]:
    for name in sorted(ctx.report.hosts):
        h = ctx.report.hosts[name]
        if h.status in _BY_STATUS:
            rule, what = _BY_STATUS[h.status]
            yield finding(
                rule, [name], f"{name}: {what}" + (f": {h.error}" if h.error else ""),
                {"status": h.status, "error": h.error}, address=ctx.address(name),
            )
        smoke_busy = h.smoke is not None and h.smoke.status == "busy"
        if h.status == "busy" or smoke_busy:
            procs = [
                {"pid": p.pid, "name": p.name, "gpu_uuid": p.gpu_uuid}
                for p in (h.facts.gpu_processes if h.facts else ())
            ]
            yield finding(
                "GF005", [name],
                f"{name}: GPUs busy with {len(procs) or 'other'} process(es); smoke test skipped",
                {"status": h.status, "processes": procs, "error": h.error},
            )
        if h.facts is not None:
            for family, reason in sorted(h.facts.errors.items()):
                # A tool that is missing is a fact; one that hangs is a sick host.
                hung = any(w in reason.lower() for w in ("hung", "did not finish", "timed out"))
                yield finding(
                    "GF010", [name], f"{name}: {family} not collected: {reason}",
                    {"family": family, "reason": reason, "subject": family},
                    severity="warning" if hung else None,
                    hint=FACT_HINTS.get(family, FACT_HINT_DEFAULT).replace("{host}", name),
                )
