"""GF430-GF432: Xids escalating over this run and the saved runs (rules/escalation.py), on facts
the real probe script reads from the simulated host profiles."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from test_rules_captures import _probe

from gpufleet.cli import saved
from gpufleet.history.store import RunStore
from gpufleet.model import Facts, HostResult, HostSpec, Report, XidEvent
from gpufleet.report import document
from gpufleet.rules.escalation import RMA_RULES, Limits, escalate

BUS = "00000000:00:07.0"


@pytest.fixture(scope="module")
def facts() -> dict[str, Facts]:
    return {p: _probe(p) for p in ("xid79-repeat", "xid13-burst", "xid", "h200x2")}


def _doc(f: Facts, at: str, host: str = "gpu07") -> dict[str, object]:
    return document(Report(hosts={host: HostResult(host, "ok", None, f)},
                           specs={host: HostSpec(host, host)}, generated_at=at, level="quick"))


def _rules(current: dict[str, object], prior: list[dict[str, object]] | None = None,
           limits: Limits | None = None) -> dict[str, list[dict[str, object]]]:
    out: dict[str, list[dict[str, object]]] = {}
    for f in escalate(current, prior or [], limits or Limits()):
        out.setdefault(f.rule, []).append(dict(f.evidence))
    return out


def test_a_gpu_that_still_asks_for_a_reboot_after_two_reboots_goes_to_rma(
        facts: dict[str, Facts]) -> None:
    """The profile's journald holds three boots, each with Xid 79 on GPU 1 (gpud's limit 2)."""
    f = facts["xid79-repeat"]
    assert [e.this_boot for e in f.xid_events] == [None] * 3  # journald spans boots
    found = _rules(_doc(f, "2026-11-30T12:00:00Z"))
    (rma,) = found["GF432"]
    assert rma["count"] == 3 and rma["limit"] == 2 and rma["bus_id"] == BUS
    assert "gpud" in str(rma["source"])
    assert "GF432" not in _rules(_doc(f, "2026-11-30T12:00:00Z"), limits=Limits(reboot_limit=3))
    # Seven days later the first two boots are outside the window: not yet the hardware.
    assert "GF432" not in _rules(_doc(f, "2026-12-04T12:00:00Z"))


def test_repeating_xid_79_across_saved_runs(facts: dict[str, Facts], tmp_path: Path) -> None:
    """One boot per saved run, each logging Xid 79 again: only the store sees three."""
    events = facts["xid79-repeat"].xid_events
    store = RunStore(tmp_path / "runs")
    for ev, at in zip(events[:2], ("2026-11-26T10:00:00Z", "2026-11-28T10:00:00Z"), strict=True):
        store.save(_doc(dataclasses.replace(facts["xid79-repeat"], xid_events=(ev,)), at))
    now = dataclasses.replace(facts["xid79-repeat"], xid_events=events[2:])
    assert "GF432" not in _rules(_doc(now, "2026-11-30T12:00:00Z"))  # this run alone: once
    report = Report(hosts={"gpu07": HostResult("gpu07", "ok", None, now)},
                    specs={"gpu07": HostSpec("gpu07", "gpu07")},
                    generated_at="2026-11-30T12:00:00Z", level="quick")
    judged, doc = saved.with_history(report, tmp_path / "runs")
    (rma,) = [f for f in judged.findings if f.rule == "GF432"]
    assert rma.evidence["count"] == 3 and rma.severity == "error"
    assert "GF432" in {f["rule"] for f in doc["findings"]}


def test_the_same_line_in_every_saved_run_counts_once(facts: dict[str, Facts]) -> None:
    f = facts["xid"]  # Xid 48 and 79 once each, uptime-stamped: every run of this boot shows them
    runs = [_doc(f, f"2026-11-30T0{h}:00:00Z") for h in range(1, 8)]
    assert _rules(_doc(f, "2026-11-30T09:00:00Z"), runs) == {}


def test_an_xid_13_burst_on_one_gpc_tpc(facts: dict[str, Facts]) -> None:
    found = _rules(_doc(facts["xid13-burst"], "2026-11-30T12:00:00Z"))
    (burst,) = found["GF431"]
    assert burst["unit"] == "GPC 3, TPC 1" and burst["count"] == 4  # the ESR line names no unit
    assert "RepeatedXID13OnSameGPCAndTPC" in str(burst["source"])
    assert _rules(_doc(facts["h200x2"], "2026-11-30T12:00:00Z")) == {}


def test_five_fatal_xids_on_one_gpu_within_24_h(facts: dict[str, Facts]) -> None:
    def run(n: int) -> dict[str, list[dict[str, object]]]:
        evs = tuple(XidEvent(48, f"2026-11-30T0{i}:00:00+00:00", BUS, "DBE") for i in range(n))
        return _rules(_doc(dataclasses.replace(facts["h200x2"], xid_events=evs),
                           "2026-11-30T12:00:00Z"))
    (rep,) = run(5)["GF430"]
    assert rep["xid"] == 48 and rep["count"] == 5 and rep["limit"] == 5
    assert "GF430" not in run(4)


def test_limits_are_inventory_variables(facts: dict[str, Facts], tmp_path: Path) -> None:
    """gpufleet_xid_reboot_limit (and the other two) per host, read as hostvars are."""
    from gpufleet.inventory import spec_from_vars  # noqa: PLC0415
    from gpufleet.rules.escalation import escalation_findings  # noqa: PLC0415

    doc = _doc(facts["xid79-repeat"], "2026-11-30T12:00:00Z")
    strict = {"gpu07": spec_from_vars("gpu07", {})}
    lenient = {"gpu07": spec_from_vars("gpu07", {"gpufleet_xid_reboot_limit": 3,
                                                 "gpufleet_xid13_31_limit": 9})}
    assert [f.rule for f in escalation_findings(doc, [], lambda e: e, strict)] == ["GF432"]
    assert escalation_findings(doc, [], lambda e: e, lenient) == []
    burst = _doc(facts["xid13-burst"], "2026-11-30T12:00:00Z")
    assert escalation_findings(burst, [], lambda e: e, lenient) == []
    assert [f.rule for f in escalation_findings(burst, [], lambda e: e, strict)] == ["GF431"]


def test_xid_74_repeated_on_one_nvlink_is_that_links_finding(facts: dict[str, Facts]) -> None:
    """Three Xid 74 on GPU 1's link 5 (NVIDIA: "more than 2 times on the same link"): GF433,
    which holds the node for RMA; GF430 does not count them a second time."""
    f = _probe("xid74-link")
    assert [e.nvlink for e in f.xid_events] == [5, 5, 5]
    found = _rules(_doc(f, "2026-11-30T12:00:00Z"))
    (link,) = found["GF433"]
    assert link["nvlink"] == 5 and link["count"] == 3 and link["bus_id"] == BUS
    assert "WORKFLOW_NVLINK_ERR" in str(link["source"])
    assert set(found) == {"GF433"}
    assert "GF433" in RMA_RULES
    assert _rules(_doc(f, "2026-11-30T12:00:00Z"), limits=Limits(xid74_link_count=4)) == {}


def test_xid_74_spread_over_links_names_what_they_share(facts: dict[str, Facts]) -> None:
    f = _probe("xid74-spread")
    assert [e.nvlink for e in f.xid_events] == [2, 5, 11]
    found = _rules(_doc(f, "2026-11-30T12:00:00Z"))
    (spread,) = found["GF434"]
    assert spread["links"] == {"2": 1, "5": 1, "11": 1} and spread["count"] == 3
    assert set(found) == {"GF434"}  # no link repeats, and GF430 does not count them per GPU


def test_xid_74_per_link_across_saved_runs_and_older_saved_files(facts: dict[str, Facts]) -> None:
    """One Xid 74 on link 5 per saved run; the older runs were saved before the `nvlink` fact
    existed (the link is read from their message)."""
    line = ("pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link 5(0x10, 0x0, "
            "0x0, 0x0, 0x0, 0x0, 0x0)")
    runs = []
    for h in (1, 2, 3):
        ev = XidEvent(74, f"2026-11-30T0{h}:00:00+00:00", BUS, line, True, 5)
        runs.append(_doc(dataclasses.replace(facts["h200x2"], xid_events=(ev,)),
                         f"2026-11-30T0{h}:05:00Z"))
    for doc in runs[:2]:
        for ev in doc["hosts"]["gpu07"]["facts"]["xid_events"]:  # type: ignore[index]
            del ev["nvlink"]
    (link,) = _rules(runs[2], runs[:2])["GF433"]
    assert link["count"] == 3 and link["nvlink"] == 5
    assert lim_var({"gpufleet_xid74_link_limit": 4}).xid74_link_count == 4


def lim_var(hostvars: dict[str, object]) -> Limits:
    from gpufleet.inventory import spec_from_vars  # noqa: PLC0415
    from gpufleet.rules.escalation import limits_for  # noqa: PLC0415

    return limits_for(spec_from_vars("gpu07", hostvars).expect)


def test_gf432_counts_boots_by_boot_id_not_reboot_class_events(facts: dict[str, Facts]) -> None:
    """Three saved runs, each with a new Xid 79 line from dmesg (this boot). In one boot (one
    boot_id) that is one ask for a reboot, not three; in three boots it is past gpud's limit."""
    base = facts["h200x2"]

    def runs(boot_ids: list[str]) -> list[dict[str, object]]:
        out = []
        for h, boot in enumerate(boot_ids, 1):
            ev = XidEvent(79, f"[ {1000 * h}.000000]", BUS, "GPU has fallen off the bus.", True)
            out.append(_doc(dataclasses.replace(base, xid_events=(ev,), boot_id=boot),
                            f"2026-11-30T0{h}:00:00Z"))
        return out

    one = runs(["b7e0c1a4-0000-4000-8000-000000000001"] * 3)
    assert "GF432" not in _rules(one[-1], one[:-1])
    three = runs([f"b7e0c1a4-0000-4000-8000-00000000000{i}" for i in (1, 2, 3)])
    (rma,) = _rules(three[-1], three[:-1])["GF432"]
    assert rma["count"] == 3 and rma["counted_by"] == "boot id" and len(rma["boot_ids"]) == 3


