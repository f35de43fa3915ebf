"""`gpufleet deepcheck`: submit preemptible full and multinode checks to idle Slurm nodes
(engines/slurm/deepcheck.py decides, deepqueue.py talks to Slurm; this module reads the store
and Slurm, submits, and prints the plan)."""

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
from gpufleet.engines.slurm import deepqueue as dq
from gpufleet.engines.slurm.drain import SlurmError
from gpufleet.history import coverage as cov
from gpufleet.history.store import RunStore, StoreError
from gpufleet.smoke.levels import LEVELS, SMOKE_LEVELS


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
                   help="deep-check jobs (of both kinds) in the queue at once, at most "
                        "(default 4)")
    p.add_argument("--multinode-goal", type=_duration, metavar="DURATION",
                   help="also submit multinode checks (smoke --slurm on groups of idle "
                        "nodes) so each node passes one this often, e.g. 1d (default: none)")
    p.add_argument("--multinode-nodes", type=options.positive(int), default=2, metavar="N",
                   help="nodes per multinode check (default 2)")
    p.add_argument("--multinode-level", choices=SMOKE_LEVELS, default="quick",
                   help="the multinode check's smoke level (default quick)")
    p.add_argument("--qos", metavar="NAME",
                   help="the QOS the jobs run under (sbatch --qos); needed under "
                        "PreemptType=preempt/qos")
    p.add_argument("--production-qos", metavar="NAME,NAME", default="",
                   help="under preempt/qos: the QOS real jobs run under, each must preempt "
                        "--qos (default: every other QOS sacctmgr lists)")
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
    p.add_argument("--multinode-smoke-timeout", type=options.positive(float), metavar="S",
                   help="the multinode job's smoke timeout (default: its level's, 300 for "
                        "quick); its Slurm time limit adds five minutes")
    p.add_argument("--log-dir", type=Path, metavar="DIR",
                   help="the jobs' output files go there (default Slurm's)")
    p.add_argument("--dry-run", action="store_true",
                   help="print what would be submitted and why, submit nothing")
    p.add_argument("--format", choices=options.TEXT_OR_JSON, default="table")
    p.set_defaults(run=cmd_deepcheck)


def _table(choices: list[dc.Choice], last: str) -> list[str]:
    width = max([len(c.node) for c in choices] + [4])
    lines = [f"{'node':<{width}}  {'decision':<8}  {'job':>8}  {last:>9}  why"]
    for c in choices:
        with_ = f" (with {', '.join(n for n in c.group if n != c.node)})" if c.group else ""
        lines.append(f"{c.node:<{width}}  {c.decision:<8}  {c.job or '-':>8}  "
                     f"{cov.fmt_age(c.age_s):>9}  {redact.text(c.why + with_)}")
    return lines


def _render(choices: list[dc.Choice], s: dc.Settings, fleet: int, dry: bool,
            multi: list[dc.Choice] | None = None) -> str:
    wanted = sum(c.decision == "submit" for c in choices)
    head = (f"gpufleet deepcheck: partition {redact.text(s.partition)}, {fleet} node(s), full "
            f"check every {cov.fmt_age(s.goal.total_seconds())}, run every "
            f"{cov.fmt_age(s.every.total_seconds())}: {dc.budget(fleet, s)} per run; "
            + (f"would submit {wanted}" if dry else f"submitted {wanted}"))
    lines = [head, *_table(choices, "last full")]
    if multi and s.multinode_goal is not None:
        jobs = len({c.group for c in multi if c.decision == "submit"})
        lines += ["", f"multinode check ({s.multinode_nodes} nodes per job) every "
                      f"{cov.fmt_age(s.multinode_goal.total_seconds())}: "
                      f"{dc.multinode_budget(fleet, s)} job(s) per run; "
                      + (f"would submit {jobs}" if dry else f"submitted {jobs}"),
                  *_table(multi, "last multi")]
    return "\n".join(lines) + "\n"


