"""The localize result as the report's `localize` section (JSON) and as a table for people."""

from __future__ import annotations

import io
import shlex
from collections.abc import Mapping
from typing import Any

from gpufleet.localize.search import Localization, Suspect
from gpufleet.localize.worlds import LocalizeRun
from gpufleet.model import HostSpec
from gpufleet.redact import clean

Doc = dict[str, Any]


def remediation(suspect: Suspect, specs: Mapping[str, HostSpec], worlds: str,
                rail: str | None = None) -> str:
    """What to do about a suspect: drain it (a Slurm line where the inventory names the node).
    On a rail: the NIC of that rail on that host, or that rail's path between two hosts."""
    on = f" on rail {rail}" if rail else ""
    reason = f"gpufleet localize: slow or failing in multinode worlds {worlds}{on}"
    lines = []
    if suspect.kind == "host" and rail:
        (host,) = suspect.hosts
        lines.append(f"check rail {rail} on {host} (that NIC, its cable and switch port: "
                     f"`ip -s link show {rail}`, `ethtool {rail}`, `ibstat`); keep {host} out of "
                     "multi-host jobs meanwhile")
    elif suspect.kind == "host":
        (host,) = suspect.hosts
        lines.append(f"drain {host}: keep it out of multi-host jobs (e.g. --limit '!{host}') "
                     "until its network path (NIC, cable, switch port) is checked")
    elif suspect.kind == "link":
        a, b = suspect.hosts
        lines.append(f"check the path between {a} and {b}{on} (cables, switch ports, routing): "
                     "each passes with other hosts; drain one of them from multi-host jobs "
                     "meanwhile")
    else:
        lines.append("rerun `gpufleet localize` limited to these hosts; no single host or pair "
                     "reproduced the failure")
    for host in suspect.hosts[:1] if suspect.kind != "host" else suspect.hosts:
        node = specs[host].expect.slurm_node if host in specs else None
        if node:
            lines.append(f"scontrol update NodeName={shlex.quote(node)} State=DRAIN "
                         f"Reason={shlex.quote(reason)}")
    return "; ".join(lines)


def section(run: LocalizeRun) -> Doc:
    """The `localize` section of the report (gpufleet/schema/report-v1.json: $defs.localize):
    the search, and with --rails one search per rail under "rails"."""
    doc = _search(run, run.search)
    doc["outcome"] = run.outcome
    if run.rails:
        doc["search_outcome"] = run.search.outcome
        doc["rails"] = {r.rail: {**_search(run, r.search, rail=r.rail), "missing": list(r.missing)}
                        for r in run.rails}
    # World errors, reasons and exclusions are host output: inert here, once, for every format
    # (security review F8: escapes reached the terminal and tokens the JSON).
    cleaned: Doc = clean(doc)
    return cleaned


def _search(run: LocalizeRun, s: Localization, rail: str | None = None) -> Doc:
    worlds = [{
        "index": w.index, "stage": w.stage, "members": list(w.members), "passed": w.passed,
        "judged": w.verdict.judged, "busbw_gbps": w.measured.busbw_gbps,
        "threshold_gbps": w.verdict.threshold_gbps, "basis": w.verdict.basis,
        "reason": w.verdict.reason, "error": w.measured.error, "hung": w.measured.hung,
        "duration_s": round(w.measured.duration_s, 3),
    } for w in s.worlds]  # fmt: skip
    suspects = []
    for sus in s.suspects:
        ids = ", ".join(str(i) for i in sus.convicted_by)
        suspects.append({
            "kind": sus.kind, "hosts": list(sus.hosts), "convicted_by": list(sus.convicted_by),
            "cleared_by": list(sus.cleared_by), "reason": sus.reason,
            "remediation": remediation(sus, run.specs, ids, rail),
        })  # fmt: skip
    return {
        "outcome": s.outcome,
        "strategy": s.strategy,
        "expectation": run.expectation,
        "hosts": list(s.hosts),
        "excluded": {n: {"status": e.status, "reason": e.reason} for n, e in run.excluded.items()},
        "suspects": suspects,
        "good": list(s.good),
        "undecided": list(s.undecided),
        "worlds_run": len(s.worlds),
        "wall_s": s.wall_s,
        "worlds": worlds,
        "notes": list(s.notes),
    }


