"""The commands over saved reports and run stores: diff, report, history (and --save's history)."""

from __future__ import annotations

import argparse
import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpufleet.cli import options
from gpufleet.cli.engines import cmd_ansible_report, noted
from gpufleet.cli.options import EXIT_FINDINGS, EXIT_OK, UsageError
from gpufleet.cli.output import Output, check_dir, read_report
from gpufleet.history import RunStore, StoreError, history_section
from gpufleet.history import coverage as cov
from gpufleet.inventory import InventoryError, load_inventory
from gpufleet.model import Report, to_jsonable
from gpufleet.redact import clean, text
from gpufleet.report import document
from gpufleet.report.diff import diff_reports
from gpufleet.report.history_text import render_history
from gpufleet.report.pipeline import drift_of, judge_history


def add(sub: Any) -> None:
    diff = sub.add_parser("diff", help="what changed between two JSON reports",
                          description="Compare two `--format json` reports.")
    diff.add_argument("old", type=Path, metavar="OLD.json")
    diff.add_argument("new", type=Path, metavar="NEW.json")
    diff.set_defaults(run=cmd_diff)

    report = sub.add_parser("report", help="re-render a saved JSON report in any format",
                            description="Render a saved `--format json` report (or a run of a "
                                        "--save store) in any format.")
    report.add_argument("run_file", type=Path, metavar="RUN.json")
    options.output(report)
    report.add_argument("--store", type=Path, metavar="DIR",
                        help="add history from this run store (runs older than RUN.json)")
    report.add_argument("--from-ansible", action="store_true",
                        help="RUN.json is a playbook run's gpufleet.gpu.gpu_facts results (a "
                             "file or directory, as `gpufleet ansible-report` reads them)")
    options.fail_on(report, "with --from-ansible: exit 1 when a finding is at or above this "
                            "severity (default error)", default=None)
    report.set_defaults(run=cmd_report)

    history = sub.add_parser("history", help="per host: last known-good run, what changed, drift",
                             description="Per host, from a --save run store: the last known-good "
                                         "run, what changed since, the busbw trend and drift.")
    history.add_argument("hosts", nargs="*", metavar="HOST",
                         help="host names (patterns with -i); default: every host of the "
                              "latest run")
    history.add_argument("-i", "--inventory", action="append", metavar="INV",
                         help="Ansible inventory to resolve HOST patterns and groups")
    history.add_argument("--store", type=Path, metavar="DIR",
                         default=os.environ.get("GPUFLEET_STORE"),
                         help="the run store written by --save DIR (default $GPUFLEET_STORE)")
    history.add_argument("--format", choices=options.TEXT_OR_JSON, default="table")
    history.set_defaults(run=cmd_history)

    cov = sub.add_parser("coverage", help="per node: age of its last passing check at each depth",
                         description="Per node, from a --save run store: how long ago it last "
                                     "passed a facts, quick, full and multinode check, and the "
                                     "nodes out of their goal (exit 1 when any is).")
    cov.add_argument("hosts", nargs="*", metavar="HOST",
                     help="host names (patterns with -i); default: every host in the store")
    cov.add_argument("-i", "--inventory", action="append", metavar="INV",
                     help="Ansible inventory: its hosts are the nodes (one never checked is out "
                          "of every goal)")
    cov.add_argument("--store", type=Path, metavar="DIR", default=os.environ.get("GPUFLEET_STORE"),
                     help="the run store written by --save DIR (default $GPUFLEET_STORE)")
    cov.add_argument("--goal", action="append", metavar="DEPTH=DURATION",
                     help="coverage goal, e.g. full=7d, multinode=1d (repeatable; default "
                          "full=7d quick=1d); DEPTH: facts, quick, full, multinode")
    cov.add_argument("--format", choices=("table", "json", "prometheus"), default="table")
    cov.add_argument("-o", "--output", type=Path, metavar="FILE",
                     help="write there (atomically) instead of stdout, e.g. for node_exporter")
    cov.set_defaults(run=cmd_coverage)


def cmd_diff(args: argparse.Namespace) -> int:
    old, new = (read_report(path) for path in (args.old, args.new))
    Output().write(diff_reports(old, new))
    return EXIT_OK


