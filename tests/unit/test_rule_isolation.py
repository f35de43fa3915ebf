"""Each rule is isolated per host (issue 36 item 2): a rule that raises on one host's data is that
host's GF006 naming the rule function and the exception; the other hosts and rules are judged.

The odd values are what a host's smoke result.json may carry: the readiness check's `tf32_gain`
has the shape agent/gpufleet/smoke/remote/deep.py (gpufleet@e7981fb) writes, with strings and
NaN where it writes numbers; the host prints it, so it is untrusted.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from test_rules import DRV_OTHER
from test_rules_builders import NOW, fleet, smoke

from gpufleet.cli import main
from gpufleet.history import RunStore
from gpufleet.model import SmokeCheck
from gpufleet.report.common import document, exit_code
from gpufleet.report.pipeline import judge
from gpufleet.rules import evaluate

HEALTHY_GAIN = {"fp32_tflops": 51.2, "tf32_tflops": 411.6, "speedup": 8.04}  # test_smoke_deep.py


def _readiness(gain: Any) -> dict[str, Any]:
    checks = (*smoke("x").checks, SmokeCheck("readiness", True, "", {
        "tf32_matmul_default": False, "problems": [], "tf32_gain": gain}))
    return {"smoke": {"checks": checks}}


@pytest.mark.parametrize("gain", [
    {**HEALTHY_GAIN, "fp32_tflops": "fast"},  # a string where a number is expected
    {**HEALTHY_GAIN, "speedup": None},
    "8x",  # a string where an object is expected
    {**HEALTHY_GAIN, "speedup": 10**400},  # too big for a float
])
def test_an_odd_value_is_that_hosts_error_and_the_fleet_is_still_judged(
        gain: Any, tmp_path: Path) -> None:
    report = fleet({"gpu02": _readiness(gain), "gpu03": _readiness(HEALTHY_GAIN),
                    "gpu04": {"facts": {"driver": DRV_OTHER}}})
    found = evaluate(report, now=NOW)
    crash = [f for f in found if f.rule == "GF006"]
    assert [f.hosts for f in crash] == [("gpu02",)]
    assert "gpufleet.rules.deep.check" in crash[0].message
    assert crash[0].evidence["rule_function"] == "gpufleet.rules.deep.check"
    assert crash[0].evidence["exception"].split(":")[0] in {"ValueError", "TypeError",
                                                            "AttributeError", "OverflowError"}
    # the same rule still judges the other hosts, and the other rules every host
    assert ("GF534", ("gpu03",)) in [(f.rule, f.hosts) for f in found]
    assert ("GF101", ("gpu04",)) in [(f.rule, f.hosts) for f in found]
    judged = judge(dataclasses.replace(report, findings=()))
    assert exit_code(judged.findings, "error") == 1  # the findings code, not 3
    assert RunStore(tmp_path).save(document(judged)).exists()  # what --save keeps


def test_the_exception_text_is_shown_clean() -> None:
    evil = "\x1b]52;c;ZXZpbA==\x07 token=hunter2"
    report = fleet({"gpu01": _readiness({evil: 1.0})})
    (crash,) = [f for f in evaluate(report, now=NOW) if f.rule == "GF006"]
    assert "\x1b" not in crash.message and "hunter2" not in crash.message
    assert crash.hosts == ("gpu01",)



def test_check_save_keeps_the_run_when_judging_the_history_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpufleet.cli import saved  # noqa: PLC0415

    def broken(*_: Any, **__: Any) -> None:
        raise RuntimeError("a history rule bug")
    monkeypatch.setattr(saved, "judge_history", broken)
    with pytest.raises(SystemExit) as info:  # a crash is exit 3 (EXIT_CRASH), never a pass
        main(["check", "--level", "facts", "--save", str(tmp_path / "runs")])
    assert info.value.code == 3
    assert len(RunStore(tmp_path / "runs").entries()) == 1  # was: nothing saved