def test_gf432_the_same_ring_buffer_line_in_three_boots_is_three_asks(
        facts: dict[str, Facts]) -> None:
    """A dmesg stamp is seconds since that boot: a GPU that fails the same way early in every
    boot logs the same line, stamp included, in each. Three boots, three asks (seen on the
    fleet's reboot test: the three lines were taken for one event)."""
    base = facts["h200x2"]
    ev = XidEvent(79, "[ 7100.200300]", BUS, "GPU has fallen off the bus.", True)
    docs = [_doc(dataclasses.replace(base, xid_events=(ev,),
                                     boot_id=f"b7e0c1a4-0000-4000-8000-00000000000{h}"),
                 f"2026-11-30T0{h}:00:00Z") for h in (1, 2, 3)]
    (rma,) = _rules(docs[-1], docs[:-1])["GF432"]
    assert rma["count"] == 3 and len(rma["boot_ids"]) == 3


def _retested(f: Facts, at: str, to: str = "in service") -> dict[str, object]:
    """A saved node-check run whose Slurm lifecycle finding took the node from re-validating
    (as engines/slurm writes GF903/GF907)."""
    doc = _doc(f, at)
    doc["findings"] = [{"rule": "GF903" if to == "in service" else "GF907",
                        "severity": "info", "hosts": ["gpu07"], "message": "",
                        "evidence": {"lifecycle": {"from": "re-validating", "to": to}},
                        "remediation": ""}]
    return doc


