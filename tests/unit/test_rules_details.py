"""The judgement inside the rules: compatibility tables, windows, tiers, statistics."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone

import pytest
from test_rules_builders import BUSBW, NOW, fleet, gpu, smoke

from gpufleet.model import DriverInfo, Finding, RankInfo, Report, SmokeResult, XidEvent
from gpufleet.rules import evaluate
from gpufleet.rules.base import cuda_from_image, vtuple
from gpufleet.rules.compat import nccl_code
from gpufleet.rules.perf import low_outliers


def _only(report: Report, rule: str, now: datetime = NOW) -> list[Finding]:
    return [f for f in evaluate(report, now=now) if f.rule == rule]


@pytest.mark.parametrize(("ref", "cuda"), [
    ("registry.example/nvidia/pytorch:25.10-py3-cuda13.0", "13.0"),
    ("pytorch/pytorch:2.8.0-cuda12.8-cudnn9-runtime", "12.8"),
    ("registry.local:5000/ml/torch:2.11.0-cu130", "13.0"),
    ("registry.example/x/train:cu118-py310", "11.8"),
    ("registry.example/x/train@sha256:" + "cu121" * 5, None),  # a digest is not a tag
    ("registry.local:5000/cu128/torch:latest", None),  # only the tag counts
    ("registry.example/nvidia/pytorch:25.10-py3", None),
    (None, None),
])
def test_cuda_from_image_tag(ref: str | None, cuda: str | None) -> None:
    assert cuda_from_image(ref) == cuda


def test_versions_and_nccl_codes() -> None:
    assert vtuple("580.159.04") == (580, 159, 4)
    assert vtuple("2.11.0+cu130") == (2, 11, 0)
    assert vtuple("1.17.8-1") == (1, 17, 8)
    assert nccl_code("2.28.9") == 22809  # REFERENCE.md: 22809 = 2.28.9
    assert nccl_code("2.8.4") == 2804  # before 2.9: X*1000+Y*100+Z
    assert nccl_code("2.28") is None


def _driver_case(driver: str, cuda: str, smoke_status: str | None) -> list[Finding]:
    ch: dict[str, object] = {"facts": {"driver": DriverInfo(driver, driver, "open", None)}}
    if smoke_status is None:
        ch["smoke"] = None
    else:
        s = smoke("gpu02", status=smoke_status)
        ch["smoke"] = dataclasses.replace(s, ranks=tuple(
            dataclasses.replace(r, cuda=cuda) for r in s.ranks))
    return _only(fleet({"gpu02": ch}, expectations={
        "driver_version": None, "pytorch_image": f"x/torch:1-cuda{cuda}"}), "GF301")


def test_cuda_driver_full_minor_forward_compat() -> None:
    assert _driver_case("570.26", "12.8", None) == []  # exactly the full-feature minimum
    (minor,) = _driver_case("550.54.14", "12.8", None)  # 12.x floor 525.60.13 <= 550 < 570.26
    assert minor.severity == "warning" and minor.evidence["mode"] == "minor_version_compat"
    assert minor.evidence["cuda_source"].startswith("image tag")
    (broken,) = _driver_case("570.195.03", "13.0", "fail")  # below the 13.x floor (580)
    assert broken.severity == "error" and broken.evidence["cuda_source"] == "smoke"
    assert "forward compatibility" in broken.message  # H200 is a data-center GPU
    assert "nvidia_driver_branch=580" in broken.remediation
    (fwd,) = _driver_case("570.195.03", "13.0", "pass")  # it ran: cuda-compat in use
    assert fwd.severity == "info" and fwd.evidence["mode"] == "forward_compat"
    (old,) = _driver_case("470.256.02", "12.2", None)  # below the 12.x floor
    assert old.severity == "error"


def test_cuda_newer_than_table_needs_at_least_newest_known() -> None:
    (f,) = _driver_case("590.44.01", "13.9", None)
    assert f.evidence["full_feature_min_driver"] == "595.45.04" and f.severity == "warning"


def test_branch_eol_notice_then_past() -> None:
    r = fleet({"gpu02": {"facts": {"driver": DriverInfo("610.10", "610.10", "open", "13.2")}}},
              expectations={"driver_version": None})
    assert _only(r, "GF302", datetime(2026, 3, 1, tzinfo=timezone.utc)) == []
    (soon,) = _only(r, "GF302", datetime(2026, 7, 1, tzinfo=timezone.utc))
    assert soon.severity == "info" and soon.evidence["eol"] == "2026-08-31"
    (past,) = _only(r, "GF302", datetime(2026, 9, 1, tzinfo=timezone.utc))
    assert past.severity == "warning" and "nvidia_driver_branch=620" in past.remediation
    newer = fleet({"gpu02": {"facts": {"driver": DriverInfo("700.1", "700.1", "open", None)}}},
                  expectations={"driver_version": None})
    assert _only(newer, "GF302") == []


@pytest.mark.parametrize(("version", "severity"), [
    ("1.16.2", "error"), ("1.17.7", "error"), ("1.17.8", "warning"), ("1.19.0", "warning"),
    ("1.19.1", None), ("1.20.0", None),
])
def test_toolkit_security_floors(version: str, severity: str | None) -> None:
    found = _only(fleet({"gpu02": {"facts": {"toolkit_version": version}}}), "GF303")
    assert [f.severity for f in found] == ([severity] if severity else [])


def test_xid_window() -> None:
    def at(ts: str) -> list[str]:
        ev = XidEvent(79, ts, "0000:00:07.0", "fallen off the bus")
        found = evaluate(fleet({"gpu02": {"facts": {"xid_events": (ev,)}}}), now=NOW)
        return [f.rule for f in found]
    assert at("2026-11-30T02:00:00Z") == ["GF405"]  # 10 h ago
    assert at("2026-11-28T02:00:00Z") == ["GF406"]  # outside 24 h: info only
    assert at("[ 88.123456]") == ["GF405"]  # this boot


def test_pcie_generation_drop_when_idle_is_info_width_is_warning() -> None:
    idle = _only(fleet({"gpu02": {"facts": {"gpus": (gpu(0, pcie_gen_current=1), gpu(1))}}}),
                 "GF407")
    assert [f.severity for f in idle] == ["info"]
    busy = _only(fleet({"gpu02": {"facts": {"gpus": (
        gpu(0, pcie_gen_current=4, throttle_reasons=(), throttle_mask="0x0"), gpu(1))}}}),
        "GF407")
    assert [f.severity for f in busy] == ["warning"]


def test_mig_expected_is_silent() -> None:
    r = fleet({"gpu02": {"facts": {"gpus": (gpu(0, mig_mode="Enabled"), gpu(1))},
                         "expect": {"mig_expected": True}}})
    assert _only(r, "GF410") == []


def test_ecc_disabled_names_every_gpu_and_the_command() -> None:
    # docs/add-a-rule.md's worked example: the finding test.
    r = fleet({"gpu02": {"facts": {"gpus": (gpu(0, ecc_mode="Disabled"), gpu(1),
                                            gpu(2, ecc_mode="Disabled"))}}})
    [f] = _only(r, "GF414")
    assert (f.hosts, f.severity, f.evidence) == (("gpu02",), "warning", {"gpus": [0, 2]})
    assert f.message == "gpu02: ECC disabled on GPU(s) 0,2"
    assert f.remediation.startswith("`nvidia-smi -i 0,2 -e 1` on gpu02, then reset the GPUs "
                                    "(`nvidia-smi -r -i 0,2`)")


def test_ecc_not_available_is_silent() -> None:
    # The healthy test: a GPU without ECC memory reports "N/A", which the probe reads as None.
    r = fleet({"gpu02": {"facts": {"gpus": (gpu(0, ecc_mode=None), gpu(1, ecc_mode="Enabled"))}}})
    assert _only(r, "GF414") == []


def test_ecc_lifetime_only_is_warning() -> None:
    (f,) = _only(fleet({"gpu02": {"facts": {"gpus": (
        gpu(0, ecc_uncorrected_aggregate=3), gpu(1))}}}), "GF402")
    assert f.severity == "warning"


def test_drift_tie_names_every_host_and_majority_names_odd_one() -> None:
    drv = DriverInfo("580.95.05", "580.95.05", "open", "13.0")
    (tie,) = _only(fleet({"b": {"facts": {"driver": drv}}}, hosts=("a", "b"),
                         with_expect=False), "GF201")
    assert tie.hosts == ("a", "b") and tie.evidence["majority"] == "none (tie)"
    (odd,) = _only(fleet({"b": {"facts": {"driver": drv}}}, with_expect=False,
                         hosts=("a", "b", "c")), "GF201")
    assert odd.hosts == ("b",) and odd.evidence["values"]["b"] == "580.95.05"


def test_drift_only_within_group_and_model() -> None:
    drv = DriverInfo("580.95.05", "580.95.05", "open", "13.0")
    r = fleet({"c": {"facts": {"driver": drv}, "groups": ("other",)}},
              hosts=("a", "b", "c"), with_expect=False)
    assert _only(r, "GF201") == []
    r = fleet({"c": {"facts": {"driver": drv, "gpus": (gpu(0, name="NVIDIA A100"),)}}},
              hosts=("a", "b", "c"), with_expect=False)
    assert _only(r, "GF201") == []


def test_drift_with_expectation_set_is_left_to_desired_state() -> None:
    r = fleet({"gpu02": {"facts": {"driver": DriverInfo("580.95.05", "580.95.05", "open",
                                                        "13.0")}}})
    rules = {f.rule for f in evaluate(r, now=NOW)}
    assert "GF101" in rules and "GF201" not in rules


def test_outlier_statistics_tolerate_a_tight_fleet() -> None:
    stats = low_outliers([343.7, 343.9, 343.5, 343.6])
    assert stats is not None and stats[2] < 343.7 * 0.9 + 1e-9  # 10 % rule caps the MAD rule
    assert low_outliers([1.0, 2.0]) is None
    r = fleet({"gpu02": {"smoke": {"busbw_gbps": {**BUSBW, 4 << 30: 330.0}}}},
              expectations={"min_busbw_gbps": None})
    assert _only(r, "GF502") == []  # 4 % below the median is noise


def test_busbw_cohorts_separate_topologies() -> None:
    nv8 = {"GPU0": {"GPU1": "NV8"}, "GPU1": {"GPU0": "NV8"}}
    r = fleet({"gpu02": {"smoke": {"busbw_gbps": {**BUSBW, 4 << 30: 150.0}},
                         "facts": {"topology": dataclasses.replace(
                             fleet().hosts["gpu01"].facts.topology, links=nv8)}}},  # type: ignore[union-attr]
              expectations={"min_busbw_gbps": None})
    assert _only(r, "GF502") == []  # an NV8 host is not compared with NV18 hosts


def test_multinode_nccl_mismatch_is_error_group_mismatch_warning() -> None:
    ranks = (RankInfo(0, "gpu01", 0, nccl="2.28.9"), RankInfo(1, "gpu02", 0, nccl="2.28.3"))
    mn = SmokeResult(status="fail", ranks=ranks, hosts=("gpu01", "gpu02"))
    (f,) = _only(fleet({"gpu01": {"smoke": mn}, "gpu02": {"smoke": mn}},
                       hosts=("gpu01", "gpu02")), "GF305")
    assert f.severity == "error" and f.evidence["version_codes"] == {"gpu01": 22809,
                                                                       "gpu02": 22803}
    s = smoke("gpu03")
    other = dataclasses.replace(s, ranks=tuple(dataclasses.replace(r, nccl="2.27.7")
                                               for r in s.ranks))
    (g,) = _only(fleet({"gpu03": {"smoke": other}}), "GF305")
    assert g.severity == "warning" and g.hosts == ("gpu03",)


def test_nvml_mismatch_from_error_text_alone() -> None:
    r = fleet({"gpu02": {"facts": {
        "driver": DriverInfo("580.159.04", None, None, None), "gpus": (),
        "errors": {"nvidia_smi": "NVML: Driver/library version mismatch"}}}})
    assert [f.severity for f in _only(r, "GF304")] == ["error"]


def test_secrets_do_not_reach_findings_output_but_evidence_is_kept() -> None:
    r = fleet({"gpu02": {"smoke": {"status": "error", "error": "boom",
                                   "log_tail": "HF_TOKEN=hf_" + "x" * 30}}})
    (f,) = _only(r, "GF602")
    assert "hf_" in f.evidence["log_tail"]  # rules keep data; renderers redact (test_report)


def test_cpu_gloo_runs_are_not_judged_for_performance() -> None:
    def cpu(host: str, tflops: float, bw: float) -> SmokeResult:
        return dataclasses.replace(smoke(host), backend="gloo", device_count=0,
                                   matmul_tflops={0: tflops}, busbw_gbps={1 << 20: bw})
    r = fleet({h: {"facts": {"gpus": ()}, "smoke": cpu(h, t, bw)}
               for h, t, bw in (("a", 0.1, 1.0), ("b", 0.1, 1.0), ("c", 0.01, 0.1))},
              hosts=("a", "b", "c"), expectations={"gpu_count": None})
    assert {f.rule for f in evaluate(r, now=NOW)} & {"GF501", "GF502", "GF503"} == set()


def test_multinode_busbw_judged_per_host_against_same_world_size() -> None:
    pairs = {"a": ("a", "b"), "b": ("a", "b"), "c": ("c", "d"), "d": ("c", "d")}
    bw = {"a": 90.0, "b": 91.0, "c": 89.5, "d": 40.0}
    r = fleet({h: {"smoke": {"hosts": pairs[h], "busbw_gbps": {1 << 30: bw[h]}}} for h in pairs},
              hosts=tuple(pairs), expectations={"min_busbw_gbps": 50.0})
    assert [f.hosts for f in _only(r, "GF501")] == [("d",)]
    (out,) = _only(r, "GF502")
    assert out.hosts == ("d",) and out.evidence["world_hosts"] == 2
    # Single-node runs of the same hosts are another cohort: 343.7 GB/s is not "fast" there.
    assert _only(fleet(hosts=("a", "b", "c", "d")), "GF502") == []


def test_repeated_xids_are_one_finding_with_a_count() -> None:
    flaps = [XidEvent(79, f"[ {100 + i}.0]", "0000:00:07.0", "fallen off the bus")
             for i in range(300)]
    evs = (*flaps, XidEvent(13, "[ 5.0]", "0000:00:06.0", "exception"))
    found = evaluate(fleet({"gpu02": {"facts": {"xid_events": evs}}}), now=NOW)
    (crit,) = [f for f in found if f.rule == "GF405"]
    assert crit.evidence["count"] == 300 and crit.evidence["first"] == "[ 100.0]"
    assert "x300" in crit.message
    assert [f.rule for f in found if f.rule == "GF406"] == ["GF406"]
