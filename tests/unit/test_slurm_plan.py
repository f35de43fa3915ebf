"""gpufleet.engines.slurm.drain's pure parts: sinfo parsing, the drain reason, the plan and the
circuit breaker (including health checks racing on every node at once), with a recorded command
runner."""

from __future__ import annotations

import dataclasses
import datetime as dt
import subprocess
from collections.abc import Sequence

import pytest

from gpufleet.engines.slurm import drain as slurm
from gpufleet.engines.slurm import nodecheck
from gpufleet.engines.slurm.drain import (
    NodeState,
    SlurmNode,
    breaker_limit,
    claim_of,
    decide,
    drain_reason,
    parse_comments,
    parse_sinfo,
    plan,
)
from gpufleet.model import Finding
from gpufleet.rules import slurm as slurm_rules

NOW = dt.datetime(2026, 11, 30, 10, 0, 0)
# A drain time the test fills in with the clock when it runs (never when the module is collected).
JUST_NOW = dt.datetime(1, 1, 1)
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
    assert reason.startswith("gpufleet: GF402 GPU 1 bad xxx")  # escapes gone whole
    assert reason.endswith("... (+1 more)") and len(reason) <= 200
    assert all(" " <= c <= "~" for c in reason)
    assert drain_reason(findings[:1], "error") is None
    assert drain_reason(findings[:1], "warning") == "gpufleet: GF409 persistence off"


def test_drain_reason_redacts_secrets_before_slurm_shows_them_to_every_user() -> None:
    """Security review F11: `sinfo -R` is world-readable; the reason must be as redacted as the
    report."""
    secret = _err("GF601", "node1: smoke error: https://svc:Zx9-s3cr3t@registry.example/v2 "
                  "HF_TOKEN=hf_abcdefghijklmnopqrstuvwx")
    reason = drain_reason([secret], "error")
    assert reason is not None
    assert "Zx9-s3cr3t" not in reason and "hf_abcdefghijklmnopqrstuvwx" not in reason
    assert reason == "gpufleet: GF601 node1: smoke error: https://***@registry.example/v2 " \
        "HF_TOKEN=***"


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


def _cluster(drained: Sequence[str] = (), claims: dict[str, float] | None = None,
             t: dt.datetime = NOW) -> dict[str, NodeState]:
    nodes = {f"node{i}": NodeState(f"node{i}", ("gpu",), "idle") for i in range(1, 5)}
    for n in drained:
        nodes[n] = NodeState(n, ("gpu",), "drained", "gpufleet: GF402 x", t)
    for n, c in (claims or {}).items():
        nodes[n] = dataclasses.replace(nodes[n], claim=c)
    return nodes


def test_comments_carry_claims_next_to_an_admins_text() -> None:
    comments = parse_comments("node1|rack 7 gpufleet-claim:1764500000.250\nnode2|(null)\n")
    assert comments == {"node1": "rack 7 gpufleet-claim:1764500000.250", "node2": ""}
    assert claim_of(comments["node1"]) == 1764500000.25 and claim_of("rack 7") is None


def test_simultaneous_claims_let_exactly_the_limit_drain() -> None:
    """Three checks claimed within the same few milliseconds: (claim time, name) orders them;
    the first two drain, the third trips the breaker, and no drain ever happens beyond it."""
    epoch = 1764500000.0
    claims = {"node1": epoch + 0.002, "node2": epoch + 0.001, "node3": epoch + 0.001}
    nodes = _cluster(claims=claims)
    verdicts = {n: decide(n, nodes, c, share=0.5, window_s=3600, now=NOW,
                          now_epoch=epoch + 1.5).action for n, c in claims.items()}
    assert verdicts == {"node2": "drain", "node3": "drain", "node1": "breaker"}
    # The first one has already drained and cleared its claim: it still counts.
    later = _cluster(drained=["node2"], claims={"node3": claims["node3"],
                                                "node1": claims["node1"]})
    assert decide("node1", later, claims["node1"], share=0.5, window_s=3600, now=NOW,
                  now_epoch=epoch + 1.5).action == "breaker"
    # A claim left behind by a check that died long ago does not block anyone.
    stale = _cluster(claims={"node4": epoch - 600})
    assert decide("node1", stale, epoch, share=0.25, window_s=3600, now=NOW,
                  now_epoch=epoch + 1.5).action == "drain"


