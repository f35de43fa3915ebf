"""Deep checks on idle Slurm nodes: preemptible `node-check --level full` jobs, staggered to a
coverage goal, with a per-node cool-down.

`plan` is pure: from the nodes of the scavenger partition (sinfo), the deep-check jobs already in
the queue (squeue) and the run store's coverage it decides, per node, submit or skip and why.
`submit` runs one `sbatch` per picked node. The jobs go to a partition whose PriorityTier is
below every production partition's (slurm.conf: PreemptType=preempt/partition_prio,
PreemptMode=REQUEUE), so any real job preempts them at once and Slurm requeues them; each job
runs `gpufleet node-check --level full --history STORE`, and that save is what coverage sees.

Staggering: a fleet of N nodes with a goal G, planned every E, needs ceil(N * E / G) checks per
run to cover every node once per G; more at once would make every node's coverage expire
together. A node is due once half its goal has passed (never-checked nodes first, then the
oldest), and not within the cool-down after its last deep check, whatever its outcome (a node
that fails its check is not hammered every run).

Everything Slurm prints is untrusted: a node name that is not a plain host name is left out with
a note, and never reaches a command line except as one argv element after `--nodelist=`.
"""

from __future__ import annotations

import math
import re
import shlex
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal

from gpufleet import redact
from gpufleet.engines.slurm.drain import NodeState, SlurmError, parse_sinfo
from gpufleet.history.coverage import fmt_age

JOB_NAME = "gpufleet-deepcheck"
# sbatch --nice: the largest adjustment a non-root user may ask for is 2147483645; a large one
# puts the check behind every job of its partition even under priority/multifactor.
NICE = 1000000
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_JOB_ID = re.compile(r"\d+(?:_\d+)?")
_LIVE_JOB_STATES = {"PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
                    "CONFIGURING", "COMPLETING", "RESIZING", "SUSPENDED", "STOPPED",
                    "SIGNALING", "STAGE_OUT"}

Decision = Literal["submit", "skip"]
Runner = Callable[[Sequence[str], str | None], "CommandOutput"]


@dataclass(frozen=True)
class CommandOutput:
    returncode: int
    stdout: str
    stderr: str


@dataclass(frozen=True)
class Choice:
    node: str
    decision: Decision
    why: str
    age_s: float | None  # seconds since the node last passed a full check; None = never
    job: str | None = None  # the job id, once submitted (or the one already queued)


@dataclass(frozen=True)
class Settings:
    partition: str
    goal: timedelta
    every: timedelta
    cooldown: timedelta
    max_jobs: int


def budget(fleet: int, s: Settings) -> int:
    """Checks per run for `fleet` nodes to be covered once per goal (at least one)."""
    return max(1, math.ceil(fleet * s.every.total_seconds() / s.goal.total_seconds()))


@dataclass(frozen=True)
class Inputs:
    """What plan reads: `queued` node -> id of a deep-check job already pending or running
    there; `ages` node -> seconds since its last passing full check (None: never);
    `last_deep` node -> time of its last deep check of any outcome (the cool-down's start)."""

    nodes: Mapping[str, NodeState]
    queued: Mapping[str, str]
    ages: Mapping[str, float | None]
    last_deep: Mapping[str, datetime]


def _not_now(name: str, got: Inputs, s: Settings, now: datetime) -> str | None:
    """Why `name` gets no deep check this run, whatever the budget; None: it may."""
    age, state, since = got.ages.get(name), got.nodes[name].state, got.last_deep.get(name)
    half = s.goal.total_seconds() / 2
    if name in got.queued:
        return "a deep-check job is already queued or running"
    if state != "idle":
        return f"not idle ({state})"
    if age is not None and age < half:
        return f"covered {fmt_age(age)} ago, due after half its goal ({fmt_age(half)})"
    cool = (now - since).total_seconds() if since is not None else None
    if cool is not None and cool < s.cooldown.total_seconds():
        return (f"cool-down: last deep check {fmt_age(cool)} ago "
                f"(cool-down {fmt_age(s.cooldown.total_seconds())})")
    return None


