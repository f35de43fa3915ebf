"""The deeper checks for real, on CPU ranks with gloo (how CI runs them): the full level's
readiness (a real torch.compile), scaling and SDC pass on a healthy machine, and each injected
fault is caught by its own check and named by its own rule. GPU runs: benchmarks/results/
2026-11-30-nvidia-h200*-deep-*.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gpufleet.model import Expectations, Facts, HostResult, HostSpec, Report, SmokeResult
from gpufleet.rules import evaluate
from gpufleet.smoke.runner import SmokeOptions, run_smoke
from gpufleet.transport.local import LocalTransport

SPEC = HostSpec(name="cpu-1", address="localhost", connection="local",
                expect=Expectations(smoke_python=sys.executable))


def _run(env: dict[str, str]) -> SmokeResult:
    # pg_timeout: a cold torch.compile on a loaded 2-core machine can keep one rank from the
    # next barrier for a minute.
    opts = SmokeOptions(env=env, pg_timeout=240)
    return run_smoke(SPEC, LocalTransport(SPEC), Facts(), level="full", timeout=420,
                     options=opts)


def _check(res: SmokeResult, name: str) -> dict[str, object]:
    (c,) = [c for c in res.checks if c.name == name]
    return {"passed": c.passed, "detail": c.detail, **c.data}


def _rules(res: SmokeResult) -> dict[str, list[str]]:
    report = Report(hosts={SPEC.name: HostResult(SPEC.name, "ok", smoke=res)},
                    specs={SPEC.name: SPEC})
    out: dict[str, list[str]] = {}
    for f in evaluate(report):
        out.setdefault(f.rule, []).append(f.message)
    return out


@pytest.mark.slow
def test_full_level_on_cpu_ranks_passes_every_deep_check() -> None:
    res = _run({})
    assert res.status == "pass", res.error
    names = [c.name for c in res.checks]
    assert {"readiness", "scaling", "sdc"} <= set(names)
    assert "hostdev_bw" not in names  # no GPU: no host<->device copies to measure
    ready = _check(res, "readiness")
    assert "torch.compile ok on 2 rank(s)" in str(ready["detail"]), ready["detail"]
    scaling = _check(res, "scaling")
    assert scaling["world_size"] == 2 and 0 < float(scaling["efficiency"]) < 10  # type: ignore[arg-type]
    assert "(CPU ranks: recorded, not judged)" in str(scaling["detail"])
    sdc = _check(res, "sdc")
    assert str(sdc["detail"]).startswith("4 ops bit-identical on 2 device(s)")
    assert set(sdc["cpu_reference"]) == {"gemm_fp32_exact", "sum_int"}  # type: ignore[arg-type]
    assert _rules(res) == {}  # GF534 (TF32) is about GPUs only
    gemm = _check(res, "gemm")  # GPU only: CPU ranks record that they skipped
    assert gemm["detail"] == "no GEMM measured (CPU ranks)", gemm
    membw = _check(res, "membw")
    assert {r["counted"] for r in membw["per_rank"].values()} == {"one side"}  # type: ignore[attr-defined]


@pytest.mark.slow
@pytest.mark.parametrize(("check", "env", "rule", "expect"), [
    ("sdc", {"GPUFLEET_SMOKE_TEST_CORRUPT": "1"}, "GF604",
     "rank 1 (cpu) on cpu-1 computed wrong results: fp32 GEMM 96^3 of integers (exact) differs "
     "from the CPU reference"),
    ("scaling", {"GPUFLEET_SMOKE_TEST_SLOW": "1"}, "GF533",
     "rank 1 (cpu) on cpu-1: "),
    ("readiness", {"CC": "/nonexistent/cc", "CXX": "/nonexistent/c++"}, "GF606",
     "torch.compile failed: InductorError: InvalidCxxCompiler: No working C++ compiler found"),
], ids=["sdc-corrupt-rank1", "scaling-slow-rank1", "compile-no-cxx"])
def test_injected_fault_is_caught_by_its_check_and_rule(
    check: str, env: dict[str, str], rule: str, expect: str, tmp_path: Path
) -> None:
    # A fresh inductor cache: a cached compile would not need the compiler at all.
    env = {**env, "GPUFLEET_SMOKE_DEEP": check, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path)}
    res = _run(env)
    assert res.status == "fail", res.error
    failed = [c.name for c in res.checks if not c.passed]
    assert failed == [check], failed
    found = _rules(res)
    assert list(found) == [rule], found
    (msg,) = found[rule]
    assert expect in msg, msg
