"""`gpufleet diff OLD.json NEW.json`: per host, what changed between two reports.

Findings are matched by (rule, host, subject) rather than by message, so a number that moved
inside a message (a bandwidth, a count) is not reported as one finding resolved and another new.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpufleet.model import SEVERITIES, fmt_bytes
from gpufleet.redact import clean
from gpufleet.report.common import busbw_largest, summarize_doc, versions

# busbw changes smaller than this fraction are run-to-run noise.
BUSBW_CHANGE = 0.10

Key = tuple[str, str, str]


def _findings(doc: Mapping[str, Any]) -> dict[Key, Mapping[str, Any]]:
    out: dict[Key, Mapping[str, Any]] = {}
    for f in doc.get("findings", []):
        subject = str((f.get("evidence") or {}).get("subject", ""))
        for h in f.get("hosts", []):
            out.setdefault((h, f["rule"], subject), f)
    return out


def _line(sign: str, f: Mapping[str, Any]) -> str:
    return f"  {sign} {f['rule']} {f['severity']}: {f['message']}"


def diff_reports(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """Human-readable changes from `old` to `new` (both parsed report JSON)."""
    old, new = clean(old), clean(new)  # reports hold host data: inert text only
    old_h, new_h = old.get("hosts", {}), new.get("hosts", {})
    old_f, new_f = _findings(old), _findings(new)
    lines = [f"gpufleet diff: {old.get('generated_at') or 'old'} -> "
             f"{new.get('generated_at') or 'new'}"]
    before, after = (d.get("summary") or summarize_doc(d) for d in (old, new))
    moved = [f"{sev} {before['findings'][sev]} -> {after['findings'][sev]}"
             for sev in SEVERITIES if before["findings"][sev] != after["findings"][sev]]
    if moved:
        lines.append("findings: " + ", ".join(moved))
    unchanged: list[str] = []
    for name in sorted(set(old_h) | set(new_h)):
        if name not in new_h:
            lines.append(f"{name}: removed (was {old_h[name].get('status')})")
            continue
        if name not in old_h:
            lines.append(f"{name}: added ({new_h[name].get('status')})")
        changes: list[str] = []
        a, b = old_h.get(name, {}), new_h[name]
        if a and a.get("status") != b.get("status"):
            changes.append(f"  status: {a.get('status')} -> {b.get('status')}")
        if a:
            va, vb = versions(a), versions(b)
            for field in vb:
                if va[field] != vb[field] and a.get("facts") and b.get("facts"):
                    changes.append(f"  {field}: {va[field] or '-'} -> {vb[field] or '-'}")
            bwa, bwb = busbw_largest(a), busbw_largest(b)
            if bwa and bwb and bwa[0] == bwb[0] and abs(bwb[1] - bwa[1]) > BUSBW_CHANGE * bwa[1]:
                changes.append(f"  busbw @ {fmt_bytes(bwa[0])}: {bwa[1]:.1f} -> {bwb[1]:.1f} GB/s")
        for key in sorted(k for k in new_f if k[0] == name and k not in old_f):
            changes.append(_line("+", new_f[key]))
        for key in sorted(k for k in old_f if k[0] == name and k not in new_f):
            changes.append(_line("-", old_f[key]) + " (resolved)")
        for key in sorted(k for k in new_f if k[0] == name and k in old_f):
            if new_f[key]["severity"] != old_f[key]["severity"]:
                changes.append(f"  ~ {key[1]} {old_f[key]['severity']} -> "
                               f"{new_f[key]['severity']}: {new_f[key]['message']}")
        if changes:
            if name in old_h:
                lines.append(f"{name}:")
            lines.extend(changes)
        elif name in old_h:
            unchanged.append(name)
    if len(lines) == 1 + bool(moved):
        lines.append("no changes")
    elif unchanged:
        lines.append(f"unchanged: {', '.join(unchanged)}")
    return "\n".join(lines) + "\n"