def plan(got: Inputs, s: Settings, now: datetime) -> list[Choice]:
    """One Choice per node of the partition, the submitted ones first."""
    per_run = budget(len(got.nodes), s)
    room = min(per_run, max(0, s.max_jobs - len(got.queued)))
    goal = fmt_age(s.goal.total_seconds())

    def oldest_first(name: str) -> tuple[int, float, str]:
        age = got.ages.get(name)
        return (0 if age is None else 1, -(age or 0.0), name)

    submit: list[Choice] = []
    skip: list[Choice] = []
    for name in sorted(got.nodes, key=oldest_first):
        age = got.ages.get(name)
        why = _not_now(name, got, s, now)
        if why is not None:
            skip.append(Choice(name, "skip", why, age, got.queued.get(name)))
        elif len(submit) < room:
            why = ("never passed a full check" if age is None else
                   f"last full check passed {fmt_age(age)} ago (goal {goal})")
            submit.append(Choice(name, "submit", why, age))
        else:
            skip.append(Choice(name, "skip", (
                f"over this run's budget: {room} of {per_run} per run ({len(got.nodes)} "
                f"node(s), goal {goal}, every {fmt_age(s.every.total_seconds())}, at most "
                f"{s.max_jobs} queued, {len(got.queued)} queued now)"), age))
    return submit + skip


# ---------------------------------------------------------------------------------- Slurm side


def parse_nodes(text: str, partition: str) -> tuple[dict[str, NodeState], list[str]]:
    """`sinfo -h -N -p P -o '%N|%P|%T|%H|%E'` → the partition's nodes, and notes on lines left
    out (a name that is no plain host name)."""
    notes: list[str] = []
    nodes = {}
    for name, node in parse_sinfo(text).items():
        if not _NODE_NAME.fullmatch(name):
            notes.append(f"sinfo: node name {redact.text(name)[:80]!r} left out: not a host name")
        elif partition in node.partitions:
            nodes[name] = node
    return nodes, notes


def parse_queue(text: str) -> tuple[dict[str, str], list[str]]:
    """`squeue -h -n gpufleet-deepcheck -o '%i|%T|%N|%n'` → node -> job id of the live
    deep-check jobs (allocated node, else the one it asked for), and notes."""
    queued: dict[str, str] = {}
    notes: list[str] = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) != 4 or not _JOB_ID.fullmatch(parts[0]):
            if line.strip():
                notes.append(f"squeue: line {redact.text(line)[:80]!r} left out")
            continue
        job, state, alloc, asked = parts
        node = alloc if alloc and alloc != "(null)" else asked
        if state.upper() in _LIVE_JOB_STATES and _NODE_NAME.fullmatch(node):
            queued[node] = job
        elif state.upper() in _LIVE_JOB_STATES:
            notes.append(f"squeue: job {job}: node {redact.text(node)[:80]!r} is not one host")
    return queued, notes


def _fields(line: str) -> dict[str, str]:
    return dict(f.split("=", 1) for f in line.split() if "=" in f)


def preemptible(partitions_text: str, config_text: str, partition: str,
                neighbours: Sequence[str]) -> str | None:
    """None when every partition in `neighbours` (those sharing a node with `partition`)
    preempts `partition`'s jobs by killing or requeueing them; else the setting that keeps a
    deep check from ever delaying a real job is missing, as a sentence.

    `partitions_text`: `scontrol -o show partition`; `config_text`: `scontrol show config`."""
    config = {k.strip(): v.strip() for k, sep, v in
              (ln.partition("=") for ln in config_text.splitlines()) if sep}
    kind = config.get("PreemptType", "preempt/none")
    if kind != "preempt/partition_prio":
        return (f"PreemptType is {redact.text(kind)!r}, not preempt/partition_prio: a real job "
                f"would wait for a deep check to end")
    parts = {f.get("PartitionName", ""): f for f in map(_fields, partitions_text.splitlines())}
    mine = parts.get(partition)
    if mine is None:
        return f"scontrol show partition lists no partition {partition!r}"
    mode = mine.get("PreemptMode") or config.get("PreemptMode", "OFF")
    if mode.split(",")[0].upper() not in ("REQUEUE", "CANCEL"):
        return (f"partition {partition}: PreemptMode={redact.text(mode)}, not REQUEUE (or "
                f"CANCEL): a suspended check would keep its GPUs' memory")

    def tier(f: Mapping[str, str]) -> int:
        text = f.get("PriorityTier", "1")
        return int(text) if text.isdigit() else 1

    low = [n for n in neighbours if n in parts and tier(parts[n]) <= tier(mine)]
    if low:
        return (f"partition {partition}: PriorityTier={tier(mine)} is not below that of "
                f"{', '.join(redact.text(n) for n in sorted(low))}, which share(s) its nodes")
    return None


