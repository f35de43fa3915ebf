"""`gpufleet deepcheck`: submit preemptible full checks to idle Slurm nodes (engines/slurm/
deepcheck.py decides; this module reads the store and Slurm, submits, and prints the plan)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from gpufleet import redact
from gpufleet.cli import options
from gpufleet.cli.options import EXIT_FINDINGS, EXIT_OK, UsageError
from gpufleet.cli.output import Output
from gpufleet.engines.slurm import deepcheck as dc
from gpufleet.engines.slurm.drain import SlurmError
from gpufleet.history import coverage as cov
from gpufleet.history.store import RunStore, StoreError
from gpufleet.smoke.levels import LEVELS


def _duration(text: str) -> timedelta:
    span = cov.parse_duration(text)
    if span is None:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a duration like 30m, 12h, 7d, 2w")
    return span


def add(sub: Any) -> None:
    p = sub.add_parser(
        "deepcheck", help="submit preemptible full checks to idle Slurm nodes out of goal",
        description="Read the run store's coverage and Slurm's idle nodes; submit at most "
                    "--max-jobs `node-check --level full` jobs to the scavenger partition "
                    "(lowest priority, requeued when a real job preempts them), staggered so "
                    "every node is checked once per --goal, none within --cooldown of its "
                    "last deep check. Run it every --every (cron, scrontab, a timer). Exit 0, "
                    "1 when an sbatch failed, 2 usage error or Slurm unreadable.")
    p.add_argument("--store", type=Path, metavar="DIR", default=os.environ.get("GPUFLEET_STORE"),
                   help="the run store the jobs save into, on a file system every node "
                        "mounts at this path (default $GPUFLEET_STORE)")
    p.add_argument("--partition", default="scavenger", metavar="NAME",
                   help="the preemptible partition, PriorityTier below production "
                        "(default scavenger)")
    p.add_argument("--goal", type=_duration, default=cov.DEFAULT_GOALS["full"],
                   metavar="DURATION", help="each node passes a full check this often "
                                            "(default 7d)")
    p.add_argument("--every", type=_duration, default=timedelta(hours=1), metavar="DURATION",
                   help="how often deepcheck itself runs: sets the per-run budget "
                        "(default 1h)")
    p.add_argument("--cooldown", type=_duration, default=timedelta(hours=6), metavar="DURATION",
                   help="no new deep check on a node within this time of its last one "
                        "(default 6h)")
    p.add_argument("--max-jobs", type=options.positive(int), default=4, metavar="K",
                   help="deep-check jobs in the queue at once, at most (default 4)")
    p.add_argument("--command", default="gpufleet", metavar="PATH",
                   help="gpufleet on the nodes (default: gpufleet on their PATH)")
    p.add_argument("--expect", type=Path, metavar="FILE",
                   help="the expectations file on the nodes (node-check --expect)")
    p.add_argument("--slurm-drain", action="store_true",
                   help="the job drains its node on findings, through the circuit breaker "
                        "(node-check --slurm-drain)")
    p.add_argument("--smoke-timeout", type=options.positive(float),
                   default=LEVELS["full"].timeout_s, metavar="S",
                   help="the job's smoke timeout (default 1800); its Slurm time limit adds "
                        "five minutes")
    p.add_argument("--log-dir", type=Path, metavar="DIR",
                   help="the jobs' output files go there (default Slurm's)")
    p.add_argument("--dry-run", action="store_true",
                   help="print what would be submitted and why, submit nothing")
    p.add_argument("--format", choices=options.TEXT_OR_JSON, default="table")
    p.set_defaults(run=cmd_deepcheck)


def _render(choices: list[dc.Choice], s: dc.Settings, fleet: int, dry: bool) -> str:
    wanted = sum(c.decision == "submit" for c in choices)
    head = (f"gpufleet deepcheck: partition {redact.text(s.partition)}, {fleet} node(s), full "
            f"check every {cov.fmt_age(s.goal.total_seconds())}, run every "
            f"{cov.fmt_age(s.every.total_seconds())}: {dc.budget(fleet, s)} per run; "
            + (f"would submit {wanted}" if dry else f"submitted {wanted}"))
    width = max([len(c.node) for c in choices] + [4])
    lines = [head, f"{'node':<{width}}  {'decision':<8}  {'job':>8}  {'last full':>9}  why"]
    for c in choices:
        lines.append(f"{c.node:<{width}}  {c.decision:<8}  {c.job or '-':>8}  "
                     f"{cov.fmt_age(c.age_s):>9}  {redact.text(c.why)}")
    return "\n".join(lines) + "\n"


def cmd_deepcheck(args: argparse.Namespace) -> int:
    if args.store is None:
        raise UsageError("deepcheck: say where the runs are: --store DIR (or $GPUFLEET_STORE)")
    store_dir = Path(args.store).absolute()  # the jobs run elsewhere: the path must be whole
    s = dc.Settings(args.partition, args.goal, args.every, args.cooldown, args.max_jobs)
    store = RunStore(store_dir)
    queue = dc.Queue(args.partition)
    try:
        entries = store.entries()
        nodes, queued = queue.nodes(), queue.queued()
        unsafe = queue.not_preemptible(nodes) if nodes else None
    except StoreError as exc:
        raise UsageError(f"run store: {exc}") from exc
    except SlurmError as exc:
        raise UsageError(f"deepcheck: cannot read Slurm: {exc}") from exc
    for note in store.notes + queue.notes:
        print(f"gpufleet: {redact.text(note)}", file=sys.stderr)
    if not nodes:
        raise UsageError(f"deepcheck: partition {args.partition!r} has no nodes (sinfo)")
    if unsafe is not None:  # a check that real jobs must wait for is worse than none
        raise UsageError(f"deepcheck: refusing to submit: {unsafe} (docs/slurm.md, \"How to "
                         "turn it on\")")
    now = datetime.now(timezone.utc)
    rows = cov.coverage(entries, sorted(nodes), {"full": s.goal}, now)
    ages = {r.host: r.age_s["full"] for r in rows}
    choices = dc.plan(dc.Inputs(nodes, queued, ages, cov.last_run(entries, "full")), s, now)
    failed = 0
    if not args.dry_run:
        script = dc.job_script(args.command, store_dir, expect=args.expect,
                               drain=args.slurm_drain, smoke_timeout=args.smoke_timeout)
        minutes = int(args.smoke_timeout // 60) + 5
        for i, c in enumerate(choices):
            if c.decision != "submit":
                continue
            try:
                job = queue.submit(dc.sbatch_argv(c.node, s, minutes=minutes,
                                                  log_dir=args.log_dir), script)
                choices[i] = replace(c, job=job)
            except SlurmError as exc:
                failed += 1
                choices[i] = replace(c, decision="skip", why=f"sbatch failed: {exc}")
    if args.format == "json":
        doc = {"partition": s.partition, "dry_run": bool(args.dry_run), "nodes": len(nodes),
               "per_run": dc.budget(len(nodes), s), "goal_s": s.goal.total_seconds(),
               "choices": [asdict(c) for c in choices]}
        Output().write(json.dumps(redact.clean(doc), indent=2) + "\n")
    else:
        Output().write(_render(choices, s, len(nodes), args.dry_run))
    return EXIT_FINDINGS if failed else EXIT_OK
