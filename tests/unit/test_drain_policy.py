"""The drain policy (rules/drain_policy.py) on the drain engine with its fake Slurm (the
recorded sinfo/scontrol runner of test_slurm_plan.py): only hardware and driver state drains,
the reason leads with the worst health finding, and the breaker counts one class at a time.

The findings are written as gpufleet's own rules word them (GF308: rules/security.py, the
CVE-2025-31133 floor of security_floors.yaml; GF405/GF421: rules/faults.py for an Xid 79, as
the Slurm lab's node3 shows them in tests/slurm/test_slurm.py)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path

from test_slurm_plan import NOW, Recorder, _cluster

from gpufleet.engines.slurm.drain import SlurmNode, decide, drain_reason, plan
from gpufleet.model import Finding
from gpufleet.rules import drain_policy as policy
from gpufleet.rules.catalog import RULES

DOC = Path(__file__).resolve().parents[2] / "docs" / "slurm.md"


def _f(rule: str, node: str, message: str) -> Finding:
    return Finding(rule=rule, severity="error", hosts=(node,), message=message)


def _runc(node: str) -> Finding:
    return _f("GF308", node, f"{node}: runc 1.1.12 is below the security floor 1.2.8 "
              "(CVE-2025-31133)")


def _dead_gpu(node: str) -> list[Finding]:
    return [_f("GF405", node, f"{node}: Xid 79 on 00000000:AB:00.0: GPU has fallen off the bus"),
            _f("GF421", node, f"{node}: 2 NVIDIA GPU(s) on the PCI bus, the driver enumerates "
               "1; missing 0000:ab:00.0")]


def _check(fake: Recorder, node: str, findings: list[Finding], share: float) -> str:
    node_ = SlurmNode(node, runner=fake, sleep=lambda s: None)
    return node_.apply(drain_reason(findings, "error"), share=share, window_s=3600).action


def test_a_cve_floor_across_the_fleet_never_keeps_a_dead_gpu_in_service() -> None:
    """Issue 40.1: every node below the runc floor, node4 has also lost a GPU. The floor drains
    nobody (a planned upgrade); node4 is drained, for the GPU, whatever the checks' order."""
    for share in (0.25, 0.5):
        fake = Recorder(_cluster())
        actions = {n: _check(fake, n, [_runc(n)], share) for n in ("node1", "node2", "node3")}
        actions["node4"] = _check(fake, "node4", [_runc("node4"), *_dead_gpu("node4")], share)
        assert actions == {"node1": "none", "node2": "none", "node3": "none",
                           "node4": "drain"}, (share, actions)
        assert [n for n, s in fake.nodes.items() if s.drained] == ["node4"]
        reason = fake.nodes["node4"].reason or ""
        assert reason.startswith("gpufleet: GF405 node4: Xid 79"), reason
        assert reason.endswith("(+1 more)"), reason  # GF421; the runc floor is not a drain


def test_software_drains_filling_the_breaker_do_not_hold_a_hardware_drain() -> None:
    """Drains gpufleet wrote for software (a runc floor by an older gpufleet, a full /tmp)
    fill the partition's share; the dead GPU's drain goes through and says so."""
    fake = Recorder(_cluster())
    for n, why in (("node1", "gpufleet: GF308 node1: runc below the security floor"),
                   ("node2", "gpufleet: GF011 node2: /tmp is full")):
        fake.nodes[n] = dataclasses.replace(fake.nodes[n], state="drained", reason=why,
                                            reason_time=dt.datetime.now().replace(microsecond=0))
    p = SlurmNode("node4", runner=fake, sleep=lambda s: None).apply(
        drain_reason(_dead_gpu("node4"), "error"), share=0.5, window_s=3600)
    assert p.action == "drain", p
    assert fake.nodes["node4"].state == "drained"
    assert p.drain_class == "hardware" and p.budget["gpu"] == (2, ())
    assert p.other_classes["gpu"] == ("node1", "node2")
    assert "the breaker counts only hardware drains" in p.detail, p.detail
    # A second software drain, by contrast, is held by the software drains.
    held = plan("node3", fake.nodes, "gpufleet: GF011 node3: /tmp is full", share=0.25,
                window_s=3600, now=dt.datetime.now())
    assert held.action == "breaker" and held.drain_class == "software", held


def test_claims_block_only_their_own_class() -> None:
    epoch = 1764500000.0
    nodes = _cluster(claims={"node1": epoch - 0.1, "node2": epoch - 0.05})
    nodes["node1"] = dataclasses.replace(nodes["node1"], claim_class="software")
    nodes["node2"] = dataclasses.replace(nodes["node2"], claim_class="hardware")
    kw = {"share": 0.25, "window_s": 3600, "now": NOW, "now_epoch": epoch + 1.5}
    assert decide("node4", nodes, epoch, klass="hardware", **kw).action == "breaker"  # type: ignore[arg-type]
    nodes["node2"] = dataclasses.replace(nodes["node2"], claim=None, claim_class=None)
    assert decide("node4", nodes, epoch, klass="hardware", **kw).action == "drain"  # type: ignore[arg-type]


def test_the_reason_leads_with_the_most_severe_health_finding() -> None:
    ecc = _f("GF402", "node2", "node2 GPU 1: 2 uncorrected ECC errors")
    assert drain_reason([_runc("node2"), ecc], "error") == \
        "gpufleet: GF402 node2 GPU 1: 2 uncorrected ECC errors"
    assert drain_reason([_runc("node2")], "error") is None
    slow = Finding(rule="GF409", severity="warning", hosts=("node2",), message="persistence off")
    # severity first: the ECC error before a driver warning, whatever the rule ids
    assert (drain_reason([slow, ecc], "warning") or "").startswith("gpufleet: GF402")


def test_every_rule_has_a_policy_from_the_table() -> None:
    families = set(policy.FAMILY_POLICY)
    unknown = [r for r in RULES if r not in policy.RULE_POLICY and r[:3] + "xx" not in families]
    assert not unknown, f"rules without a drain policy: {unknown}"
    assert set(policy.RULE_POLICY) <= set(RULES), set(policy.RULE_POLICY) - set(RULES)
    for rule in ("GF303", "GF307", "GF308", "GF309", "GF302"):
        assert policy.policy(rule).outcome == "schedule", rule
    assert policy.policy("GF201").outcome == "warn"
    assert policy.policy("GF405") == policy.FAMILY_POLICY["GF4xx"]
    assert policy.class_of_reason("gpufleet: RMA GF432 x") == "hardware"
    assert policy.class_of_reason("gpufleet: GF011 x") == "software"


def test_docs_show_the_table_as_the_code_has_it() -> None:
    text = DOC.read_text()
    start, end = "<!-- drain-policy:begin -->\n", "<!-- drain-policy:end -->"
    assert start in text and end in text, f"{DOC} lacks the drain-policy markers"
    shown = text.split(start, 1)[1].split(end, 1)[0]
    assert shown == policy.render_markdown(), (
        "docs/slurm.md's drain table is stale: paste policy.render_markdown() between the markers"
        " (python -c 'from gpufleet.rules import drain_policy as p; print(p.render_markdown())')")