class Recorder:
    """A fake for the Slurm commands: sinfo answers from a state that updates change."""

    def __init__(self, nodes: dict[str, NodeState]) -> None:
        self.nodes = nodes
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        if argv[0] == "sinfo" and "-O" in argv:
            lines = [f"{n.name}|{n.comment or '(null)'}" for n in self.nodes.values()]
            return subprocess.CompletedProcess(argv, 0, "\n".join(lines), "")
        if argv[0] == "sinfo":
            lines = [f"{n.name}|{','.join(n.partitions)}|{n.state}|"
                     f"{n.reason_time.isoformat() if n.reason_time else 'Unknown'}|"
                     f"{n.reason or 'none'}" for n in self.nodes.values()]
            return subprocess.CompletedProcess(argv, 0, "\n".join(lines), "")
        name, (key, _, value) = argv[2].split("=", 1)[1], argv[3].partition("=")
        old = self.nodes[name]
        if key == "Comment":
            self.nodes[name] = dataclasses.replace(old, comment=value)
        elif value == "DRAIN":
            self.nodes[name] = dataclasses.replace(
                old, state="drained", reason=argv[4].split("=", 1)[1],
                reason_time=dt.datetime.now().replace(microsecond=0))
        elif value == "RESUME":
            self.nodes[name] = dataclasses.replace(old, state="idle", reason=None,
                                                   reason_time=None)
        return subprocess.CompletedProcess(argv, 0, "", "")


def test_apply_claims_waits_and_trips_when_earlier_claims_fill_the_budget() -> None:
    fake = Recorder(_cluster())
    fake.nodes["node3"] = dataclasses.replace(fake.nodes["node3"], comment="rack 7")
    clock = iter([1000.0, 1000.1, 1000.2, 1002.6])  # stamp, stored, before sleep, decide

    def others_claim_meanwhile(_: float) -> None:  # two checks claimed just before ours
        for n, c in (("node1", 999.9), ("node2", 999.95)):
            fake.nodes[n] = dataclasses.replace(fake.nodes[n],
                                                comment=f"gpufleet-claim:{c:.3f}")

    node = SlurmNode("node3", runner=fake, sleep=others_claim_meanwhile,
                     clock=lambda: next(clock))
    p = node.apply("gpufleet: GF402 x", share=0.5, window_s=3600)
    assert p.action == "breaker" and p.budget["gpu"] == (2, ("node1", "node2"))
    claimed = "Comment=rack 7 gpufleet-claim:1000.000:hardware"  # stamp and drain class
    assert ["scontrol", "update", "NodeName=node3", claimed] in fake.calls
    assert not any("State=DRAIN" in c for c in fake.calls)  # never drained, not even briefly
    assert fake.calls[-1] == ["scontrol", "update", "NodeName=node3", "Comment=rack 7"]
    assert fake.nodes["node3"].state == "idle"


def test_an_admins_comment_written_during_the_claim_window_is_kept() -> None:
    """Security review F23: the breaker takes out only its own claim, from the Comment as it
    is after the window, instead of writing back the copy it read before claiming."""
    fake = Recorder(_cluster())

    def admin_edits(_: float) -> None:  # an admin annotates the node while it settles
        claim = fake.nodes["node1"].comment
        fake.nodes["node1"] = dataclasses.replace(fake.nodes["node1"],
                                                  comment=f"RMA ticket 4711 {claim}")

    p = SlurmNode("node1", runner=fake, sleep=admin_edits).apply(
        "gpufleet: GF402 x", share=0.5, window_s=3600)
    assert p.action == "drain", p
    assert fake.nodes["node1"].comment == "RMA ticket 4711"
    assert fake.calls[-1] == ["scontrol", "update", "NodeName=node1", "Comment=RMA ticket 4711"]


