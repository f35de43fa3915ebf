"""`gpufleet facts` as a terminal table: one row per host, its problems in full below.

Like every renderer it reads the JSON view of the facts (redacted, controls removed), and it takes
the GPU and version cells from report/common.py, so a host reads the same here and in `check`.
"""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Mapping
from typing import Any

from rich import box
from rich.table import Table
from rich.text import Text

from gpufleet.model import HostResult, to_jsonable
from gpufleet.redact import clean, text
from gpufleet.report.common import gpu_summary, versions
from gpufleet.report.table import make_console

_COLUMNS = ("host", "status", "OS", "kernel", "driver", "CUDA", "GPUs", "toolkit", "docker",
            "NCCL")


def summary(results: Mapping[str, HostResult]) -> dict[str, Any]:
    """Hosts, their statuses and GPUs counted: the table's first line."""
    statuses = Counter(r.status for r in results.values())
    gpus = sum(r.facts.gpu_count for r in results.values() if r.facts is not None)
    return {
        "hosts": len(results),
        "status": dict(sorted(statuses.items())),
        "gpus": gpus,
        "healthy": statuses.get("ok", 0) == len(results),
    }


def _cells(facts: Mapping[str, Any]) -> tuple[str, ...]:
    v = versions({"facts": facts})
    os_ = facts.get("os") or {}
    driver = v["driver"] or v["kernel_module"] or "-"
    if v["driver"] and v["kernel_module"] and v["driver"] != v["kernel_module"]:
        driver = f"{v['driver']} (module {v['kernel_module']})"
    return (
        " ".join(filter(None, (os_.get("id"), os_.get("version_id")))) or "-",
        v["kernel"] or "-", driver, v["driver_cuda"] or "-",
        gpu_summary(facts) or "none", v["toolkit"] or "-", v["docker"] or "-",
        v["nccl_system"] or "-",
    )


def _problems(result: HostResult) -> str:
    if result.error:
        return result.error
    if result.facts is None:
        return ""
    return "; ".join(f"{family}: {reason}" for family, reason in result.facts.errors.items())


def render(results: Mapping[str, HostResult], *, color: bool = False, width: int = 160) -> str:
    out = io.StringIO()
    console = make_console(out, color=color, width=width)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for column in _COLUMNS:
        table.add_column(column, no_wrap=True, overflow="ellipsis")
    for name, result in results.items():
        status = Text(result.status, style="green" if result.status == "ok" else "bold red")
        cells = ("-",) * 8 if result.facts is None else _cells(clean(to_jsonable(result.facts)))
        # Text, not str: host data is never read as rich markup.
        table.add_row(Text(text(name)), status, *map(Text, cells))
    counts = summary(results)
    not_ok = {s: n for s, n in counts["status"].items() if s != "ok"}
    line = f"{counts['hosts']} host(s), {counts['gpus']} GPU(s)"
    if not_ok:
        line += ", " + ", ".join(f"{n} {s}" for s, n in not_ok.items())
    console.print(Text(line, style="bold green" if counts["healthy"] else "bold red"))
    console.print(table)
    # Problems under the table, in full: a wrapped table cell would cut fingerprints apart.
    problems = [(name, _problems(r)) for name, r in results.items() if _problems(r)]
    if problems:
        console.print(Text("problems", style="bold"))
    for name, problem in problems:
        entry = Text(f"  {text(name)}: ",
                     style="bold red" if results[name].status != "ok" else "yellow")
        entry.append(text(problem))
        console.print(entry)
    # rich pads every cell; trailing blanks only get in the way of diffs and golden files.
    return "".join(line.rstrip() + "\n" for line in out.getvalue().splitlines())
