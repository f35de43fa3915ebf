"""One root cause, one finding (rules/one_cause.py, GF549): what folds and what stays.

The co-tenant capture of the lent H200 through the whole judge is in tests/unit/test_sku.py
(test_device_co_tenant_is_one_finding_naming_the_pid_after_the_judge)."""

from __future__ import annotations

from typing import Any

from gpufleet.model import Finding, HostResult, Report
from gpufleet.report.pipeline import amend, judge
from gpufleet.rules.base import finding
from gpufleet.rules.one_cause import fold

HOG = {"cause": "other_processes", "text": "other process(es) computing on this GPU during the "
       "run: pid 5403 python3 (1002 MiB)", "processes": [{"pid": "5403",
                                                          "process_name": "python3"}]}
BRAKE = {"cause": "hw_power_brake_slowdown", "text": "clock event reason active under load: "
         "HW power brake (external power brake signal)"}


def _slow(host: str, gpu: int, dtype: str, cause: dict[str, Any] | None,
          rule: str = "GF540") -> Finding:
    return finding(rule, [host], f"{host} GPU {gpu}: {dtype} GEMM slow",
                   {"gpu": gpu, "metric": "matmul_tflops", "dtype": dtype, "measured": 300.0,
                    "expected": 726.3, "floor": 617.3, "causes": [cause] if cause else []},
                   hint="stop the other process(es) or wait for them: pid 5403")


def _drop(host: str, gpu: int, rule: str = "GF546") -> Finding:
    ev = ({"gpu": gpu, "line": f"gpu{gpu}.matmul_tflops.bf16", "measured": 300.0,
           "baseline": 790.0} if rule == "GF546" else
          {"gpu": gpu, "tflops": 300.0, "baseline_tflops": 790.0})
    return finding(rule, [host], f"{host} GPU {gpu}: dropped", ev, since="then", line="l",
                   drop="60%", gpu=gpu)


def test_one_cause_over_gemm_hbm_and_history_is_one_finding_with_each_measurement() -> None:
    parts = [_slow("a", 0, d, HOG) for d in ("bf16", "fp16")]
    parts += [_slow("a", 0, "-", HOG, rule="GF541"), _drop("a", 0), _drop("a", 0, "GF521")]
    out = fold(parts)
    assert [f.rule for f in out] == ["GF549"], out
    [one] = out
    assert one.severity == "error" and one.hosts == ("a",)
    assert "pid 5403" in one.message and "5 slow measurement(s)" in one.message, one.message
    assert [m["rule"] for m in one.evidence["measurements"]] == [
        "GF540", "GF540", "GF541", "GF546", "GF521"]
    gf521 = one.evidence["measurements"][-1]
    assert (gf521["measured"], gf521["baseline"]) == (300.0, 790.0)
    assert one.evidence["gpus"] == [0] and one.evidence["causes"] == [HOG]
    assert one.remediation.startswith("stop the other process(es) or wait for them: pid 5403")


def test_what_the_cause_does_not_explain_stays_apart() -> None:
    parts = [_slow("a", 0, "bf16", HOG), _slow("a", 0, "fp16", HOG),
             _slow("a", 1, "bf16", None),  # no cause seen on GPU 1
             _drop("a", 1),  # a drop on GPU 1: the GPU-0 co-tenant does not explain it
             _slow("b", 0, "bf16", HOG)]  # another host: its own (single) finding
    out = fold(parts)
    assert sorted((f.rule, f.hosts, f.evidence.get("gpu")) for f in out) == [
        ("GF540", ("a",), 1), ("GF540", ("b",), 0), ("GF546", ("a",), 1),
        ("GF549", ("a",), None)]


def test_a_cause_behind_one_finding_leaves_it_as_it_is() -> None:
    one = [_slow("a", 0, "bf16", HOG), _drop("a", 1)]
    assert fold(one) == one


def test_one_brake_on_every_gpu_is_one_host_finding_and_different_pids_are_different_causes(
) -> None:
    brakes = [_slow("a", g, "bf16", BRAKE) for g in range(4)]
    other = {**HOG, "processes": [{"pid": "99", "process_name": "x"}]}
    out = fold([*brakes, _slow("b", 0, "bf16", HOG), _slow("b", 1, "bf16", other)])
    gf549 = [f for f in out if f.rule == "GF549"]
    assert [(f.hosts, f.evidence["gpus"]) for f in gf549] == [(("a",), [0, 1, 2, 3])]
    assert "GPUs 0, 1, 2, 3" in gf549[0].message
    assert sorted(f.rule for f in out) == ["GF540", "GF540", "GF549"]


def test_the_fold_is_the_judge_s_for_rules_and_for_amended_history_findings() -> None:
    report = judge(Report(hosts={"a": HostResult("a", "ok")}))
    amended = amend(report, [_slow("a", 0, "bf16", HOG), _drop("a", 0)])
    assert [f.rule for f in amended.findings] == ["GF549"], amended.findings
    assert amended.summary["findings"]["error"] == 1
