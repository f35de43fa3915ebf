"""A small self-contained HTML page. Every value is escaped: host names and tool output are data."""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any

from gpufleet.model import SEVERITIES, fmt_bytes
from gpufleet.report.common import busbw_largest, host_worst, summary_line, versions
from gpufleet.report.grouped import group as grouped
from gpufleet.report.wording import row_message

_CSS = (
    "body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:.25em .5em;text-align:left}"
    ".error{color:#b00}.warning{color:#a60}.info{color:#06a}.ok{color:#080}"
    "code{background:#f4f4f4}"
)


def _e(value: object) -> str:
    return escape("-" if value is None or value == "" else str(value), quote=True)


def render(doc: Mapping[str, Any], *, color: bool = False, width: int = 120) -> str:
    title = f"gpufleet report {doc.get('generated_at') or ''}".strip()
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
             f"<h1>{_e(title)}</h1>",
             f'<p class="{"ok" if doc["summary"]["healthy"] else "error"}">'
             f"{_e(summary_line(doc))}</p>",
             "<table><thead><tr>"
             + "".join(f"<th>{c}</th>" for c in ("host", "status", "worst", "GPUs", "driver",
                                                  "CUDA", "torch", "smoke", "busbw"))
             + "</tr></thead><tbody>"]
    worst = host_worst(doc)
    for name in sorted(doc["hosts"]):
        h = doc["hosts"][name]
        v = versions(h)
        bw = busbw_largest(h)
        w = worst.get(name) or "ok"
        status = h["status"] + (f": {h['error']}" if h.get("error") else "")
        cells = [f"<td>{_e(name)}</td>",
                 f'<td class="{"ok" if h["status"] == "ok" else "error"}">{_e(status)}</td>',
                 f'<td class="{_e(w)}">{_e(w)}</td>'] + [
            f"<td>{_e(c)}</td>" for c in (
                v["gpus"], v["driver"], v["torch_cuda"] or v["driver_cuda"], v["torch"],
                (h.get("smoke") or {}).get("status"),
                f"{bw[1]:.1f} GB/s @ {fmt_bytes(bw[0])}" if bw else None)]
        parts.append("<tr>" + "".join(cells) + "</tr>")
    parts.append("</tbody></table>")
    for sev in SEVERITIES:
        group = [f for f in doc["findings"] if f["severity"] == sev]
        if not group:
            continue
        parts.append(f'<h2 class="{sev}">{sev} ({len(group)})</h2><ul>')
        for f in grouped(group):
            many = f"x{f['count']} " if f["count"] > 1 else ""
            parts.append(
                f'<li><b class="{sev}">{_e(f["rule"])}</b> {many}{_e(f["host_list"])}: '
                f'{_e(row_message(f))}<br>fix: <code>{_e(f["remediation"])}</code></li>')
        parts.append("</ul>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