def test_gf435_five_remediations_in_a_week_send_the_node_to_rma(
        facts: dict[str, Facts]) -> None:
    """NVSentinel's MultipleRemediations: 5 re-tests after a remediation within 7 days. Four is
    not yet; five days-old ones outside the window do not count; it is an RMA hold."""
    f = facts["h200x2"]
    runs = [_retested(f, f"2026-11-2{d}T10:00:00Z", "in service" if d % 2 else "drained")
            for d in range(4, 9)]
    now = _doc(f, "2026-11-29T10:00:00Z")
    (held,) = _rules(now, runs)["GF435"]
    assert held["count"] == 5 and held["limit"] == 5 and "MultipleRemediations" in held["source"]
    assert "GF435" in RMA_RULES
    assert "GF435" not in _rules(now, runs[1:])
    assert "GF435" not in _rules(_doc(f, "2026-12-02T10:00:00Z"), runs)  # 3 left in the window
    assert "GF435" in _rules(now, runs[1:], Limits(remediation_limit=4))
    assert lim_var({"gpufleet_remediation_limit": 3}).remediation_limit == 3
    # Drains that were no re-test (from drained, from in service) are not remediations.
    plain = _doc(f, "2026-11-28T11:00:00Z")
    plain["findings"] = [{"rule": "GF902", "severity": "info", "hosts": ["gpu07"], "message": "",
                          "evidence": {"lifecycle": {"from": "in service", "to": "drained"}},
                          "remediation": ""}] * 5
    assert "GF435" not in _rules(now, [plain, *runs[1:]])


def test_gf432_counts_the_drivers_own_ask_for_a_reboot(facts: dict[str, Facts]) -> None:
    """The driver's recovery action Reboot (NVML NODE_REBOOT) is an ask for a reboot even when
    the Xids it follows are not reboot-class (profile recovery-reboot: Xid 31, then Xid 154).
    Three boots in which it still asks: RMA. (Seen on the fleet's reboot test: GF432 ignored the
    driver, so such a GPU was rebooted forever.)"""
    from gpufleet.model import GpuRecovery  # noqa: PLC0415

    base = facts["h200x2"]
    asks = (GpuRecovery("00000000:00:06.0", "node_reboot", "Reboot"),
            GpuRecovery(BUS, "none", "None"))
    docs = [_doc(dataclasses.replace(base, gpu_recovery=asks, xid_events=(),
                                     boot_id=f"b7e0c1a4-0000-4000-8000-00000000000{h}"),
                 f"2026-11-30T0{h}:00:00Z") for h in (1, 2, 3)]
    (rma,) = _rules(docs[-1], docs[:-1])["GF432"]
    assert rma["bus_id"] == "00000000:00:06.0" and rma["count"] == 3
    assert rma["asked_by_driver"] == 3 and len(rma["boot_ids"]) == 3
    assert "GF432" not in _rules(docs[-1], docs[1:-1])  # two boots: within gpud's limit
    one_boot = [_doc(dataclasses.replace(base, gpu_recovery=asks, boot_id=docs[0]["hosts"]
                                         ["gpu07"]["facts"]["boot_id"]),  # type: ignore[index]
                     f"2026-11-30T0{h}:00:00Z") for h in (1, 2, 3)]
    assert "GF432" not in _rules(one_boot[-1], one_boot[:-1])  # one boot asking three times
