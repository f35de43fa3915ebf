"""The commands run inside the engines ops already operate: node-check (Slurm), ansible-report."""

from __future__ import annotations

import argparse
import datetime as dt
import signal
import sys
from pathlib import Path
from typing import Any

from gpufleet.cli import options
from gpufleet.cli.options import EXIT_INTERRUPTED, EXIT_OK, UsageError
from gpufleet.cli.output import Output, check_dir, check_store
from gpufleet.engines.ansible import (
    AnsibleResultsError,
    expectations,
    load_ansible_results,
    report_from_results,
)
from gpufleet.engines.slurm.nodecheck import node_name, run_node_check, slurm_findings
from gpufleet.history.store import RunStore, StoreError
from gpufleet.inventory import ExpectError, load_expectations, node_spec
from gpufleet.model import Report
from gpufleet.redact import text
from gpufleet.report import document, exit_code
from gpufleet.report.pipeline import amend, judge_counters, judge_history, summarized
from gpufleet.report.rma_bundle import BundleError, write_bundle
from gpufleet.rules.escalation import Limits
from gpufleet.smoke.levels import NO_SMOKE


def add_node_check(sub: Any) -> None:
    p = sub.add_parser(
        "node-check", help="check this node (Slurm HealthCheckProgram / prolog)",
        description="Check this machine through the local transport; with --slurm-drain, "
                    "drain or resume it in Slurm. Exit 0 healthy, 1 findings at or above "
                    "--fail-on, 2 usage error.")
    p.add_argument("--expect", type=Path, metavar="FILE",
                   help="expectations rendered by the roles (inventory variables); without "
                        "it only rules that need neither expectations nor peers apply")
    # full is for batch jobs (gpufleet deepcheck), never the health check: slurmd gives it 60 s.
    p.add_argument("--level", choices=(NO_SMOKE, "quick", "full"), default=NO_SMOKE,
                   help="facts (default, about a second), quick (adds the smoke test) or "
                        "full (the deep smoke test: a batch job, see gpufleet deepcheck)")
    p.add_argument("--slurm-drain", action="store_true",
                   help="drain this node on findings at or above --fail-on (reason "
                        "'gpufleet: GFxxx message'); resume it when healthy, if the drain "
                        "was gpufleet's")
    p.add_argument("--node", metavar="NAME",
                   help="Slurm node name (default: $SLURMD_NODENAME, else the hostname)")
    options.fail_on(p, "severity that fails (exit 1) and drains (default error)")
    p.add_argument("--breaker-share", type=options.share, default=0.1, metavar="F",
                   help="drain at most this share of a partition (at least one node) within "
                        "--breaker-window (default 0.1)")
    p.add_argument("--breaker-window", type=options.positive(float), default=3600.0,
                   metavar="S", help="circuit breaker window in seconds (default 3600)")
    options.output(p)
    p.add_argument("--timeout", type=options.positive(float), default=30.0, metavar="S",
                   help="seconds for the fact probe (default 30)")
    p.add_argument("--smoke-timeout", type=options.positive(float), default=300.0, metavar="S",
                   help="seconds for the smoke test at --level quick (default 300)")
    p.add_argument("--force", action="store_true",
                   help="run the smoke test even where GPUs are busy")
    p.add_argument("--history", type=Path, metavar="DIR",
                   help="node-local run store: save each run there and escalate Xids over it "
                        "(GF430-GF434: repeats, the reboot limit, Xid 74 per NVLink) before "
                        "draining")
    p.add_argument("--counters", type=Path, metavar="FILE",
                   help="node-local counter history: judge the RDMA and NVLink counter "
                        "deltas against this node's recent runs kept in FILE, then record this "
                        "run there")
    p.add_argument("--history-keep-days", type=options.positive(float), metavar="D",
                   help="with --history: drop saved runs older than D days after saving "
                        "(at least the 7-day escalation window; default: keep every run)")
    p.set_defaults(run=cmd_node_check)


def add_ansible_report(sub: Any) -> None:
    p = sub.add_parser(
        "ansible-report", help="the report over a playbook run's gpufleet.gpu.gpu_facts results",
        description="Judge gpufleet.gpu.gpu_facts results gathered by Ansible/AWX: a callback "
                    "or verify-playbook dump ({host: result}), an `ansible -t` directory, "
                    "ansible-runner job_events, or AWX job events JSON.")
    p.add_argument("results", type=Path, metavar="FILE|DIR")
    options.output(p)
    options.fail_on(p, options.FAIL_ON_HELP)
    p.set_defaults(run=cmd_ansible_report)


