"""gpufleet.slurm's pure parts: sinfo parsing, the drain reason, the plan and the circuit breaker
(including health checks racing on every node at once), with a recorded command runner."""

from __future__ import annotations

import datetime as dt
import subprocess
from collections.abc import Sequence

import pytest

from gpufleet.model import Finding
from gpufleet.slurm import (
    NodeState,
    SlurmNode,
    breaker_limit,
    drain_reason,
    parse_sinfo,
    plan,
    settle,
)

NOW = dt.datetime(2026, 11, 30, 10, 0, 0)
SINFO = """\
node1|gpu*|idle|Unknown|none
node2|gpu*|drained|2026-11-30T09:59:00|gpufleet: GF402 node2 GPU 1: 2 uncorrected ECC errors
node3|gpu*|draining|2026-11-30T09:00:00|maintenance: PSU swap
node4|gpu*|mixed|Unknown|none
node4|debug|mixed|Unknown|none
"""


def _err(rule: str = "GF402", message: str = "node1 GPU 1: 2 uncorrected ECC errors",
         severity: str = "error") -> Finding:
    return Finding(rule=rule, severity=severity, hosts=("node1",), message=message)  # type: ignore[arg-type]


def test_parse_sinfo_merges_partitions_and_reads_reasons() -> None:
    nodes = parse_sinfo(SINFO)
    assert nodes["node4"].partitions == ("gpu", "debug")
    assert nodes["node1"].reason is None and nodes["node1"].reason_time is None
    assert nodes["node2"].ours and nodes["node2"].reason_time == dt.datetime(2026, 11, 30, 9, 59)
    assert nodes["node3"].drained and not nodes["node3"].ours


def test_drain_reason_names_the_worst_rule_and_is_one_clean_line() -> None:
    findings = [_err("GF409", "persistence off", "warning"),
                _err(message="GPU 1\n\x1b[31mbad\x1b[0m  " + "x" * 400), _err("GF403", "remap")]
    reason = drain_reason(findings, "error")
    assert reason is not None
    assert reason.startswith("gpufleet: GF402 GPU 1 [31mbad [0m xxx")
    assert reason.endswith("... (+1 more)") and len(reason) <= 200
    assert all(" " <= c <= "~" for c in reason)
    assert drain_reason(findings[:1], "error") is None
    assert drain_reason(findings[:1], "warning") == "gpufleet: GF409 persistence off"


def test_breaker_limit_is_a_share_with_a_floor_of_one() -> None:
    assert [breaker_limit(4, 0.5), breaker_limit(4, 0.1), breaker_limit(100, 0.1)] == [2, 1, 10]
    assert breaker_limit(3, 1.0) == 3


@pytest.mark.parametrize(("node", "bad", "action"), [
    ("node1", True, "drain"),     # healthy in Slurm, finding now
    ("node1", False, "none"),
    ("node2", True, "keep"),      # our drain, still faulty
    ("node2", False, "resume"),   # our drain, healthy again
    ("node3", True, "leave"),     # an admin's drain: never relabelled
    ("node3", False, "leave"),    # ... and never resumed
    ("nodeX", True, "error"),     # Slurm does not know the name
])  # fmt: skip
def test_plan(node: str, bad: bool, action: str) -> None:
    reason = "gpufleet: GF402 x" if bad else None
    p = plan(node, parse_sinfo(SINFO), reason, share=0.5, window_s=3600, now=NOW)
    assert p.action == action, p


def test_breaker_counts_only_gpufleet_drains_inside_the_window() -> None:
    nodes = parse_sinfo(SINFO)
    # 4 nodes in gpu, 50 % -> 2; node2 is one drain of ours within the hour: node1 may go.
    assert plan("node1", nodes, "gpufleet: GF402 x", share=0.5, window_s=3600,
                now=NOW).action == "drain"
    # 25 % -> 1, already spent by node2: tripped, with the evidence to say so.
    p = plan("node1", nodes, "gpufleet: GF402 x", share=0.25, window_s=3600, now=NOW)
    assert p.action == "breaker"
    assert p.budget["gpu"] == (1, ("node2",))
    assert "circuit breaker tripped: node1 not drained" in p.detail and "node2" in p.detail
    # node2's drain is older than a 30 s window: it no longer counts.
    assert plan("node1", nodes, "gpufleet: GF402 x", share=0.25, window_s=30,
                now=NOW).action == "drain"


def _drained(names: Sequence[str], t: dt.datetime) -> dict[str, NodeState]:
    nodes = {f"node{i}": NodeState(f"node{i}", ("gpu",), "idle") for i in range(1, 5)}
    for n in names:
        nodes[n] = NodeState(n, ("gpu",), "drained", "gpufleet: GF402 x", t)
    return nodes


def test_simultaneous_drains_settle_to_the_limit() -> None:
    """Three checks drained in the same second, each saw none before: the order (time, name)
    keeps the first two, the third takes its drain back."""
    t = NOW - dt.timedelta(seconds=2)
    after = _drained(["node1", "node2", "node3"], t)
    verdicts = {n: settle(n, after, share=0.5, window_s=3600, now=NOW).action
                for n in ("node1", "node2", "node3")}
    assert verdicts == {"node1": "drain", "node2": "drain", "node3": "breaker"}


class Recorder:
    """A fake for the two Slurm commands: sinfo answers from a state that updates change."""

    def __init__(self, nodes: dict[str, NodeState]) -> None:
        self.nodes = nodes
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        if argv[0] == "sinfo":
            lines = [f"{n.name}|{','.join(n.partitions)}|{n.state}|"
                     f"{n.reason_time.isoformat() if n.reason_time else 'Unknown'}|"
                     f"{n.reason or 'none'}" for n in self.nodes.values()]
            return subprocess.CompletedProcess(argv, 0, "\n".join(lines), "")
        name = argv[2].split("=", 1)[1]
        if argv[3] == "State=DRAIN":
            self.nodes[name] = NodeState(name, ("gpu",), "drained", argv[4].split("=", 1)[1],
                                         dt.datetime.now().replace(microsecond=0))
        elif argv[3] == "State=RESUME":
            self.nodes[name] = NodeState(name, ("gpu",), "idle")
        return subprocess.CompletedProcess(argv, 0, "", "")


def test_apply_drains_then_settles_and_takes_back_over_the_limit() -> None:
    now = dt.datetime.now().replace(microsecond=0)
    # Two other checks landed in the same second as ours, after our first look.
    fake = Recorder(_drained([], now))
    node = SlurmNode("node3", runner=fake, sleep=lambda s: fake.nodes.update(
        _drained(["node1", "node2", "node3"], now)))
    p = node.apply("gpufleet: GF402 x", share=0.5, window_s=3600)
    assert p.action == "breaker"
    assert ["scontrol", "update", "NodeName=node3", "State=DRAIN",
            "Reason=gpufleet: GF402 x"] in fake.calls
    assert fake.calls[-1] == ["scontrol", "update", "NodeName=node3", "State=RESUME"]
    assert fake.nodes["node3"].state == "idle"


def test_apply_failure_is_a_plan_not_an_exception() -> None:
    def broken(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 1, "", "slurm_load_node error: Unable to "
                                           "contact slurm controller")

    p = SlurmNode("node1", runner=broken).apply("gpufleet: GF402 x", share=0.5, window_s=60)
    assert p.action == "error" and "Unable to contact slurm controller" in p.detail