def job_script(command: str, store: Path, *, expect: Path | None, drain: bool,
               smoke_timeout: float) -> str:
    """The batch script: node-check at the full level on the node Slurm gives it (its name from
    $SLURMD_NODENAME), saved into the store. Every argument is quoted."""
    argv = [command, "node-check", "--level", "full", "--history", str(store),
            "--smoke-timeout", f"{smoke_timeout:g}", "--format", "json"]
    if expect is not None:
        argv += ["--expect", str(expect)]
    if drain:
        argv.append("--slurm-drain")
    return ("#!/bin/sh\n# gpufleet deepcheck: a full check of this node, preemptible; the run "
            "store keeps its result\nexec " + shlex.join(argv) + "\n")


def sbatch_argv(node: str, s: Settings, *, minutes: int, log_dir: Path | None) -> list[str]:
    argv = ["sbatch", "--parsable", f"--job-name={JOB_NAME}", f"--partition={s.partition}",
            f"--nodelist={node}", "--nodes=1", "--ntasks=1", "--exclusive", "--requeue",
            f"--nice={NICE}", f"--time={minutes}"]
    if log_dir is not None:
        argv.append(f"--output={log_dir / 'gpufleet-deepcheck-%N-%j.out'}")
    return argv


def _run(argv: Sequence[str], stdin: str | None) -> CommandOutput:
    try:
        p = subprocess.run(list(argv), input=stdin, capture_output=True, text=True, timeout=30,
                           check=False, stdin=None if stdin is not None else subprocess.DEVNULL)
    except FileNotFoundError as exc:
        raise SlurmError(f"{argv[0]}: not found (is this a Slurm submit host?)") from exc
    except subprocess.TimeoutExpired as exc:
        raise SlurmError(f"{argv[0]}: no answer within 30 s") from exc
    return CommandOutput(p.returncode, p.stdout, p.stderr)


class Queue:
    """The Slurm commands deepcheck needs: sinfo, squeue, scontrol show, sbatch."""

    def __init__(self, partition: str, runner: Runner = _run) -> None:
        self.partition = partition
        self.runner = runner
        self.notes: list[str] = []

    def _ok(self, argv: Sequence[str], stdin: str | None = None) -> str:
        r = self.runner(argv, stdin)
        if r.returncode != 0:
            why = redact.text(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else
                              f"exit {r.returncode}")
            raise SlurmError(f"{argv[0]} failed: {why[:300]}")
        return r.stdout

    def nodes(self) -> dict[str, NodeState]:
        """The partition's nodes; each NodeState names every partition the node is in."""
        out = self._ok(["sinfo", "-h", "-N", "-o", "%N|%P|%T|%H|%E"])
        nodes, notes = parse_nodes(out, self.partition)
        self.notes += notes
        return nodes

    def not_preemptible(self, nodes: Mapping[str, NodeState]) -> str | None:
        """Why the partition's jobs would not give way to real jobs at once; None: they would."""
        neighbours = sorted({p for n in nodes.values() for p in n.partitions} - {self.partition})
        return preemptible(self._ok(["scontrol", "-o", "show", "partition"]),
                           self._ok(["scontrol", "show", "config"]), self.partition, neighbours)

    def queued(self) -> dict[str, str]:
        out = self._ok(["squeue", "-h", "-p", self.partition, "-n", JOB_NAME, "-o",
                        "%i|%T|%N|%n"])
        queued, notes = parse_queue(out)
        self.notes += notes
        return queued

    def submit(self, argv: Sequence[str], script: str) -> str:
        out = self._ok(argv, script).strip()
        job = out.split(";", 1)[0]  # --parsable: "id" or "id;cluster"
        if not _JOB_ID.fullmatch(job):
            raise SlurmError(f"sbatch: no job id in {redact.text(out)[:80]!r}")
        return job