def cmd_node_check(args: argparse.Namespace) -> int:
    check_dir(args.output)
    check_store(args.history, "--history")
    keep = args.history_keep_days
    if keep is not None and (args.history is None or keep < Limits().reboot_days):
        raise UsageError(f"--history-keep-days needs --history and at least "
                         f"{Limits().reboot_days:g} days (the reboot limit's window)")
    name = node_name(args.node)
    try:
        spec = node_spec(name, load_expectations(args.expect))
    except ExpectError as exc:
        raise UsageError(str(exc)) from exc
    report = run_node_check(spec, level=args.level, timeout=args.timeout,
                            smoke_timeout=args.smoke_timeout, force=args.force,
                            generated_at=options.now())
    # Escalation before the drain (it may be the worst finding): over the node-local store with
    # --history, else over this run's own log (a journal spanning boots, a burst).
    if args.history is not None:
        store = RunStore(args.history)
        try:
            report = judge_history(report, store.entries(), store.load,
                                   deltas=args.counters is None)
        except StoreError as exc:
            raise UsageError(f"run store: {exc}") from exc
        finally:
            noted(store)
    else:
        report = judge_history(report, [], lambda _entry: {}, deltas=False)
    if args.counters is not None:
        report = _with_counters(report, name, args.counters)
    if args.slurm_drain:
        # slurmd kills a health check after 60 s with SIGTERM: unwind (clear a pending breaker
        # claim in Slurm) instead of dying in the middle.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(EXIT_INTERRUPTED))
        extra = slurm_findings(name, report.findings, fail_on=args.fail_on,
                               share=args.breaker_share, window_s=args.breaker_window)
        report = amend(report, extra)
    else:
        report = summarized(report)
    doc = document(report)
    if args.history is not None:
        try:
            store = RunStore(args.history)
            store.save(doc)
            if args.history_keep_days is not None:
                cutoff = dt.datetime.now(dt.timezone.utc) - dt.timedelta(
                    days=args.history_keep_days)
                store.prune(cutoff.strftime("%Y-%m-%dT%H:%M:%SZ"))
        except StoreError as exc:
            raise UsageError(f"cannot save the run: {exc}") from exc
    Output(args.output).render(doc, args.format)
    return exit_code(report.findings, args.fail_on)


def noted(store: RunStore) -> None:
    """What the store left out (a forged or broken file), one line each on stderr."""
    for note in store.notes:
        print(f"gpufleet: run store: {text(note)}", file=sys.stderr)
    store.notes.clear()


def _with_counters(report: Report, name: str, path: Path) -> Report:
    """The report with the counter deltas judged over the node-local history at `path`."""
    try:
        found, notes = judge_counters(document(report), name, path, report.specs[name].expect)
    except OSError as exc:
        raise UsageError(f"cannot record the counters in {path}: {exc.strerror}") from exc
    for note in notes:
        print(f"gpufleet: counter history: {text(note)}", file=sys.stderr)
    return amend(report, found)


def add_rma_bundle(sub: Any) -> None:
    p = sub.add_parser(
        "rma-bundle", help="one node's RMA evidence from the run store, as an archive",
        description="Write HOST's RMA evidence bundle (tar.gz with manifest.json): GPU "
                    "serials, PCI bus ids, VBIOS, driver, recovery action, the Xid timeline and "
                    "every finding over the saved runs, secrets redacted.")
    p.add_argument("host", metavar="HOST")
    p.add_argument("--store", type=Path, required=True, metavar="DIR",
                   help="the run store (check --save DIR, node-check --history DIR)")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="FILE.tar.gz")
    p.add_argument("--bug-report", type=Path, metavar="FILE",
                   help="nvidia-bug-report.log.gz from the node, redacted into the bundle")
    p.set_defaults(run=cmd_rma_bundle)


def cmd_rma_bundle(args: argparse.Namespace) -> int:
    check_dir(args.output)
    try:
        bug = args.bug_report.read_bytes() if args.bug_report else None
    except OSError as exc:
        raise UsageError(f"{args.bug_report}: {exc.strerror}") from exc
    store = RunStore(args.store)
    try:
        members = write_bundle(args.output, args.host, store.entries(), store.load, bug)
    except (StoreError, BundleError) as exc:
        raise UsageError(f"rma-bundle: {exc}") from exc
    print(f"gpufleet: wrote {args.output} ({len(members)} files)", file=sys.stderr)
    return EXIT_OK


def cmd_ansible_report(args: argparse.Namespace) -> int:
    try:
        results = load_ansible_results(args.results)
        report = report_from_results(results, generated_at=options.now(),
                                     expect=expectations(args.results))
    except (AnsibleResultsError, ExpectError) as exc:
        raise UsageError(str(exc)) from exc
    Output(args.output).render(document(report), args.format)
    return exit_code(report.findings, args.fail_on)
