"""NVIDIA's Xid catalog as data, the driver's recovery action as the primary verdict, and faults
that last until a reset: current whatever their age (rules/xid.py, rules/faults.py)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from test_rules_builders import NOW, fleet, gpu

from gpufleet.model import GpuRecovery, PciFunction, XidEvent
from gpufleet.probes.recovery import recovery_action
from gpufleet.rules import evaluate
from gpufleet.rules import xid as xids

CATALOG = Path(xids.__file__).with_name(xids.CATALOG_FILE)
OLD = "2026-11-28T02:00:00+00:00"  # 58 h before NOW: outside the 24 h window


def test_every_catalog_entry_has_a_source_and_both_actions_or_none_given() -> None:
    doc = json.loads(CATALOG.read_text())
    assert len(doc["xids"]) >= 172  # every code NVIDIA's catalog lists (1..172 when read)
    codes = [e["xid"] for e in doc["xids"]]
    assert len(codes) == len(set(codes))
    for e in doc["xids"]:
        src = doc["sources"].get(e["source"])
        assert src and ("https://" in src or "@" in src), e
        assert e["mnemonic"] and e["description"], e
        assert e["immediate"] is None or e["immediate"] in xids.BUCKET_NEED, e
        assert set(e) == {"xid", "mnemonic", "description", "immediate", "investigatory",
                          "source"}, e


@pytest.mark.parametrize(("code", "need", "bucket"), [
    (79, "reboot", "RESTART_BM"), (48, "reset", "WORKFLOW_XID_48"), (63, "none", "IGNORE"),
    (13, "app", "RESTART_APP"), (74, "reset", "WORKFLOW_NVLINK_ERR"), (95, "reset", "RESET_GPU"),
    (119, "reset", "RESET_GPU"), (154, "none", "XID_154"), (162, "unknown", None),
])
def test_catalog_verdicts(code: int, need: str, bucket: str | None) -> None:
    v = xids.verdict(code)
    assert (v.need, v.bucket, v.decided_by) == (need, bucket, "NVIDIA Xid catalog")
    assert "analyzing-xid-catalog" in v.source


def test_the_driver_decides_where_it_reports() -> None:
    assert xids.verdict(13, "gpu_reset").need == "reset"  # the catalog alone: app
    assert xids.verdict(79, "none").need == "none"
    v = xids.verdict(48, "node_reboot")
    assert (v.need, v.decided_by, v.bucket) == ("reboot", "driver recovery action", "node_reboot")
    assert xids.verdict(9999).need == "unknown"


@pytest.mark.parametrize(("text", "action"), [
    ("None", "none"), ("Reset", "gpu_reset"), ("GPU_RESET", "gpu_reset"),
    ("Reboot", "node_reboot"), ("Drain P2P", "drain_p2p"), ("Drain and Reset", "drain_and_reset"),
    ("\x1b[31m$(reboot)", "31m_reboot"), ("", None), (None, None),
])
def test_recovery_words(text: str | None, action: str | None) -> None:
    assert recovery_action(text) == action


def _rules(events: tuple[XidEvent, ...], **facts: object) -> list[tuple[str, str]]:
    found = evaluate(fleet({"gpu02": {"facts": {"xid_events": events, **facts}}}), now=NOW)
    return [(f.rule, f.severity) for f in found if "gpu02" in f.hosts]


def test_a_lasting_xid_in_this_boots_log_is_current_whatever_its_age() -> None:
    """Issue 26: Xid 79 two days ago in this boot's dmesg was info ("outside the window")."""
    fell = XidEvent(79, OLD, "00000000:00:07.0", "GPU has fallen off the bus.", this_boot=True)
    assert _rules((fell,)) == [("GF405", "error")]
    journald = XidEvent(79, OLD, "00000000:00:07.0", "GPU has fallen off the bus.")
    assert _rules((journald,)) == [("GF406", "info")]  # may predate a reboot: the window decides
    app = XidEvent(13, OLD, "00000000:00:07.0", "Graphics Exception", this_boot=True)
    assert _rules((app,)) == [("GF406", "info")]  # RESTART_APP never lasts


