"""Check coverage from a run store: per node, how long ago it last passed a check at each depth,
and which nodes are out of their goal (e.g. a full check weekly, a multinode run daily).

A depth is covered by a passing run at that depth or deeper: a `full` run covers `quick` and
`facts`; `multinode` is a smoke world of more than one host that passed. A node the inventory
names but no saved run has is out of every goal ("never").
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from gpufleet import redact

DEPTHS = ("facts", "quick", "full", "multinode")
_LEVEL_RANK = {"facts": 0, "quick": 1, "full": 2}
# ClusterMAX expects active checks on idle nodes weekly (anchors §4.5): full weekly; quick daily.
DEFAULT_GOALS: Mapping[str, timedelta] = {"full": timedelta(days=7), "quick": timedelta(days=1)}
_DURATION = re.compile(r"^(\d+)([smhdw])$")
_UNIT = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


class GoalError(ValueError):
    """A --goal that is not DEPTH=DURATION."""


def parse_goal(text: str) -> tuple[str, timedelta]:
    """'full=7d' -> ('full', 7 days); depths: facts, quick, full, multinode; units s m h d w."""
    depth, sep, dur = text.partition("=")
    span = parse_duration(dur)
    if not sep or depth not in DEPTHS or span is None:
        raise GoalError(f"--goal {text!r}: expected DEPTH=DURATION with DEPTH one of "
                        f"{', '.join(DEPTHS)} and DURATION like 12h, 7d or 2w")
    return depth, span


def parse_duration(text: str) -> timedelta | None:
    """'12h' -> 12 hours; units s m h d w; None for anything else (or zero)."""
    m = _DURATION.match(text.strip())
    if not m or int(m.group(1)) == 0:
        return None
    return timedelta(**{_UNIT[m.group(2)]: int(m.group(1))})


def _when(text: str) -> datetime | None:
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (TypeError, ValueError):
        return None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def _world(s: Mapping[str, Any]) -> int:
    w = s.get("world")
    return w if isinstance(w, int) else 1


def _covers(entry: Mapping[str, Any], s: Mapping[str, Any]) -> set[str]:
    """The depths one index entry's host summary proves."""
    if s.get("status") != "ok":
        return set()
    got = {"facts"}
    rank = _LEVEL_RANK.get(str(entry.get("level")), 0)
    if rank >= 1 and s.get("smoke") == "pass":
        got |= {d for d, r in _LEVEL_RANK.items() if r <= rank}
        if _world(s) > 1:
            got.add("multinode")
    return got


@dataclass(frozen=True)
class NodeCoverage:
    host: str
    last: Mapping[str, str | None]  # depth -> generated_at of the newest run proving it
    age_s: Mapping[str, float | None]  # depth -> seconds since; None = never
    overdue: tuple[str, ...]  # depths whose goal the node misses


def coverage(entries: Sequence[Mapping[str, Any]], hosts: Iterable[str],
             goals: Mapping[str, timedelta], now: datetime) -> list[NodeCoverage]:
    newest: dict[str, dict[str, tuple[datetime, str]]] = {}
    for e in entries:
        t = _when(str(e.get("generated_at") or ""))
        if t is None:
            continue
        for host, s in (e.get("hosts") or {}).items():
            if not isinstance(s, Mapping):
                continue
            for depth in _covers(e, s):
                mine = newest.setdefault(host, {})
                if depth not in mine or mine[depth][0] < t:
                    mine[depth] = (t, str(e["generated_at"]))
    out = []
    for host in hosts:
        mine = newest.get(host, {})
        last = {d: (mine[d][1] if d in mine else None) for d in DEPTHS}
        age = {d: ((now - mine[d][0]).total_seconds() if d in mine else None) for d in DEPTHS}
        overdue = tuple(d for d, goal in goals.items()
                        if (a := age[d]) is None or a > goal.total_seconds())
        out.append(NodeCoverage(host, last, age, overdue))
    return out


def last_run(entries: Sequence[Mapping[str, Any]], level: str) -> dict[str, datetime]:
    """host -> time of its newest saved run at `level`, whatever the outcome (a failed or
    unreachable run counts: deepcheck's cool-down starts at any attempt)."""
    out: dict[str, datetime] = {}
    for e in entries:
        t = _when(str(e.get("generated_at") or ""))
        if t is None or e.get("level") != level:
            continue
        for host in e.get("hosts") or {}:
            if host not in out or out[host] < t:
                out[host] = t
    return out


def last_deep(entries: Sequence[Mapping[str, Any]]) -> dict[str, datetime]:
    """host -> time of its newest deep check, whatever the outcome: a run at the full level,
    or a smoke world of more than one host (deepcheck's cool-down starts at either)."""
    out = last_run(entries, "full")
    for e in entries:
        t = _when(str(e.get("generated_at") or ""))
        if t is None:
            continue
        for host, s in (e.get("hosts") or {}).items():
            if (isinstance(s, Mapping) and _world(s) > 1
                    and (host not in out or out[host] < t)):
                out[host] = t
    return out


def fmt_age(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def render_text(rows: Sequence[NodeCoverage], goals: Mapping[str, timedelta]) -> str:
    """One line per node; host names from saved runs are untrusted: control bytes never reach
    the terminal."""
    goal_text = ", ".join(f"{d} every {fmt_age(g.total_seconds())}" for d, g in goals.items())
    late = [r for r in rows if r.overdue]
    lines = [f"gpufleet coverage: {len(rows)} node(s), goals {goal_text or 'none'}; "
             f"{len(late)} out of goal"]
    names = {r.host: redact.text(r.host) for r in rows}
    width = max([len(n) for n in names.values()] + [4])
    lines.append(f"{'node':<{width}}  " + "  ".join(f"{d:>9}" for d in DEPTHS) + "  out of goal")
    for r in rows:
        ages = "  ".join(f"{fmt_age(r.age_s[d]):>9}" for d in DEPTHS)
        lines.append(f"{names[r.host]:<{width}}  {ages}  " + (", ".join(r.overdue) or "-"))
    return "\n".join(lines) + "\n"


def render_prometheus(rows: Sequence[NodeCoverage], goals: Mapping[str, timedelta]) -> str:
    from prometheus_client import CollectorRegistry, generate_latest  # noqa: PLC0415
    from prometheus_client.core import GaugeMetricFamily  # noqa: PLC0415
    from prometheus_client.registry import Collector  # noqa: PLC0415

    class _Coverage(Collector):
        def collect(self) -> Any:
            age = GaugeMetricFamily("gpufleet_coverage_age_seconds",
                                    "seconds since the node last passed a check at this depth "
                                    "(absent: never)", labels=["host", "depth"])
            late = GaugeMetricFamily("gpufleet_coverage_overdue",
                                     "1 when the node misses its coverage goal at this depth",
                                     labels=["host", "depth"])
            goal = GaugeMetricFamily("gpufleet_coverage_goal_seconds",
                                     "the coverage goal per depth", labels=["depth"])
            for r in rows:
                for d in DEPTHS:
                    if (a := r.age_s[d]) is not None:
                        age.add_metric([r.host, d], a)
                for d in goals:
                    late.add_metric([r.host, d], 1.0 if d in r.overdue else 0.0)
            for d, g in goals.items():
                goal.add_metric([d], g.total_seconds())
            yield from (age, late, goal)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Coverage())
    return generate_latest(registry).decode("utf-8")
