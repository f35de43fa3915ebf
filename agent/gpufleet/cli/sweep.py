"""The commands that sweep hosts: facts, check, smoke (and smoke --slurm), localize."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpufleet.cli import options, saved
from gpufleet.cli.options import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, UsageError
from gpufleet.cli.output import Output, check_dir, check_store
from gpufleet.engines.slurm.smoke import AllocationError, run_slurm_smoke
from gpufleet.history import RunStore, StoreError
from gpufleet.inventory import (
    ExpectError,
    InventoryError,
    default_sources,
    load_expectations,
    load_inventory,
)
from gpufleet.localize import render as localize_render
from gpufleet.localize.rails import check_names
from gpufleet.localize.worlds import run_localize
from gpufleet.model import HostResult, HostSpec, Report
from gpufleet.redact import text as inert
from gpufleet.report import document, exit_code, facts_table
from gpufleet.report.pipeline import judge, summarized
from gpufleet.smoke import levels
from gpufleet.sweep.sweep import gather_facts, run_check


def add(sub: Any) -> None:
    facts = sub.add_parser("facts", help="collect facts from every host",
                           description="Collect facts (versions, GPUs, health) from every host.")
    options.connection(facts, options.TEXT_OR_JSON)
    facts.set_defaults(run=cmd_facts)

    check = sub.add_parser("check", help="facts + smoke test + rules → report",
                           description="Facts, smoke test and rules: the full verdict.")
    options.connection(check, options.FORMATS)
    options.smoke(check, levels.CHECK_LEVELS, "quick")
    check.set_defaults(run=cmd_check)

    smoke = sub.add_parser("smoke", help="facts + DDP/NCCL smoke test",
                           description="Run the DDP/NCCL smoke test (after facts) and report.")
    options.connection(smoke, options.FORMATS)
    options.smoke(smoke, levels.SMOKE_LEVELS, "quick")
    smoke.add_argument("--slurm", action="store_true",
                       help="inside a Slurm allocation: one world over the allocated nodes, "
                            "launched with srun (implies --multinode; -i is not used)")
    smoke.add_argument("--expect", type=Path, metavar="FILE",
                       help="with --slurm: expectations file (inventory variables) for the nodes")
    smoke.set_defaults(run=cmd_check)


def add_localize(sub: Any) -> None:
    loc = sub.add_parser("localize", help="find the host or link that breaks multinode worlds",
                         description="Adaptive group testing over multinode smoke worlds: "
                                     "names the bad host(s) or link(s), with the worlds as "
                                     "evidence (docs/localize.md).")
    options.connection(loc, options.TEXT_OR_JSON)
    loc.add_argument("--level", choices=levels.SMOKE_LEVELS, default="quick",
                     help="smoke level of each world (default quick)")
    loc.add_argument("--force", action="store_true", help="test hosts whose GPUs are busy")
    loc.add_argument("--smoke-timeout", type=options.positive(float), metavar="S",
                     help="seconds per world (default 300 quick, 1800 full)")
    loc.add_argument("--groups", choices=("auto", "domain", "binary", "sqrt"), default="auto",
                     help="first level below the all-hosts world: gpufleet_domain groups, two "
                          "halves, or ceil(sqrt(N)) groups (auto: domains, else halves when "
                          "the bandwidth has an expectation, else sqrt)")
    loc.add_argument("--max-worlds", type=options.positive(int), default=64, metavar="N",
                     help="stop after N worlds (default 64)")
    loc.add_argument("--rails", metavar="IF,IF", default="",
                     help="also search rail-only worlds: one per interface named (the same "
                          "name on every host), each world's traffic on that NIC")
    loc.set_defaults(run=cmd_localize)


def _specs(args: argparse.Namespace) -> list[HostSpec]:
    check_dir(args.output)  # found out before a long sweep, not after it
    check_store(getattr(args, "save", None))
    args.inventory = args.inventory or default_sources()  # as ansible-playbook finds it
    try:
        return load_inventory(args.inventory, args.limit)
    except InventoryError as exc:
        raise UsageError(f"inventory: {exc}") from exc


def _note_no_gpu(results: Mapping[str, HostResult]) -> None:
    """Say plainly on stderr which reachable hosts have no NVIDIA GPU at all."""
    for name, result in results.items():
        facts = result.facts
        if result.status != "ok" or facts is None or facts.gpus:
            continue
        reason = facts.errors.get("nvidia_smi")
        if reason is None or "not found" in reason:
            print(inert(f"gpufleet: {name}: no NVIDIA GPU ({reason or 'nvidia-smi lists none'})"),
                  file=sys.stderr)


def cmd_facts(args: argparse.Namespace) -> int:
    specs = _specs(args)
    results = gather_facts(
        specs, forks=args.forks, connect_timeout=args.connect_timeout,
        probe_timeout=args.timeout, accept_new_host_keys=args.accept_new_host_keys,
        raw_dir=args.save_raw,
    )
    out = Output(args.output)
    if args.format == "json":
        report = Report(hosts=results, specs={s.name: s for s in specs}, generated_at=options.now(),
                        level=levels.NO_SMOKE)
        out.write(json.dumps(document(report), indent=2))
    else:
        out.write(facts_table(results, color=out.tty, width=out.width(160)))
    _note_no_gpu(results)
    return EXIT_OK if all(r.status == "ok" for r in results.values()) else EXIT_FINDINGS


def cmd_check(args: argparse.Namespace) -> int:
    if getattr(args, "slurm", False):
        return _cmd_smoke_slurm(args)
    if getattr(args, "expect", None) is not None:
        raise UsageError("--expect goes with --slurm (with -i, the inventory has the variables)")
    specs = _specs(args)
    results = run_check(
        specs, smoke_level=levels.smoke_level(args.level), multinode=args.multinode,
        force=args.force, forks=args.forks,
        connect_timeout=args.connect_timeout, probe_timeout=args.timeout,
        smoke_timeout=args.smoke_timeout or levels.timeout(args.level),
        accept_new_host_keys=args.accept_new_host_keys, raw_dir=args.save_raw,
        smoke_without_gpu=bool(args.inventory),
    )
    report = judge(Report(hosts=results, specs={s.name: s for s in specs},
                          generated_at=options.now(), level=args.level))
    report, doc, unsaved = _saved(report, args.save)
    Output(args.output).render(doc, args.format)
    _note_no_gpu(results)
    return _unsaved_exit(unsaved) or exit_code(report.findings, args.fail_on)


def _saved(report: Report, store: Path | None) -> tuple[Report, dict[str, Any], str | None]:
    """The report (with its history findings when saved), its document and why it could not
    be saved (None when saved or not asked), saved into `store` first: a renderer that fails on
    some host's data must not throw away a run (up to 30 min at --level full) that --save was
    meant to keep, and a store that fails must not throw away the report either."""
    if store is None:
        return report, document(report), None
    try:
        report, doc = saved.with_history(report, store)
    except UsageError:
        raise
    except Exception:  # a bug judging the history: what was collected is still saved
        _save(document(report), store)
        raise
    return report, doc, _save(doc, store)


def _save(doc: dict[str, Any], store: Path) -> str | None:
    """Save `doc` into `store`: None, or why it could not be saved."""
    try:
        path = RunStore(store).save(doc)
    except StoreError as exc:
        return f"cannot save the report: {exc}"
    print(f"gpufleet: saved {path}", file=sys.stderr)
    return None


def _unsaved_exit(unsaved: str | None) -> int:
    """After the report is rendered: a save that failed is exit 2, said last on stderr."""
    if unsaved is None:
        return 0
    print(f"gpufleet: {unsaved}", file=sys.stderr)
    return EXIT_USAGE


def _cmd_smoke_slurm(args: argparse.Namespace) -> int:
    if args.inventory:
        raise UsageError("--slurm takes its nodes from the allocation, not from -i")
    check_dir(args.output)
    check_store(args.save)
    try:
        results, specs = run_slurm_smoke(
            load_expectations(args.expect), level=args.level,
            timeout=args.smoke_timeout or levels.timeout(args.level),
            probe_timeout=args.timeout, force=args.force)
    except (AllocationError, ExpectError) as exc:
        raise UsageError(str(exc)) from exc
    report = judge(Report(hosts=results, specs=specs, generated_at=options.now(),
                          level=args.level))
    # --save: each node's run store entry records the world it passed in (coverage's
    # multinode depth; deepcheck's multinode jobs save so).
    report, doc, unsaved = _saved(report, args.save)
    Output(args.output).render(doc, args.format)
    return _unsaved_exit(unsaved) or exit_code(report.findings, args.fail_on)


def cmd_localize(args: argparse.Namespace) -> int:
    args.inventory = args.inventory or default_sources()
    if not args.inventory:
        raise UsageError("localize needs an inventory (-i): worlds span several hosts")
    rails = [r for r in (args.rails or "").split(",") if r]
    try:
        check_names(rails)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    specs = _specs(args)
    run = run_localize(
        specs, level=args.level, force=args.force, forks=args.forks,
        connect_timeout=args.connect_timeout, probe_timeout=args.timeout,
        smoke_timeout=args.smoke_timeout or levels.timeout(args.level),
        accept_new_host_keys=args.accept_new_host_keys, strategy=args.groups,
        max_worlds=args.max_worlds, rails=rails,
    )
    # No rules here: the worlds are the evidence, the search's outcome the verdict.
    report = summarized(Report(hosts=run.results, specs=run.specs, generated_at=options.now(),
                               level=args.level))
    doc = {**document(report), "localize": localize_render.section(run)}
    out = Output(args.output)
    if args.format == "json":
        out.write(json.dumps(doc, indent=2))
    else:
        out.write(localize_render.table(doc, color=out.tty, width=out.width()))
    return EXIT_OK if run.outcome == "all_good" else EXIT_FINDINGS