def _read(args: argparse.Namespace, store: RunStore, queue: dq.Queue
          ) -> tuple[list[Any], dict[str, Any], dict[str, str]]:
    """The store's entries and Slurm's nodes and queue, refused (exit 2) when a real job would
    not preempt a deep check at once."""
    production = [q for q in args.production_qos.split(",") if q]
    try:
        entries = store.entries()
        nodes, queued = queue.nodes(), queue.queued()
        unsafe = (queue.not_preemptible(nodes, qos=args.qos, production=production)
                  if nodes else None)
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
    return entries, nodes, queued


def _submit(args: argparse.Namespace, s: dc.Settings, queue: dq.Queue, store_dir: Path, *,
            choices: list[dc.Choice], multi: list[dc.Choice]) -> int:
    """sbatch for every submit decision, one job per node or per multinode group; the job ids
    go into the choices. Returns how many sbatch calls failed (their nodes become skips)."""
    full = dq.job_script(args.command, store_dir, expect=args.expect, drain=args.slurm_drain,
                         smoke_timeout=args.smoke_timeout)
    group_timeout = args.multinode_smoke_timeout or LEVELS[args.multinode_level].timeout_s
    group = dq.multinode_script(args.command, store_dir, expect=args.expect,
                                level=args.multinode_level, smoke_timeout=group_timeout)
    failed = 0
    jobs: dict[tuple[str, ...], str | Exception] = {}
    for rows in (multi, choices):
        for i, c in enumerate(rows):
            if c.decision != "submit":
                continue
            nodes = c.group or (c.node,)
            if nodes not in jobs:
                secs = group_timeout if c.group else args.smoke_timeout
                try:
                    jobs[nodes] = queue.submit(dq.sbatch_argv(
                        nodes, s, minutes=int(secs // 60) + 5, log_dir=args.log_dir,
                        qos=args.qos), group if c.group else full)
                except SlurmError as exc:
                    failed += 1
                    jobs[nodes] = exc
            got = jobs[nodes]
            rows[i] = (replace(c, job=got) if isinstance(got, str) else
                       replace(c, decision="skip", why=f"sbatch failed: {got}"))
    return failed


def cmd_deepcheck(args: argparse.Namespace) -> int:
    if args.store is None:
        raise UsageError("deepcheck: say where the runs are: --store DIR (or $GPUFLEET_STORE)")
    if args.multinode_nodes < 2:
        raise UsageError("deepcheck: --multinode-nodes takes 2 or more")
    store_dir = Path(args.store).absolute()  # the jobs run elsewhere: the path must be whole
    s = dc.Settings(args.partition, args.goal, args.every, args.cooldown, args.max_jobs,
                    args.multinode_goal, args.multinode_nodes)
    store = RunStore(store_dir)
    queue = dq.Queue(args.partition)
    entries, nodes, queued = _read(args, store, queue)
    now = datetime.now(timezone.utc)
    goals = {"full": s.goal, **({"multinode": s.multinode_goal} if s.multinode_goal else {})}
    rows = cov.coverage(entries, sorted(nodes), goals, now)
    got = dc.Inputs(nodes, queued, {r.host: r.age_s["full"] for r in rows},
                    cov.last_deep(entries), {r.host: r.age_s["multinode"] for r in rows})
    multi = dc.plan_multinode(got, s, now)
    choices = dc.plan(got, s, now, taken=multi)
    failed = 0 if args.dry_run else _submit(args, s, queue, store_dir,
                                                      choices=choices, multi=multi)
    if args.format == "json":
        doc = {"partition": s.partition, "dry_run": bool(args.dry_run), "nodes": len(nodes),
               "per_run": dc.budget(len(nodes), s), "goal_s": s.goal.total_seconds(),
               "choices": [asdict(c) for c in choices]}
        if s.multinode_goal is not None:
            doc |= {"multinode_goal_s": s.multinode_goal.total_seconds(),
                    "multinode_per_run": dc.multinode_budget(len(nodes), s),
                    "multinode": [asdict(c) for c in multi]}
        Output().write(json.dumps(redact.clean(doc), indent=2) + "\n")
    else:
        Output().write(_render(choices, s, len(nodes), args.dry_run, multi))
    return EXIT_FINDINGS if failed else EXIT_OK
