"""`gpufleet history` as text: per host its last known-good run, what changed, trend and drift."""

from __future__ import annotations

from collections.abc import Mapping, Set
from typing import Any

from gpufleet.model import fmt_bytes
from gpufleet.report.wording import row_message


def _trend(points: list[Mapping[str, Any]]) -> str | None:
    got = [p for p in points if p.get("busbw") is not None]
    if not got:
        return None
    size = got[-1]["bytes"]
    return (f"busbw @ {fmt_bytes(int(size))} (GB/s, oldest first): "
            + ", ".join(f"{p['busbw']:.1f}" + ("" if p.get("good") else "!")
                        for p in got if p["bytes"] == size))


def render_history(section: Mapping[str, Any], known: Set[str]) -> str:
    latest = section.get("latest") or {}
    lines = [f"gpufleet history: latest run {latest.get('generated_at')} ({latest.get('run')}), "
             f"{len(section.get('runs') or [])} earlier run(s)"]
    drift = section.get("drift") or []
    for name, h in section["hosts"].items():
        if name not in known and not h["trend"]:
            lines.append(f"{name}: not in the saved runs")
            continue
        good = h.get("last_good")
        lines.append(f"{name}: last known-good run "
                     + (f"{good['generated_at']} ({good['run']})" if good else "none in the store"))
        before = h.get("changes_since")  # the latest run is the good one: against the one before
        if good and before:
            lines.append(f"  changed since its good run of {before['generated_at']}:"
                         if h["changes"] else
                         f"  nothing changed since its good run of {before['generated_at']}")
            lines += [f"    {c}" for c in h["changes"]]
        elif good:
            lines.append("  changed since:" if h["changes"] else "  nothing changed since")
            lines += [f"    {c}" for c in h["changes"]]
        trend = _trend(h["trend"])
        if trend:
            lines.append(f"  {trend}  (! = not a good run)")
        lines += [f"  drift {f['rule']}: {row_message(f)}" for f in drift if name in f["hosts"]]
    return "\n".join(lines) + "\n"