def _members(members: list[str], limit: int = 6) -> str:
    if len(members) <= limit:
        return ", ".join(members)
    return ", ".join(members[:limit]) + f", … ({len(members)} hosts)"


def table(doc: Mapping[str, Any], *, color: bool = False, width: int = 120) -> str:
    """The section for a terminal: verdict first, then suspects with evidence, then worlds."""
    from rich import box  # noqa: PLC0415
    from rich.console import Console  # noqa: PLC0415
    from rich.table import Table  # noqa: PLC0415
    from rich.text import Text  # noqa: PLC0415

    out = io.StringIO()
    con = Console(file=out, width=width, force_terminal=color, no_color=not color,
                  color_system="standard" if color else None, highlight=False, emoji=False,
                  markup=False)  # host names and errors are data: "[n01, n02]" is no markup tag
    loc = doc["localize"]
    worlds = {w["index"]: w for w in loc["worlds"]}
    rails = list((loc.get("rails") or {}).values())
    head = {"all_good": ("all good", "bold green"),
            "suspects": (f"{len(loc['suspects']) + sum(len(r['suspects']) for r in rails)} "
                         "suspect(s)", "bold red"),
            "inconclusive": ("inconclusive", "bold yellow")}[loc["outcome"]]
    con.print(Text(f"{head[0]}: {len(loc['hosts'])} host(s) tested, {loc['worlds_run']} "
                   f"world(s) in {loc['wall_s']:.1f} s (first level: {loc['strategy']}; slow "
                   f"judged by {loc['expectation']})", style=head[1]))
    for name, ex in loc["excluded"].items():
        con.print(Text(f"  left out {name} ({ex['status']}): {ex['reason']}", style="yellow"))
    for sus in loc["suspects"]:
        con.print(Text(f"{sus['kind']} {' <-> '.join(sus['hosts'])}: {sus['reason']}",
                       style="bold red"))
        for i in sus["convicted_by"]:
            w = worlds[i]
            bw = f"{w['busbw_gbps']:.4g} GB/s" if w["busbw_gbps"] is not None else "-"
            con.print(f"  world {i} [{_members(w['members'])}]: {bw}; {w['reason']}")
        con.print(f"  fix: {sus['remediation']}")
    if loc["undecided"] and loc["outcome"] != "all_good":
        con.print(Text(f"undecided: {', '.join(loc['undecided'])}", style="yellow"))
    for note in loc["notes"]:
        con.print(Text(f"note: {note}", style="yellow"))
    for rail, r in (loc.get("rails") or {}).items():
        con.print(Text(f"rail {rail}: {r['outcome'].replace('_', ' ')}, {r['worlds_run']} "
                       f"world(s)" + (f"; without it: {', '.join(r['missing'])}"
                                      if r["missing"] else ""),
                       style="bold red" if r["suspects"] else "green"))
        for sus in r["suspects"]:
            con.print(Text(f"  {sus['kind']} {' <-> '.join(sus['hosts'])} on rail {rail}: "
                           f"{sus['reason']}", style="red"))
            con.print(f"  fix: {sus['remediation']}")
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for col in ("#", "stage", "members", "busbw GB/s", "verdict", "s"):
        t.add_column(col, no_wrap=col != "members", overflow="fold")
    for w in loc["worlds"]:
        bw = f"{w['busbw_gbps']:.4g}" if w["busbw_gbps"] is not None else "-"
        verdict = ("pass" if w["passed"] else "FAIL") + ("" if w["judged"] else " (not judged)")
        if w["error"]:
            verdict += f": {w['error'][:80]}"
        t.add_row(str(w["index"]), w["stage"], _members(w["members"]), bw,
                  Text(verdict, style="green" if w["passed"] else "red"),
                  f"{w['duration_s']:.1f}")
    con.print(t)
    return "".join(line.rstrip() + "\n" for line in out.getvalue().splitlines())