def test_the_drivers_none_does_not_clear_a_lasting_xid_and_its_reset_keeps_it() -> None:
    """Issue 40.7: a DBE in this boot's log stays current though the driver reads None."""
    fell = XidEvent(48, "[ 12.0]", "00000000:00:07.0", "DBE", this_boot=True)
    cleared = (GpuRecovery("00000000:00:07.0", "none", "None"),)
    assert _rules((fell,), gpu_recovery=cleared) == [("GF405", "error")]
    pending = (GpuRecovery("00000000:00:07.0", "gpu_reset", "Reset"),)
    old = XidEvent(94, OLD, "00000000:00:07.0", "Contained", this_boot=None)
    assert _rules((old,), gpu_recovery=pending) == [("GF405", "error")]


def test_a_lost_gpu_from_the_nodes_own_evidence() -> None:
    bus = tuple(PciFunction(f"0000:00:0{n}.0", "0x030200", "0x2335") for n in (6, 7, 8))
    fell = XidEvent(79, OLD, "00000000:00:08.0", "GPU has fallen off the bus.", this_boot=True)
    found = evaluate(fleet({"gpu02": {"facts": {"pci_gpus": bus, "xid_events": (fell,)}}}),
                     now=NOW)
    (lost,) = [f for f in found if f.rule == "GF421"]
    assert lost.evidence["missing"] == ["0000:00:08.0"] and lost.evidence["xids"] == {
        "0000:00:08.0": [79]}
    assert "3 NVIDIA GPU(s) on the PCI bus, the driver enumerates 2" in lost.message
    # Not when nvidia-smi failed (GF010 says that), nor when the bus shows what the driver does.
    assert not [f for f in evaluate(fleet({"gpu02": {"facts": {
        "pci_gpus": bus[:2], "gpus": (gpu(0), gpu(1))}}}), now=NOW) if f.rule == "GF421"]


# NVIDIA's Xid 94/95 line ends with the reset flags ("Contained: SM (0x1). RST: No, D-RST: No" is
# NVIDIA's own Xid 94 example, docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/index.html); the
# Xid 95 line below is that form with RST: Yes (an inference from the example, as issue 40
# quotes the judging case: "the Xid's own line says `RST: Yes`").
UNCONTAINED = "pid=7062, Uncontained: FBHUB. RST: Yes, D-RST: No"
AN_HOUR_AGO = (NOW - timedelta(hours=1)).isoformat()


def test_an_xid_that_asks_for_a_reset_stays_current_when_the_driver_reads_none() -> None:
    """Issue 40.7: Xid 95 an hour ago, its line says RST: Yes, recovery action None (or no
    recovery field at all, older drivers): still current until a reset or a boot."""
    cleared = (GpuRecovery("00000000:00:07.0", "none", "None"),)
    xid95 = XidEvent(95, AN_HOUR_AGO, "00000000:00:07.0", UNCONTAINED, this_boot=True)
    assert _rules((xid95,), gpu_recovery=cleared) == [("GF405", "error")]
    assert _rules((xid95,)) == [("GF405", "error")]
    # The line's own flag decides where the catalog alone would not: Xid 94 asks only for an
    # application restart, unless its line says otherwise.
    flagged = XidEvent(94, OLD, "00000000:00:07.0", "pid=1, Contained: SM (0x1). D-RST: Yes",
                       this_boot=True)
    assert _rules((flagged,), gpu_recovery=cleared) == [("GF405", "error")]
    contained = XidEvent(94, AN_HOUR_AGO, "00000000:00:07.0",
                         "pid=1, Contained: SM (0x1). RST: No, D-RST: No", this_boot=True)
    assert _rules((contained,), gpu_recovery=cleared) == [("GF406", "info")]
    # A boot clears it: from journald (may span boots) and outside the window it is history.
    before_boot = XidEvent(95, OLD, "00000000:00:07.0", UNCONTAINED)
    assert _rules((before_boot,), gpu_recovery=cleared) == [("GF406", "info")]
