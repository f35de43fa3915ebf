"""Slurm as the engine: drain and resume a node from its own health check, with a circuit breaker.

Everything that decides is pure (`parse_sinfo`, `drain_reason`, `plan`, `settle`); `SlurmNode`
runs the few commands (`sinfo`, `scontrol update`) and applies the plan. gpufleet only touches
drains it wrote itself: a drain reason that does not start with `gpufleet:` is never changed,
and only such a drain is ever resumed.

The circuit breaker keeps its state in Slurm's own reason field: a drain written by gpufleet
carries Slurm's reason timestamp, so "how many nodes of this partition did gpufleet drain within
the window" is one `sinfo` away on every node, with no shared file. Health checks run on all
nodes at once (Slurm's default), so the count is taken twice: before draining (no drain at all
when the budget is spent) and again after draining, once the controller's clock has moved past
the drain's timestamp. By then every drain that sorts earlier (by reason time, then node name)
is visible; a node whose own drain falls outside the first `limit` of that order takes it back.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from gpufleet.model import SEVERITY_ORDER, Finding

REASON_PREFIX = "gpufleet:"
REASON_MAX = 200  # Slurm keeps long reasons, but sinfo/squeue columns and humans do not
SINFO_FORMAT = "%N|%P|%T|%H|%E"  # reason last: it may contain the separator
SETTLE_S = 1.2  # Slurm's reason timestamps have 1 s resolution (see the module docstring)

Action = Literal["none", "drain", "keep", "resume", "leave", "breaker", "error"]


class SlurmError(Exception):
    """A Slurm command failed; the message says which and why."""


@dataclass(frozen=True)
class NodeState:
    name: str
    partitions: tuple[str, ...]
    state: str  # sinfo %T, e.g. "idle", "drained", "draining", "mixed", "down*"
    reason: str | None = None
    reason_time: dt.datetime | None = None  # naive, the controller's local time

    @property
    def drained(self) -> bool:
        return "drain" in self.state

    @property
    def ours(self) -> bool:
        return self.drained and (self.reason or "").startswith(REASON_PREFIX)


@dataclass(frozen=True)
class Plan:
    action: Action
    node: str
    reason: str | None = None  # the drain reason to write (drain) or found (keep/leave)
    detail: str = ""
    # breaker: partition -> (limit, gpufleet drains within the window, excluding this node)
    budget: Mapping[str, tuple[int, tuple[str, ...]]] = field(default_factory=dict)


# --------------------------------------------------------------------------- pure parts


def parse_sinfo(text: str) -> dict[str, NodeState]:
    """`sinfo -h -N -o '%N|%P|%T|%H|%E'` → one NodeState per node, partitions merged."""
    nodes: dict[str, NodeState] = {}
    for line in text.splitlines():
        parts = line.split("|", 4)
        if len(parts) != 5 or not parts[0].strip():
            continue
        name, partition, state, stamp, reason = (p.strip() for p in parts)
        partition = partition.rstrip("*")  # the default partition is marked with *
        old = nodes.get(name)
        partitions = (*old.partitions, partition) if old else (partition,)
        nodes[name] = NodeState(
            name=name, partitions=tuple(dict.fromkeys(partitions)), state=state.lower(),
            reason=None if reason in ("", "none", "(null)") else reason,
            reason_time=_timestamp(stamp),
        )
    return nodes


def _timestamp(text: str) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(text)
    except ValueError:
        return None  # "Unknown"


def drain_reason(findings: Sequence[Finding], fail_on: str) -> str | None:
    """`gpufleet: GF402 message (+N more)` for the worst finding at or above fail_on, else None.

    The message came from the host: only printable ASCII survives, on one line, bounded.
    """
    bad = [f for f in findings if SEVERITY_ORDER[f.severity] >= SEVERITY_ORDER[fail_on]]
    if not bad:
        return None
    worst = sorted(bad, key=lambda f: (-SEVERITY_ORDER[f.severity], f.rule))[0]
    text = re.sub(r"[^\x20-\x7e]+", " ", f"{REASON_PREFIX} {worst.rule} {worst.message}")
    text = re.sub(r"\s+", " ", text).strip()
    more = f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""
    if len(text) + len(more) > REASON_MAX:
        text = text[: REASON_MAX - len(more) - 3].rstrip() + "..."
    return text + more


def breaker_limit(partition_size: int, share: float) -> int:
    """How many nodes of a partition gpufleet may drain within the window (at least one)."""
    return max(1, math.floor(partition_size * share + 1e-9))


def _recent_drains(nodes: Mapping[str, NodeState], partition: str, since: dt.datetime,
                   ) -> list[NodeState]:
    """gpufleet's drains in partition with a reason time inside the window, in drain order."""
    found = [n for n in nodes.values() if partition in n.partitions and n.ours
             and n.reason_time is not None and n.reason_time >= since]
    return sorted(found, key=lambda n: (n.reason_time or since, n.name))