def test_a_drain_landing_between_the_two_reads_is_still_seen() -> None:
    """Another node drains and clears its claim while this one reads: whichever read sees it
    (the claim before, the drain after), it counts, and the breaker holds at its limit."""
    fake = Recorder(_cluster())
    fake.nodes["node1"] = dataclasses.replace(fake.nodes["node1"], comment="gpufleet-claim:999.900")
    reads = 0

    def racing(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        nonlocal reads
        out = fake(argv)
        if argv[0] == "sinfo":
            reads += 1
            if reads == 4:  # node1 drains and clears its claim between the deciding two reads
                fake(["scontrol", "update", "NodeName=node1", "State=DRAIN", "Reason=gpufleet: x"])
                fake(["scontrol", "update", "NodeName=node1", "Comment="])
        return out

    clock = iter([1000.0, 1000.1, 1000.2, 1002.6])
    p = SlurmNode("node3", runner=racing, sleep=lambda s: None, clock=lambda: next(clock)).apply(
        "gpufleet: GF402 x", share=0.25, window_s=3600)
    assert p.action == "breaker", p
    assert p.budget["gpu"] == (1, ("node1",))
    assert fake.nodes["node3"].state == "idle"


def test_apply_drains_when_there_is_room() -> None:
    fake = Recorder(_cluster())
    p = SlurmNode("node1", runner=fake, sleep=lambda s: None).apply(
        "gpufleet: GF402 x", share=0.5, window_s=3600)
    assert p.action == "drain", p
    assert fake.nodes["node1"].state == "drained"
    assert fake.nodes["node1"].reason == "gpufleet: GF402 x" and fake.nodes["node1"].comment == ""


def test_a_claim_stored_too_late_is_made_again_or_not_at_all() -> None:
    """A claim Slurm stored long after its stamp may be invisible to a node that decided in
    between: the claimant must not drain on it."""
    fake = Recorder(_cluster())
    stamps = iter([1000.0, 1003.0, 1010.0, 1013.0, 1020.0, 1023.0])  # each stored 3 s late
    p = SlurmNode("node1", runner=fake, sleep=lambda s: None, clock=lambda: next(stamps)).apply(
        "gpufleet: GF402 x", share=0.5, window_s=3600)
    assert p.action == "error" and "to store the breaker claim, 3 times" in p.detail
    assert fake.nodes["node1"].state == "idle" and fake.nodes["node1"].comment == ""
    claims = [c for c in fake.calls if c[-1].startswith("Comment=gpufleet-claim:")]
    assert len(claims) == 3


def test_apply_failure_is_a_plan_not_an_exception() -> None:
    def broken(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 1, "", "slurm_load_node error: Unable to "
                                           "contact slurm controller")

    p = SlurmNode("node1", runner=broken).apply("gpufleet: GF402 x", share=0.5, window_s=60)
    assert p.action == "error" and "Unable to contact slurm controller" in p.detail


@pytest.mark.parametrize(("nodes", "reason", "rule"), [
    (_cluster(drained=["node2", "node3"], t=JUST_NOW),
     "gpufleet: GF402 x", "GF901"),  # drained just now: inside the window
    (_cluster(), "gpufleet: GF402 x", "GF902"),
    (_cluster(drained=["node1"]), None, "GF903"),
    ({**_cluster(), "node1": NodeState("node1", ("gpu",), "drained", "maintenance")}, None,
     "GF904"),
    ({}, None, "GF905"),
    ({**_cluster(), "node1": NodeState("node1", ("gpu",), "drained", "gpufleet: RMA GF432 x",
                                       NOW)}, None, "GF906"),
    ({**_cluster(), "node1": NodeState("node1", ("gpu",), "drained",
                                       "gpufleet: re-validating after GPU 1 reset", NOW)},
     "gpufleet: GF402 x", "GF907"),
])  # fmt: skip
def test_every_slurm_outcome_is_a_finding_with_a_filled_remediation(
        monkeypatch: pytest.MonkeyPatch, nodes: dict[str, NodeState], reason: str | None,
        rule: str) -> None:
    now = dt.datetime.now().replace(microsecond=0)
    nodes = {k: dataclasses.replace(v, reason_time=now) if v.reason_time == JUST_NOW else v
             for k, v in nodes.items()}
    fake = Recorder(dict(nodes))
    real = slurm.SlurmNode

    def fake_node(name: str) -> slurm.SlurmNode:
        return real(name, runner=fake, sleep=lambda s: None)

    monkeypatch.setattr(nodecheck, "SlurmNode", fake_node)
    findings = (_err(),) if reason else ()
    found = nodecheck.slurm_findings("node1", findings, fail_on="error", share=0.5,
                                     window_s=3600)
    assert [f.rule for f in found] == [rule]
    assert rule in slurm_rules.RULES
    assert found[0].hosts == ("node1",) and found[0].message
    assert "?" not in found[0].remediation and "node1" in found[0].remediation


def _node(reason: str, t: dt.datetime = NOW) -> dict[str, NodeState]:
    return {**_cluster(), "node1": NodeState("node1", ("gpu",), "drained", reason, t)}


def _step(nodes: dict[str, NodeState], reason: str | None,
          now: dt.datetime = NOW) -> tuple[str, tuple[str, str]]:
    p = plan("node1", nodes, reason, share=0.5, window_s=3600, now=now)
    return p.action, p.lifecycle


def test_an_rma_verdict_heads_the_drain_reason() -> None:
    reason = drain_reason([_err("GF405", "node1: Xid 79 on 00000000:00:07.0"),
                           _err("GF432", "node1: the GPU at 00000000:00:07.0 asked for a reboot "
                                "3 times")], "error")
    assert reason is not None and reason.startswith("gpufleet: RMA GF432 node1: the GPU at")
    assert reason.endswith("(+1 more)")


def test_lifecycle_steps() -> None:
    """suspect -> drained -> remediating -> re-validating -> in service | drained again | rma."""
    healthy, faulty, rma = None, "gpufleet: GF405 x", "gpufleet: RMA GF432 x"
    assert _step(_cluster(), faulty) == ("drain", ("in service", "drained"))
    assert _step(_cluster(), rma) == ("drain", ("in service", "rma"))
    assert _step(_node(faulty), faulty) == ("keep", ("drained", "drained"))
    assert _step(_node(faulty), rma) == ("relabel", ("drained", "rma"))
    busy = _node("gpufleet: remediating GPU 1 reset")
    assert _step(busy, healthy) == ("keep", ("remediating", "remediating"))  # left to the play
    assert _step(busy, faulty) == ("keep", ("remediating", "remediating"))
    later = NOW + dt.timedelta(hours=2)  # the play died: the health check takes the node back
    assert _step(busy, healthy, later) == ("resume", ("remediating", "in service"))
    assert _step(busy, faulty, later) == ("relabel", ("remediating", "drained"))
    retest = _node("gpufleet: re-validating after GPU 1 reset")
    assert _step(retest, healthy) == ("resume", ("re-validating", "in service"))
    assert _step(retest, faulty) == ("relabel", ("re-validating", "drained"))
    held = _node(rma)
    assert _step(held, healthy) == ("rma", ("rma", "rma"))  # never resumed by gpufleet
    assert _step(held, faulty) == ("rma", ("rma", "rma"))
    admin = _node("maintenance: PSU swap")
    assert _step(admin, faulty)[0] == "leave" and _step(admin, healthy)[0] == "leave"


def test_relabel_rewrites_only_the_reason_of_a_node_already_out() -> None:
    fake = Recorder(_node("gpufleet: re-validating after GPU 1 reset"))
    p = SlurmNode("node1", runner=fake, sleep=lambda s: None).apply(
        "gpufleet: GF405 still", share=0.5, window_s=3600)
    assert p.action == "relabel"
    assert fake.nodes["node1"].reason == "gpufleet: GF405 still"
    assert not any(c[-1].startswith("Comment=") for c in fake.calls)  # no breaker claim