def with_history(report: Report, store_dir: Path, *,
                 deltas: bool = True) -> tuple[Report, dict[str, Any]]:
    """The report judged with the store's history (report/pipeline.py `judge_history`) and its
    "history" member; `deltas` False leaves the counter deltas to node-check's --counters."""
    store = RunStore(store_dir)
    try:
        entries = store.entries()
        report = judge_history(report, entries, store.load, deltas=deltas)
        doc = document(report)
        doc["history"] = history_section(doc, entries, store.load)
    except StoreError as exc:
        raise UsageError(f"run store: {exc}") from exc
    finally:
        noted(store)
    return report, doc


def cmd_report(args: argparse.Namespace) -> int:
    if args.from_ansible:  # the same as `gpufleet ansible-report RUN`
        return cmd_ansible_report(argparse.Namespace(
            results=args.run_file, format=args.format, output=args.output,
            fail_on=args.fail_on or "error"))
    if args.fail_on is not None:
        raise UsageError("report: --fail-on goes with --from-ansible (a saved report is "
                         "re-rendered as it is)")
    doc = read_report(args.run_file)
    if args.store is not None:
        store = RunStore(args.store)
        try:
            older = [e for e in store.entries()
                     if e["generated_at"] < str(doc.get("generated_at") or "")]
            doc["history"] = history_section(doc, older, store.load)
        except StoreError as exc:
            raise UsageError(f"run store: {exc}") from exc
        finally:
            noted(store)
    check_dir(args.output)
    out = Output(args.output)
    try:
        out.render(doc, args.format)
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{args.run_file}: cannot render this report: {exc!r}") from exc
    return EXIT_OK


def cmd_history(args: argparse.Namespace) -> int:
    if args.store is None:
        raise UsageError("history: say where the runs are: --store DIR (or $GPUFLEET_STORE)")
    store = RunStore(Path(args.store))
    try:
        entries = store.entries()
        if not entries:
            raise UsageError(f"history: no saved runs in {args.store}")
        latest = store.load(entries[-1])
        names: list[str] = list(args.hosts)
        if args.inventory:
            try:
                specs = load_inventory(args.inventory, ",".join(names) or None)
            except InventoryError as exc:
                raise UsageError(f"inventory: {exc}") from exc
            names = [s.name for s in specs]
        names = names or sorted(latest["hosts"])
        section = history_section(latest, entries[:-1], store.load, hosts=names,
                                  saved=entries[-1])
        drift = drift_of(latest, entries[:-1])
    except StoreError as exc:
        raise UsageError(f"run store: {exc}") from exc
    finally:
        noted(store)
    section["latest"] = {"run": entries[-1]["file"], "generated_at": entries[-1]["generated_at"]}
    section["drift"] = [d for d in map(to_jsonable, drift) if set(d["hosts"]) & set(names)]
    # Every string here came from run files anyone with write access to the store wrote:
    # inert text and redacted, as `report` and `diff` show them (issue 22 F6).
    section = clean(section)
    if args.format == "json":
        Output().write(json.dumps(section, indent=2, ensure_ascii=False))
    else:
        Output().write(render_history(section, known={text(n) for n in latest["hosts"]}))
    return EXIT_FINDINGS if section["drift"] else EXIT_OK


def cmd_coverage(args: argparse.Namespace) -> int:
    if args.store is None:
        raise UsageError("coverage: say where the runs are: --store DIR (or $GPUFLEET_STORE)")
    try:
        goals = dict(map(cov.parse_goal, args.goal)) if args.goal else dict(cov.DEFAULT_GOALS)
    except cov.GoalError as exc:
        raise UsageError(str(exc)) from exc
    try:
        entries = RunStore(Path(args.store)).entries()
    except StoreError as exc:
        raise UsageError(f"run store: {exc}") from exc
    names: list[str] = list(args.hosts)
    if args.inventory:
        try:
            names = [s.name for s in load_inventory(args.inventory, ",".join(names) or None)]
        except InventoryError as exc:
            raise UsageError(f"inventory: {exc}") from exc
    if not names:
        names = sorted({h for e in entries for h in (e.get("hosts") or {})})
    if not names:
        raise UsageError(f"coverage: no nodes: {args.store} has no saved runs; name them with -i")
    rows = cov.coverage(entries, names, goals, datetime.now(timezone.utc))
    if args.format == "json":
        text = json.dumps({"goals": {d: g.total_seconds() for d, g in goals.items()},
                           "nodes": [to_jsonable(r) for r in rows]}, indent=2) + "\n"
    elif args.format == "prometheus":
        text = cov.render_prometheus(rows, goals)
    else:
        text = cov.render_text(rows, goals)
    Output(args.output).write(text)
    return EXIT_FINDINGS if any(r.overdue for r in rows) else EXIT_OK