def _sizes(nodes: Mapping[str, NodeState]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for n in nodes.values():
        for p in n.partitions:
            sizes[p] = sizes.get(p, 0) + 1
    return sizes


def plan(node: str, nodes: Mapping[str, NodeState], reason: str | None, *, share: float,
         window_s: float, now: dt.datetime) -> Plan:
    """What to do with `node` given its findings' drain reason (None = healthy)."""
    me = nodes.get(node)
    if me is None:
        return Plan("error", node, detail=f"Slurm does not know a node named {node!r} "
                    "(set SLURMD_NODENAME or --node to its NodeName)")
    if reason is None:
        if me.ours:
            return Plan("resume", node, reason=me.reason,
                        detail=f"{node} is healthy again: resuming the drain gpufleet wrote "
                        f"({me.reason})")
        if me.drained:
            return Plan("leave", node, reason=me.reason,
                        detail=f"{node} is healthy but drained by someone else ({me.reason}); "
                        "left as it is")
        return Plan("none", node)
    if me.ours:
        return Plan("keep", node, reason=me.reason, detail=f"{node} stays drained ({me.reason})")
    if me.drained:
        return Plan("leave", node, reason=me.reason,
                    detail=f"{node} is already drained by someone else ({me.reason}); its "
                    f"reason is left as it is (gpufleet would have written: {reason})")
    since = now - dt.timedelta(seconds=window_s)
    sizes = _sizes(nodes)
    budget = {}
    for p in me.partitions:
        others = tuple(n.name for n in _recent_drains(nodes, p, since) if n.name != node)
        budget[p] = (breaker_limit(sizes[p], share), others)
    spent = {p: b for p, b in budget.items() if len(b[1]) >= b[0]}
    if spent:
        return Plan("breaker", node, reason=reason, budget=budget,
                    detail=_breaker_sentence(node, spent, share, window_s))
    return Plan("drain", node, reason=reason, budget=budget, detail=f"draining {node}: {reason}")


def settle(node: str, nodes: Mapping[str, NodeState], *, share: float, window_s: float,
           now: dt.datetime) -> Plan:
    """After draining: keep the drain only if it is among the first `limit` of every partition."""
    me = nodes.get(node)
    if me is None or not me.ours:
        return Plan("error", node, detail=f"the drain of {node} did not show in sinfo")
    since = now - dt.timedelta(seconds=window_s)
    sizes = _sizes(nodes)
    budget, spent = {}, {}
    for p in me.partitions:
        order = [n.name for n in _recent_drains(nodes, p, since)]
        limit = breaker_limit(sizes[p], share)
        earlier = tuple(order[: order.index(node)]) if node in order else tuple(order)
        budget[p] = (limit, earlier)
        if len(earlier) >= limit:
            spent[p] = (limit, earlier)
    if spent:
        return Plan("breaker", node, reason=me.reason, budget=budget,
                    detail=_breaker_sentence(node, spent, share, window_s))
    return Plan("drain", node, reason=me.reason, budget=budget,
                detail=f"drained {node}: {me.reason}")


def _breaker_sentence(node: str, spent: Mapping[str, tuple[int, tuple[str, ...]]],
                      share: float, window_s: float) -> str:
    parts = [f"partition {p}: {len(names)} node(s) already drained by gpufleet "
             f"({', '.join(names)}), limit {limit}" for p, (limit, names) in sorted(spent.items())]
    return (f"circuit breaker tripped: {node} not drained; " + "; ".join(parts)
            + f" ({share:.0%} of the partition within {window_s:g} s)")


# --------------------------------------------------------------------------- commands

Runner = Callable[[Sequence[str]], subprocess.CompletedProcess[str]]


def run_command(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=20,
                              check=False, stdin=subprocess.DEVNULL)
    except FileNotFoundError as exc:
        raise SlurmError(f"{argv[0]}: not found (is this a Slurm node?)") from exc
    except subprocess.TimeoutExpired as exc:
        raise SlurmError(f"{' '.join(argv[:3])}: no answer within 20 s") from exc


class SlurmNode:
    """The Slurm commands node-check needs, for one node."""

    def __init__(self, node: str, *, runner: Runner = run_command,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.node = node
        self._run = runner
        self._sleep = sleep

    def nodes(self) -> dict[str, NodeState]:
        res = self._run(["sinfo", "-h", "-N", "-o", SINFO_FORMAT])
        if res.returncode != 0:
            raise SlurmError(f"sinfo exited {res.returncode}: {res.stderr.strip()[:300]}")
        return parse_sinfo(res.stdout)

    def _update(self, *settings: str) -> None:
        res = self._run(["scontrol", "update", f"NodeName={self.node}", *settings])
        if res.returncode != 0:
            raise SlurmError(f"scontrol update NodeName={self.node} {settings[0]} exited "
                             f"{res.returncode}: {res.stderr.strip()[:300]}")

    def drain(self, reason: str) -> None:
        self._update("State=DRAIN", f"Reason={reason}")

    def resume(self) -> None:
        self._update("State=RESUME")

    def apply(self, reason: str | None, *, share: float, window_s: float) -> Plan:
        """Drain, keep, resume or leave this node; never raises SlurmError (it becomes a plan)."""
        try:
            first = plan(self.node, self.nodes(), reason, share=share, window_s=window_s,
                         now=dt.datetime.now())
            if first.action == "resume":
                self.resume()
            if first.action != "drain" or first.reason is None:
                return first
            self.drain(first.reason)
            self._sleep(SETTLE_S)
            second = settle(self.node, self.nodes(), share=share, window_s=window_s,
                            now=dt.datetime.now())
            if second.action == "breaker":
                self._take_back()
            return second
        except SlurmError as exc:
            return Plan("error", self.node, reason=reason, detail=str(exc))

    def _take_back(self) -> None:
        """Resume our own drain, unless someone replaced its reason meanwhile."""
        me = self.nodes().get(self.node)
        if me is not None and me.ours:
            self.resume()


def plan_evidence(p: Plan) -> dict[str, object]:
    return {
        "node": p.node, "action": p.action, "reason": p.reason,
        "budget": {k: {"limit": v[0], "drained": list(v[1])} for k, v in p.budget.items()},
    }
