"""Slurm as the engine: drain and resume a node from its own health check, with a circuit breaker.

Everything that decides is pure (`parse_sinfo`, `drain_reason`, `plan`, `decide`); `SlurmNode`
runs the few commands (`sinfo`, `scontrol update`) and applies the plan. gpufleet only touches
drains it wrote itself: a drain reason that does not start with `gpufleet:` is never changed,
and only such a drain is ever resumed.

The circuit breaker keeps its state in Slurm itself, with no shared file: a drain written by
gpufleet carries Slurm's reason timestamp, so "how many nodes of this partition did gpufleet drain
within the window" is one `sinfo` away on every node. Slurm starts health checks on all nodes at
once, so several nodes may decide at the same moment. Before draining, a node therefore stakes a
claim in its own node Comment (`gpufleet-claim:<epoch>`). A claim is valid only if Slurm stored it
within CLAIM_LANDED_S of its stamp (checked by the claimant, which otherwise claims anew), and a
node decides only SETTLE_S after its own stamp, so every valid claim stamped before its own is
visible by then. It drains only if the drains in the window plus the claims ordered before its
own (stamp, then node name) leave room; then it clears the claim. No node drains past the limit,
not even for a moment (clocks are assumed NTP-synchronised to well under a second).

Which findings drain at all, and the class each drain counts in, is rules/drain_policy.py: the
breaker counts only the drains (and claims) of the deciding node's class, so security floors or
other software drains filling a partition's share never keep a hardware fault in service.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import re
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from gpufleet import redact
from gpufleet.engines.slurm import lifecycle
from gpufleet.model import SEVERITY_ORDER, Finding
from gpufleet.rules.drain_policy import CLASS_RANK, DrainClass, class_of_reason, policy

REASON_PREFIX = "gpufleet:"
REASON_MAX = 200  # Slurm keeps long reasons, but sinfo/squeue columns and humans do not
SINFO_FORMAT = "%N|%P|%T|%H|%E"  # reason last: it may contain the separator
CLAIM_PREFIX = "gpufleet-claim:"
CLAIM_LANDED_S = 2.0  # a claim counts only if Slurm stored it within this time of its stamp
SETTLE_S = 2.5  # from a claim's stamp to reading everyone's: > CLAIM_LANDED_S
CLAIM_TRIES = 3
CLAIM_TTL_S = 300.0  # an older claim is a check that died between claiming and clearing

Action = Literal["none", "drain", "keep", "resume", "leave", "breaker", "error", "relabel", "rma"]


class SlurmError(Exception):
    """A Slurm command failed; the message says which and why."""


@dataclass(frozen=True)
class NodeState:
    name: str
    partitions: tuple[str, ...]
    state: str  # sinfo %T, e.g. "idle", "drained", "draining", "mixed", "down*"
    reason: str | None = None
    reason_time: dt.datetime | None = None  # naive, the controller's local time
    claim: float | None = None  # epoch seconds of a pending gpufleet claim (node Comment)
    claim_class: DrainClass | None = None  # the claim's drain class; None: any (older claims)
    comment: str = ""  # the node Comment (read only with claims=True)

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
    # the node's lifecycle step (engines/slurm/lifecycle.py): (from, to)
    lifecycle: tuple[str, str] = ("in service", "in service")
    # the drain's breaker class (rules/drain_policy.py) and, per partition, gpufleet's drains
    # of other classes within the window: they do not count against this one
    drain_class: DrainClass | None = None
    other_classes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


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


_CLAIM = re.compile(re.escape(CLAIM_PREFIX) + r"(\d+(?:\.\d+)?)(?::(hardware|driver|software))?")


def parse_comments(text: str) -> dict[str, str]:
    """`sinfo -h -N -O NodeList:|,Comment:` → node -> Comment ("" for none)."""
    comments: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, comment = line.partition("|")
        comment = comment.strip()
        if sep and name.strip():
            comments[name.strip()] = "" if comment in ("(null)", "") else comment
    return comments


def claim_of(comment: str) -> float | None:
    m = _CLAIM.search(comment)
    return float(m.group(1)) if m else None


def claim_class_of(comment: str) -> DrainClass | None:
    m = _CLAIM.search(comment)
    return m.group(2) if m else None  # type: ignore[return-value]


def _timestamp(text: str) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(text)
    except ValueError:
        return None  # "Unknown"


def drain_reason(findings: Sequence[Finding], fail_on: str) -> str | None:
    """`gpufleet: GF402 message (+N more)` for the worst finding at or above fail_on whose
    policy drains (rules/drain_policy.py), else None: a security floor alone drains nothing.

    The message came from the host: secrets are redacted first (every cluster user can read a
    Reason with `sinfo -R`; the report redacts the same text), then only printable ASCII
    survives, on one line, bounded.
    """
    bad = [f for f in findings if SEVERITY_ORDER[f.severity] >= SEVERITY_ORDER[fail_on]
           and policy(f.rule).outcome == "drain"]
    if not bad:
        return None
    # An RMA verdict heads the reason whatever else is wrong: it is the node's lifecycle state.
    # Then the most severe, hardware before driver before software: the reason's first rule id
    # is the drain's breaker class.
    worst = sorted(bad, key=lambda f: (f.rule not in lifecycle.RMA_RULES,
                                       -SEVERITY_ORDER[f.severity],
                                       CLASS_RANK[policy(f.rule).klass or "hardware"],
                                       f.rule))[0]
    message = redact.text(worst.message)
    head = lifecycle.RMA.rstrip() if worst.rule in lifecycle.RMA_RULES else REASON_PREFIX
    text = re.sub(r"[^\x20-\x7e]+", " ", f"{head} {worst.rule} {message}")
    text = re.sub(r"\s+", " ", text).strip()
    more = f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""
    if len(text) + len(more) > REASON_MAX:
        text = text[: REASON_MAX - len(more) - 3].rstrip() + "..."
    return text + more


def breaker_limit(partition_size: int, share: float) -> int:
    """How many nodes of a partition gpufleet may drain within the window (at least one)."""
    return max(1, math.floor(partition_size * share + 1e-9))


def _recent_drains(nodes: Mapping[str, NodeState], partition: str, since: dt.datetime,
                   klass: DrainClass | None = None) -> list[NodeState]:
    """gpufleet's drains in partition with a reason time inside the window, in drain order;
    with klass, only the drains of that class."""
    found = [n for n in nodes.values() if partition in n.partitions and n.ours
             and n.reason_time is not None and n.reason_time >= since
             and (klass is None or class_of_reason(n.reason) == klass)]
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
    step = _lifecycle(me, reason, now)
    if step is not None:
        return step
    return _plan(node, me, nodes, reason, share=share, window_s=window_s, now=now)


def _lifecycle(me: NodeState, reason: str | None, now: dt.datetime) -> Plan | None:
    """The lifecycle steps of a node gpufleet drained (None: the plain drain/keep/resume)."""
    if not me.ours:
        return None
    was = lifecycle.state_of(me.reason, True)
    if was == "rma":
        return Plan("rma", me.name, reason=me.reason, lifecycle=(was, was),
                    detail=f"{me.name} is held for RMA ({me.reason}); gpufleet never resumes it: "
                    f"after the repair, `scontrol update NodeName={me.name} State=RESUME`")
    if was == "remediating" and not lifecycle.stale(me.reason_time, now):
        return Plan("keep", me.name, reason=me.reason, lifecycle=(was, was),
                    detail=f"{me.name} is being remediated ({me.reason}); left to it")
    if reason is not None and lifecycle.state_of(reason, True) == "rma":
        return Plan("relabel", me.name, reason=reason, lifecycle=(was, "rma"),
                    detail=f"{me.name} goes to RMA: {reason}")
    if reason is not None and was in ("re-validating", "remediating"):
        return Plan("relabel", me.name, reason=reason, lifecycle=(was, "drained"),
                    detail=f"{me.name} failed its re-test after remediation: {reason}")
    return None


def _plan(node: str, me: NodeState, nodes: Mapping[str, NodeState], reason: str | None, *,
          share: float, window_s: float, now: dt.datetime) -> Plan:
    was = lifecycle.state_of(me.reason, me.drained)
    if reason is None:
        if me.ours:
            return Plan("resume", node, reason=me.reason, lifecycle=(was, "in service"),
                        detail=f"{node} is healthy again: resuming the drain gpufleet wrote "
                        f"({me.reason})")
        if me.drained:
            return Plan("leave", node, reason=me.reason,
                        detail=f"{node} is healthy but drained by someone else ({me.reason}); "
                        "left as it is")
        return Plan("none", node)
    if me.ours:
        return Plan("keep", node, reason=me.reason, detail=f"{node} stays drained ({me.reason})",
                    lifecycle=(was, was))
    if me.drained:
        return Plan("leave", node, reason=me.reason,
                    detail=f"{node} is already drained by someone else ({me.reason}); its "
                    f"reason is left as it is (gpufleet would have written: {reason})")
    since = now - dt.timedelta(seconds=window_s)
    sizes = _sizes(nodes)
    klass = class_of_reason(reason)
    budget, elsewhere = {}, {}
    for p in me.partitions:
        others = tuple(n.name for n in _recent_drains(nodes, p, since, klass) if n.name != node)
        budget[p] = (breaker_limit(sizes[p], share), others)
        elsewhere[p] = tuple(n.name for n in _recent_drains(nodes, p, since)
                             if n.name != node and n.name not in others)
    spent = {p: b for p, b in budget.items() if len(b[1]) >= b[0]}
    if spent:
        return Plan("breaker", node, reason=reason, budget=budget,
                    detail=_breaker_sentence(node, spent, share, window_s, klass),
                    lifecycle=(was, "suspect"), drain_class=klass, other_classes=elsewhere)
    return Plan("drain", node, reason=reason, budget=budget,
                detail=f"draining {node}: {reason}" + _elsewhere_sentence(
                    klass, budget, elsewhere),
                lifecycle=(was, lifecycle.state_of(reason, True)), drain_class=klass,
                other_classes=elsewhere)


def _elsewhere_sentence(klass: DrainClass, budget: Mapping[str, tuple[int, tuple[str, ...]]],
                        elsewhere: Mapping[str, tuple[str, ...]]) -> str:
    """Says so when drains of other classes alone would have filled the breaker."""
    full = [f"partition {p}: {len(names)} other drain(s) ({', '.join(names)}), limit "
            f"{budget[p][0]}" for p, names in sorted(elsewhere.items())
            if names and len(names) + len(budget[p][1]) >= budget[p][0]]
    if not full:
        return ""
    return (f"; the breaker counts only {klass} drains, and drains of other classes fill it ("
            + "; ".join(full) + ")")


def decide(node: str, nodes: Mapping[str, NodeState], claim: float, *, share: float,
           window_s: float, now: dt.datetime, now_epoch: float,
           klass: DrainClass = "hardware") -> Plan:
    """After claiming at `claim` (epoch) and waiting SETTLE_S: drain only if the partition's
    drains of `klass` within the window plus the live claims of `klass` (or of no stated class)
    ordered before ours leave room."""
    me = nodes.get(node)
    if me is None:
        return Plan("error", node, detail=f"{node} vanished from sinfo while claiming")
    since = now - dt.timedelta(seconds=window_s)
    sizes = _sizes(nodes)
    budget, spent = {}, {}
    for p in me.partitions:
        drained = {n.name for n in _recent_drains(nodes, p, since, klass) if n.name != node}
        ahead = {n.name for n in nodes.values()
                 if p in n.partitions and n.name != node and n.claim is not None
                 and n.claim_class in (None, klass)
                 and n.claim > now_epoch - CLAIM_TTL_S and (n.claim, n.name) < (claim, node)}
        names = tuple(sorted(drained | ahead))
        limit = breaker_limit(sizes[p], share)
        budget[p] = (limit, names)
        if len(names) >= limit:
            spent[p] = (limit, names)
    if spent:
        return Plan("breaker", node, budget=budget, drain_class=klass,
                    detail=_breaker_sentence(node, spent, share, window_s, klass))
    return Plan("drain", node, budget=budget, drain_class=klass)


def _breaker_sentence(node: str, spent: Mapping[str, tuple[int, tuple[str, ...]]],
                      share: float, window_s: float, klass: DrainClass) -> str:
    parts = [f"partition {p}: {len(names)} node(s) already drained by gpufleet for {klass} "
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
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.time) -> None:
        self.node = node
        self._run = runner
        self._sleep = sleep
        self._clock = clock

    def nodes(self, *, claims: bool = False) -> dict[str, NodeState]:
        # Comments (claims) in a separate call: a Comment is free text and may hold the
        # separator. They are read *before* the states: a node clears its claim only after its
        # drain has landed, so read in this order every deciding node is seen by its claim or by
        # its drain. States first let one drain and clear in between and be seen by neither (a
        # loaded cluster drained three of four nodes with a limit of two that way).
        found = self._sinfo("-O", "NodeList:|,Comment:") if claims else None
        nodes = parse_sinfo(self._sinfo("-o", SINFO_FORMAT))
        if found is None:
            return nodes
        comments = parse_comments(found)
        return {n: dataclasses.replace(s, comment=comments.get(n, ""),
                                       claim=claim_of(comments.get(n, "")),
                                       claim_class=claim_class_of(comments.get(n, "")))
                for n, s in nodes.items()}

    def _sinfo(self, *args: str) -> str:
        res = self._run(["sinfo", "-h", "-N", *args])
        if res.returncode != 0:
            raise SlurmError(f"sinfo exited {res.returncode}: {res.stderr.strip()[:300]}")
        return res.stdout

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
            if first.action == "relabel" and first.reason is not None:
                self.drain(first.reason)  # already ours and drained: only the reason changes
            if first.action != "drain" or first.reason is None:
                return first
            done = self._claim_and_drain(first.reason, share=share, window_s=window_s)
            if done.action == "drain":  # keep the first plan's word on the other classes
                return dataclasses.replace(done, detail=first.detail.replace(
                    "draining", "drained", 1), other_classes=first.other_classes)
            return done
        except SlurmError as exc:
            return Plan("error", self.node, reason=reason, detail=str(exc))

    def _claim_and_drain(self, reason: str, *, share: float, window_s: float) -> Plan:
        klass = class_of_reason(reason)
        # The claim goes next to whatever Comment an admin left. Afterwards only the claim is
        # taken out of the Comment as it is *then*: an admin may have edited it meanwhile.
        mine = self.nodes(claims=True).get(self.node)
        original = _CLAIM.sub("", mine.comment if mine else "").strip()
        try:
            for _ in range(CLAIM_TRIES):
                claim = round(self._clock(), 3)
                self._update("Comment="
                             + f"{original} {CLAIM_PREFIX}{claim:.3f}:{klass}".strip())
                if self._clock() - claim <= CLAIM_LANDED_S:
                    break
            else:
                return Plan("error", self.node, reason=reason,
                            detail=f"Slurm took more than {CLAIM_LANDED_S:g} s to store the "
                            f"breaker claim, {CLAIM_TRIES} times; not draining {self.node}")
            self._sleep(max(0.0, claim + SETTLE_S - self._clock()))
            second = decide(self.node, self.nodes(claims=True), claim, share=share,
                            window_s=window_s, now=dt.datetime.now(), now_epoch=self._clock(),
                            klass=klass)
            if second.action != "drain":
                return dataclasses.replace(second, reason=reason,
                                           lifecycle=("in service", "suspect"))
            self.drain(reason)
            return dataclasses.replace(second, reason=reason,
                                       detail=f"drained {self.node}: {reason}",
                                       lifecycle=("in service",
                                                  lifecycle.state_of(reason, True)))
        finally:
            self._unclaim(original)

    def _unclaim(self, original: str) -> None:
        """Strip this node's claim token from its Comment as Slurm holds it now (F23)."""
        try:
            mine = self.nodes(claims=True).get(self.node)
            now = mine.comment if mine is not None else original
        except SlurmError:
            now = original  # cannot read it back: put back what was there before the claim
        self._update("Comment=" + re.sub(r"\s{2,}", " ", _CLAIM.sub("", now)).strip())


def plan_evidence(p: Plan) -> dict[str, object]:
    return {
        "node": p.node, "action": p.action, "reason": p.reason,
        "lifecycle": {"from": p.lifecycle[0], "to": p.lifecycle[1]},
        "budget": {k: {"limit": v[0], "drained": list(v[1])} for k, v in p.budget.items()},
        "drain_class": p.drain_class,
        "other_classes": {k: list(v) for k, v in p.other_classes.items()},
    }
