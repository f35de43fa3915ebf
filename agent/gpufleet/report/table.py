"""Terminal table (rich): summary line, one row per host, findings grouped by severity."""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpufleet.model import SEVERITIES, fmt_bytes
from gpufleet.report import expected
from gpufleet.report.common import busbw_largest, host_worst, summary_line, versions
from gpufleet.report.grouped import group as grouped
from gpufleet.report.wording import row_message
from gpufleet.rules import RULES

_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan", "ok": "green"}


def make_console(out: io.StringIO, *, color: bool, width: int) -> Console:
    """A console writing to `out`; also the facts table's (report/facts_table.py)."""
    # Fixed width and no terminal detection: the same report always renders the same text.
    return Console(file=out, width=width, force_terminal=color, no_color=not color,
                   color_system="standard" if color else None, highlight=False,
                   emoji=False, legacy_windows=False)


def render(doc: Mapping[str, Any], *, color: bool = False, width: int = 120) -> str:
    out = io.StringIO()
    console = make_console(out, color=color, width=width)
    healthy = doc["summary"]["healthy"]
    console.print(Text(summary_line(doc), style="bold green" if healthy else "bold red"))
    worst = host_worst(doc)
    hosts = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for col in ("host", "status", "worst", "GPUs", "driver", "CUDA", "torch", "smoke", "busbw"):
        hosts.add_column(col, overflow="fold")
    for name in sorted(doc["hosts"]):
        h = doc["hosts"][name]
        v = versions(h)
        smoke = h.get("smoke") or {}
        bw = busbw_largest(h)
        w = worst.get(name) or "ok"
        hosts.add_row(  # Text, not str: rich would read markup in host data
            Text(name),
            Text(str(h["status"]), style=_STYLE["ok"] if h["status"] == "ok" else _STYLE["error"]),
            Text(w, style=_STYLE[w]),
            *(Text(str(c or "-")) for c in (
                v["gpus"], v["driver"], v["torch_cuda"] or v["driver_cuda"], v["torch"],
                smoke.get("status"), f"{bw[1]:.1f} GB/s @ {fmt_bytes(bw[0])}" if bw else None)),
        )
    console.print(hosts)
    measured = expected.rows(doc)
    if measured:  # measured against the SKU/link expectations (docs/expectations.md)
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
        for col in expected.HEADER:
            table.add_column(col, overflow="fold")
        for row in measured:
            table.add_row(*(Text(c, style=_STYLE["ok" if c == "ok" else "error"]
                                 if i == 5 else "") for i, c in enumerate(row)))
        console.print(table)
    for sev in SEVERITIES:
        group = [f for f in doc["findings"] if f["severity"] == sev]
        if not group:
            continue
        console.print(Text(f"{sev.upper()} ({len(group)})", style=_STYLE[sev]))
        for f in grouped(group):
            title = RULES[f["rule"]].title if f["rule"] in RULES else ""
            line = Text(f"  {f['rule']} ", style=_STYLE[sev])
            line.append((f"x{f['count']} {f['host_list']}: " if f["count"] > 1 else
                         f"[{f['host_list']}] ") + row_message(f))
            # Findings are not wrapped: long commands stay copy-pasteable on one line.
            console.print(line, soft_wrap=True)
            console.print(Text(f"      {title}; fix: {f['remediation']}", style="dim"),
                          soft_wrap=True)
    return out.getvalue()
