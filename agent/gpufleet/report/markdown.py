"""Markdown (GitHub flavour): for PR comments, issues and wikis."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpufleet.model import SEVERITIES, fmt_bytes
from gpufleet.redact import markdown
from gpufleet.report import expected
from gpufleet.report.common import busbw_largest, host_worst, summary_line, versions
from gpufleet.report.grouped import group as grouped
from gpufleet.report.wording import row_message


def _cell(value: object) -> str:
    if value is None or value == "":
        return "-"
    # Tool output is data: no HTML, no links or images, no table breaks.
    text = str(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return markdown(text).replace("\n", " ")


def _code(value: str) -> str:
    return f"`` {value} ``" if "`" in value else f"`{value}`"


def render(doc: Mapping[str, Any], *, color: bool = False, width: int = 120) -> str:
    lines = [f"# gpufleet report ({_cell(doc.get('level'))}, "
             f"{_cell(doc.get('generated_at') or 'undated')})",
             "", f"**{_cell(summary_line(doc))}**", "",
             "| host | status | worst | GPUs | driver | CUDA | torch | smoke | busbw |",
             "|---|---|---|---|---|---|---|---|---|"]
    worst = host_worst(doc)
    for name in sorted(doc["hosts"]):
        h = doc["hosts"][name]
        v = versions(h)
        bw = busbw_largest(h)
        row = (name, h["status"] + (f" ({h['error']})" if h.get("error") else ""),
               worst.get(name) or "ok", v["gpus"], v["driver"], v["torch_cuda"] or v["driver_cuda"],
               v["torch"], (h.get("smoke") or {}).get("status"),
               f"{bw[1]:.1f} GB/s @ {fmt_bytes(bw[0])}" if bw else None)
        lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
    measured = expected.rows(doc)
    if measured:  # measured against the SKU/link expectations (docs/expectations.md)
        lines += ["", "## measured against expected", "",
                  "| " + " | ".join(expected.HEADER) + " |", "|---|---|---|---|---|---|"]
        lines += ["| " + " | ".join(_cell(c) for c in r) + " |" for r in measured]
    for sev in SEVERITIES:
        group = [f for f in doc["findings"] if f["severity"] == sev]
        if not group:
            continue
        lines += ["", f"## {sev} ({len(group)})", ""]
        for f in grouped(group):
            many = f"x{f['count']} " if f["count"] > 1 else ""
            lines.append(f"- **{_cell(f['rule'])}** {many}{_cell(f['host_list'])}: "
                         f"{_cell(row_message(f))}")
            lines.append(f"  - fix: {_code(f['remediation'])}")
    return "\n".join(lines) + "\n"
