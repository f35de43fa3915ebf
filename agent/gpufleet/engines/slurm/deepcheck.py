"""Deep checks on idle Slurm nodes: preemptible `node-check --level full` jobs and multinode
`smoke --slurm` jobs on groups of idle nodes, each staggered to its own coverage goal, with a
per-node cool-down between them.

`plan` and `plan_multinode` are pure: from the nodes of the scavenger partition (sinfo), the
deep-check jobs already in the queue (squeue) and the run store's coverage they decide, per
node, submit or skip and why. The Slurm side (reading sinfo and squeue, the sbatch line and the
job scripts) is engines/slurm/deepqueue.py; whether a real job would preempt the checks at once
is engines/slurm/preempt.py.

Staggering: a fleet of N nodes with a goal G, planned every E, needs ceil(N * E / G) checks per
run to cover every node once per G (for multinode jobs of K nodes, ceil(N * E / (G * K)) jobs);
more at once would make every node's coverage expire together. A node is due once half its goal
has passed (never-checked nodes first, then the oldest), and not within the cool-down after its
last deep check of either kind, whatever its outcome (a node that fails its check is not
hammered every run; a stress check and a bandwidth check do not run back to back).

Multinode groups are planned first: a job needs K idle nodes at the same moment, the scarcer
chance, and its goal (daily, say) is the shorter one; the full checks take what is left.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from gpufleet.engines.slurm.drain import NodeState
from gpufleet.history.coverage import fmt_age

Decision = Literal["submit", "skip"]


@dataclass(frozen=True)
class Choice:
    node: str
    decision: Decision
    why: str
    age_s: float | None  # seconds since the node last passed a check of this kind; None = never
    job: str | None = None  # the job id, once submitted (or the one already queued)
    group: tuple[str, ...] = ()  # a multinode job's nodes, this one included


@dataclass(frozen=True)
class Settings:
    partition: str
    goal: timedelta
    every: timedelta
    cooldown: timedelta
    max_jobs: int
    multinode_goal: timedelta | None = None  # None: no multinode checks
    multinode_nodes: int = 2


def budget(fleet: int, s: Settings) -> int:
    """Full checks per run for `fleet` nodes to be covered once per goal (at least one)."""
    # timedelta // timedelta is exact (integer microseconds): no float rounding up or down.
    return max(1, -(-(fleet * s.every) // s.goal))


def multinode_budget(fleet: int, s: Settings) -> int:
    """Multinode jobs per run for `fleet` nodes, `multinode_nodes` per job, to be covered once
    per multinode goal (at least one)."""
    goal = s.multinode_goal or s.goal
    return max(1, math.ceil(fleet * s.every.total_seconds()
                            / (goal.total_seconds() * s.multinode_nodes)))


@dataclass(frozen=True)
class Inputs:
    """What plan reads: `queued` node -> id of a deep-check job (of either kind) already
    pending or running there; `ages` node -> seconds since its last passing full check (None:
    never); `last_deep` node -> time of its last deep check of any kind and outcome (the
    cool-down's start); `multi_ages` as `ages`, for multinode checks."""

    nodes: Mapping[str, NodeState]
    queued: Mapping[str, str]
    ages: Mapping[str, float | None]
    last_deep: Mapping[str, datetime]
    multi_ages: Mapping[str, float | None] = field(default_factory=dict)


def _not_now(name: str, got: Inputs, age: float | None, *, goal: timedelta, s: Settings,
             now: datetime) -> str | None:
    """Why `name` gets no deep check this run, whatever the budget; None: it may."""
    state, since = got.nodes[name].state, got.last_deep.get(name)
    half = goal.total_seconds() / 2
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


def _oldest_first(ages: Mapping[str, float | None]) -> Callable[[str], tuple[int, float, str]]:
    def key(name: str) -> tuple[int, float, str]:
        age = ages.get(name)
        return (0 if age is None else 1, -(age or 0.0), name)
    return key


def _room(got: Inputs, s: Settings, per_run: int, taken_jobs: int = 0) -> int:
    """Jobs this run may submit: its budget, within --max-jobs (jobs, not nodes, counted)."""
    return min(per_run, max(0, s.max_jobs - len(set(got.queued.values())) - taken_jobs))


def plan(got: Inputs, s: Settings, now: datetime,
         taken: Sequence[Choice] = ()) -> list[Choice]:
    """One Choice per node of the partition for the full check, the submitted ones first.
    `taken`: this run's multinode choices; their submitted nodes and jobs are spoken for."""
    mine = {c.node: c for c in taken if c.decision == "submit"}
    per_run = budget(len(got.nodes), s)
    room = _room(got, s, per_run, len({c.group for c in mine.values()}))
    goal = fmt_age(s.goal.total_seconds())
    submit: list[Choice] = []
    skip: list[Choice] = []
    for name in sorted(got.nodes, key=_oldest_first(got.ages)):
        age = got.ages.get(name)
        why = _not_now(name, got, age, goal=s.goal, s=s, now=now)
        if why is None and name in mine:
            why = f"in this run's multinode check ({', '.join(mine[name].group)})"
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
                f"{s.max_jobs} queued, {len(set(got.queued.values()))} queued now)"), age))
    return submit + skip


def plan_multinode(got: Inputs, s: Settings, now: datetime) -> list[Choice]:
    """One Choice per node of the partition for the multinode check (none when it has no
    goal): the due idle nodes, oldest first, in groups of `multinode_nodes`, one job each."""
    if s.multinode_goal is None:
        return []
    size, goal = s.multinode_nodes, s.multinode_goal
    per_run = multinode_budget(len(got.nodes), s)
    room = _room(got, s, per_run)
    due: list[str] = []
    skip: list[Choice] = []
    for name in sorted(got.nodes, key=_oldest_first(got.multi_ages)):
        age = got.multi_ages.get(name)
        why = _not_now(name, got, age, goal=goal, s=s, now=now)
        if why is None:
            due.append(name)
        else:
            skip.append(Choice(name, "skip", why, age, got.queued.get(name)))
    groups = [tuple(due[i:i + size]) for i in range(0, len(due) - size + 1, size)][:room]
    submit: list[Choice] = []
    for g in groups:
        for name in g:
            age = got.multi_ages.get(name)
            why = ("never passed a multinode check" if age is None else
                   f"last multinode check passed {fmt_age(age)} ago (goal "
                   f"{fmt_age(goal.total_seconds())})")
            submit.append(Choice(name, "submit", why, age, group=g))
    for name in due[len(groups) * size:]:
        why = (f"over this run's budget: {room} of {per_run} multinode job(s) per run"
               if len(groups) == room else
               f"no idle partner: {len(due)} node(s) due, {size} per multinode check")
        skip.append(Choice(name, "skip", why, got.multi_ages.get(name)))
    return submit + skip
