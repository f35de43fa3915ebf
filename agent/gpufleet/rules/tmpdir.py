"""GF011: a host whose temporary directory takes no write (a full /tmp).

One finding that names the path and its free space, so the facts read elsewhere and the
smoke's failure are read in that light, not as missing tools.
"""

from __future__ import annotations

from collections.abc import Iterator

from gpufleet.model import Finding, fmt_bytes
from gpufleet.rules.base import Ctx, finding

RULES: tuple[str, ...] = ("GF011",)


def check(ctx: Ctx) -> Iterator[Finding]:
    for name in sorted(ctx.report.hosts):
        facts = ctx.report.hosts[name].facts
        tmp = facts.tmpdir if facts is not None else None
        if tmp is None or tmp.writable:
            continue
        free = "unknown space" if tmp.free_bytes is None else fmt_bytes(tmp.free_bytes)
        went = f"the probe went on in {tmp.fallback}" if tmp.fallback else "the probe stopped"
        yield finding(
            "GF011", [name],
            f"{tmp.path} on {name}: {free} free, a file written there keeps no content (no "
            f"space left on device); {went}, the smoke test needs ~1 MiB there",
            {"path": tmp.path, "free_bytes": tmp.free_bytes, "fallback": tmp.fallback,
             "subject": tmp.path},
            address=ctx.address(name), path=tmp.path,
        )
