"""The deep checks' verdicts (remote/deep_verdict.py, rank 0) and the rules naming their causes.

The numbers are the 2xH200 anchors of REFERENCE.md and the faults they must catch; the real
runs (CPU ranks here, GPUs under benchmarks/results) are in test_smoke_deep_runs.py.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Any

import pytest

from gpufleet.model import HostResult, Report, SmokeCheck, SmokeResult
from gpufleet.rules import evaluate
from gpufleet.smoke import levels
from gpufleet.smoke.remote import deep as smoke_deep
from gpufleet.smoke.remote import deep_verdict as deep
from gpufleet.smoke.remote import registry

H200 = "NVIDIA H200"
GEN5X16 = {"gen_current": 5, "gen_max": 5, "width_current": 16, "width_max": 16}


def _imports(path: str) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(Path(path).read_text())):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            roots.add(node.module.split(".")[0])
    return roots - set(sys.stdlib_module_names) - {"__future__"}


def test_deep_modules_import_only_stdlib_torch_and_each_other() -> None:
    assert _imports(smoke_deep.__file__) <= {"torch"}
    assert _imports(deep.__file__) == set()  # the verdicts are pure


def _ident(rank: int, cuda: bool = True) -> dict[str, Any]:
    if not cuda:
        return {"rank": rank, "local_rank": rank, "device": "cpu", "name": "cpu"}
    return {"rank": rank, "local_rank": rank, "device": f"cuda:{rank}", "name": H200,
            "uuid": f"GPU-000{rank}", "bus_id": f"00000000:{0x19 + rank:02X}:00.0"}


def _rank(rank: int, name: str, check: dict[str, Any], host: str = "gpu01",
          cuda: bool = True) -> dict[str, Any]:
    return {"rank": rank, "info": {"host": host, "device": f"cuda:{rank}" if cuda else "cpu"},
            "checks": {name: check}}


# --------------------------------------------------------------------------- host <-> device


def _bw(rank: int, alone: float, together: float, link: dict[str, int] | None = None,
        links_of_host: bool = False) -> dict[str, Any]:
    c: dict[str, Any] = {
        "identity": _ident(rank),
        "alone": {"pinned_h2d": alone, "pinned_d2h": alone, "pageable_h2d": 19.0,
                  "pageable_d2h": 14.0},
        "together": {"pinned_h2d": together, "pinned_d2h": together, "pageable_h2d": 18.0,
                     "pageable_d2h": 13.0},
        "numa": {"gpu_numa_node": rank, "rank_numa_nodes": [0, 1]}}
    if links_of_host:  # local rank 0 read every GPU's link
        c["links"] = {f"GPU-000{r}": {"uuid": f"GPU-000{r}", "bus_id": "", **(link or GEN5X16)}
                      for r in range(2)}
    return c


def test_h200_copies_pass_against_their_gen5_x16_links() -> None:
    ranks = [_rank(0, "hostdev_bw", _bw(0, 55.4, 55.3, links_of_host=True)),
             _rank(1, "hostdev_bw", _bw(1, 55.3, 52.2))]
    ok, detail, data = deep.agg_hostdev(ranks)
    assert ok, detail
    assert round(data["per_gpu"]["1"]["expected_pinned_gbps"], 1) == 55.4  # 63.0 x 0.879
    assert "GPU1 of rank 1 55.3/55.3 GB/s alone, 52.2/52.2 together" in detail


def test_a_gpu_on_a_downtrained_link_is_named_with_its_link_state() -> None:
    x8 = {**GEN5X16, "width_current": 8}
    c0 = _bw(0, 55.4, 55.3, links_of_host=True)
    c0["links"]["GPU-0001"].update(x8)
    ranks = [_rank(0, "hostdev_bw", c0), _rank(1, "hostdev_bw", _bw(1, 27.1, 27.0))]
    ok, _, data = deep.agg_hostdev(ranks)
    assert not ok
    (p,) = data["problems"]
    assert p["kind"] == "gpu_slow" and p["rank"] == 1
    assert ("GPU1 of rank 1 (NVIDIA H200, 00000000:1A:00.0, GPU-0001) on gpu01: pinned H2D "
            "27.1 GB/s alone, below 85 % of the 55.4 GB/s expected from its PCIe Gen5 x8 "
            "(max Gen5 x16)") in p["message"]
    assert "reseat" in p["fix"]


def test_all_at_once_far_below_the_singles_points_at_the_host() -> None:
    ranks = [_rank(0, "hostdev_bw", _bw(0, 55.4, 30.0, links_of_host=True)),
             _rank(1, "hostdev_bw", _bw(1, 55.3, 30.0))]
    ok, _, data = deep.agg_hostdev(ranks)
    assert not ok
    kinds = {(p["kind"], p["rank"]) for p in data["problems"]}
    assert kinds == {("host_bound", None)}
    p = data["problems"][0]
    assert "2 GPUs copying at once reach 60.0 GB/s H2D in total, 54 % of the 110.7 GB/s" \
        in p["message"]
    assert "root complex" in p["message"] and "NUMA" in p["fix"]
    assert p["numa"]["GPU0 of rank 0 (NVIDIA H200, 00000000:19:00.0, GPU-0000)"] == \
        {"gpu_numa_node": 0, "rank_numa_nodes": [0, 1]}


def test_without_link_data_a_gpu_is_judged_against_its_peers() -> None:
    ranks = [_rank(r, "hostdev_bw", _bw(r, 55.0, 54.0)) for r in range(3)]
    ranks.append(_rank(3, "hostdev_bw", _bw(3, 30.0, 29.0)))
    ok, _, data = deep.agg_hostdev(ranks)
    assert not ok
    (p,) = data["problems"]
    assert p["rank"] == 3 and "below 80 % of its peers' median 55.0 GB/s (link state unknown)" \
        in p["message"]


def test_nvidia_smi_link_query_parses() -> None:
    text = ("0, GPU-3f6d, 00000000:19:00.0, 5, 5, 16, 16\n"
            "1, GPU-8a01, 00000000:2A:00.0, 1, 5, 16, 16\nbad line\n")
    links = smoke_deep._parse_links(text)
    assert links["GPU-8a01"] == {"index": 1, "uuid": "GPU-8a01", "bus_id": "00000000:2A:00.0",
                                 "gen_current": 1, "gen_max": 5, "width_current": 16,
                                 "width_max": 16}


# --------------------------------------------------------------------------- scaling


def _sc(rank: int, independent: float, ddp: float | None, single: float | None = None,
        cuda: bool = True) -> dict[str, Any]:
    c = {"identity": _ident(rank, cuda), "independent_s": independent, "ddp_s": ddp,
         "model": {"d_model": 2048}, "steps": 10}
    if single is not None:
        c["single_s"] = single
    return c


def test_h200_scaling_anchor_passes() -> None:
    ranks = [_rank(0, "scaling", _sc(0, 0.0300, 0.0313, single=0.0298)),
             _rank(1, "scaling", _sc(1, 0.0301, 0.0312))]
    ok, detail, data = deep.agg_scaling(ranks)
    assert ok, detail
    assert round(data["efficiency"], 3) == 0.952
    assert detail == "weak-scaling efficiency 1->2 0.952 (29.8 -> 31.3 ms per step)"


def test_a_slow_rank_is_named_and_the_efficiency_fails() -> None:
    ranks = [_rank(0, "scaling", _sc(0, 0.030, 0.061, single=0.030)),
             _rank(1, "scaling", _sc(1, 0.060, 0.061))]
    ok, _, data = deep.agg_scaling(ranks)
    assert not ok
    by_kind = {p["kind"]: p for p in data["problems"]}
    assert by_kind["slow_rank"]["rank"] == 1
    assert "GPU1 of rank 1" in by_kind["slow_rank"]["message"]
    assert "60.0 ms per step alone (median of 10) vs 30.0 ms on the fastest rank (2.00x, limit " \
        "1.20x)" in \
        by_kind["slow_rank"]["message"]
    assert "efficiency 1->2 ranks 0.492 < 0.85" in by_kind["low_scaling"]["message"]


def test_cpu_ranks_are_judged_on_the_cpu_time_of_their_steps() -> None:
    # A loaded machine made rank 0's wall time 17x rank 1's; the CPU time its steps took did not
    # change, and that is what counts on CPU ranks.
    a = {**_sc(0, 0.0825, 0.4, single=0.004, cuda=False), "independent_cpu_s": 0.0046}
    b = {**_sc(1, 0.0048, 0.4, cuda=False), "independent_cpu_s": 0.0047}
    ok, detail, _ = deep.agg_scaling([_rank(0, "scaling", a, cuda=False),
                                      _rank(1, "scaling", b, cuda=False)])
    assert ok, detail
    b["independent_cpu_s"] = 0.0520  # the test hook's slow rank burns 10x its step
    ok, detail, _ = deep.agg_scaling([_rank(0, "scaling", a, cuda=False),
                                      _rank(1, "scaling", b, cuda=False)])
    assert not ok
    assert "rank 1 (cpu) on gpu01: 52.0 ms per step alone (median CPU time of 10) vs 4.6 ms" \
        in detail


def test_cpu_ranks_record_efficiency_without_judging_it() -> None:
    ranks = [_rank(0, "scaling", _sc(0, 0.005, 0.3, single=0.004, cuda=False), cuda=False),
             _rank(1, "scaling", _sc(1, 0.006, 0.3, cuda=False), cuda=False)]
    ok, detail, data = deep.agg_scaling(ranks)
    assert ok and data["threshold"] is None and "recorded, not judged" in detail


# --------------------------------------------------------------------------- SDC


def _sdc(rank: int, digests: dict[str, list[int]], changed: int = 0,
         ref: dict[str, list[int]] | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {
        "identity": _ident(rank), "iterations": 100, "seconds": 8.0, "tflops": 700.0,
        "ops": {k: {"what": k, "digest": v, "changed_runs": changed if k == "gemm_bf16" else 0}
                for k, v in digests.items()}}
    if ref is not None:
        c["cpu_reference"] = ref
    return c


GOOD = {"gemm_bf16": [1, 2], "gemm_fp32_exact": [3, 4], "sum_int": [5, 6]}
REF = {"gemm_fp32_exact": [3, 4], "sum_int": [5, 6]}


def test_identical_devices_pass() -> None:
    ranks = [_rank(0, "sdc", _sdc(0, GOOD, ref=REF)), _rank(1, "sdc", _sdc(1, GOOD))]
    ok, detail, _ = deep.agg_sdc(ranks)
    assert ok, detail
    assert detail.startswith("3 ops bit-identical on 2 device(s)")


def test_the_odd_gpu_of_three_is_named() -> None:
    odd = {**GOOD, "gemm_bf16": [1, 3]}
    ranks = [_rank(0, "sdc", _sdc(0, GOOD, ref=REF)), _rank(1, "sdc", _sdc(1, odd)),
             _rank(2, "sdc", _sdc(2, GOOD))]
    ok, _, data = deep.agg_sdc(ranks)
    assert not ok
    (p,) = data["problems"]
    assert p["rank"] == 1 and p["kind"] == "sdc"
    assert p["message"].startswith("GPU1 of rank 1 (NVIDIA H200, 00000000:1A:00.0, GPU-0001) on "
                                   "gpu01 computed wrong results: gemm_bf16 differs from 2 other")


def test_two_gpus_disagreeing_are_split_by_the_exact_checks() -> None:
    bad = {"gemm_bf16": [9, 9], "gemm_fp32_exact": [3, 5], "sum_int": [5, 6]}
    ranks = [_rank(0, "sdc", _sdc(0, GOOD, ref=REF)), _rank(1, "sdc", _sdc(1, bad))]
    ok, _, data = deep.agg_sdc(ranks)
    assert not ok
    (p,) = data["problems"]
    assert p["rank"] == 1
    assert "gemm_fp32_exact differs from the CPU reference" in p["message"]
    assert "gemm_bf16 disagrees between ranks 0, 1 (no majority; this one failed" in p["message"]


def test_a_result_that_changes_between_repeats_is_named() -> None:
    ranks = [_rank(0, "sdc", _sdc(0, GOOD, changed=2, ref=REF))]
    ok, _, data = deep.agg_sdc(ranks)
    assert not ok and "gemm_bf16 changed in 2 of 99 repeats" in data["problems"][0]["message"]


# --------------------------------------------------------------------------- readiness


def test_compile_fix_follows_the_error() -> None:
    assert "C/C++ compiler" in smoke_deep._compile_fix(
        "InvalidCxxCompiler: No working C++ compiler found in torch._inductor.config.cpp.cxx")
    assert "C/C++ compiler" in smoke_deep._compile_fix(
        "InductorError: FileNotFoundError: [Errno 2] No such file or directory: '/nonexistent/cc'")
    assert "triton" in smoke_deep._compile_fix("PTXASError: ptxas failed")
    assert "TORCH_LOGS" in smoke_deep._compile_fix("something else")


def test_quick_level_runs_only_the_cheap_readiness(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUFLEET_SMOKE_DEEP", raising=False)
    quick, full = levels.get("quick").checks, levels.get("full").checks
    assert registry.selected(quick) == ["readiness"]
    assert registry.selected(full) == ["readiness", "hostdev_bw", "scaling", "sdc", "membw",
                                      "p2p", "gemm", "gdr"]
    monkeypatch.setenv("GPUFLEET_SMOKE_DEEP", "sdc,bogus")
    assert registry.selected(full) == ["sdc"]
    assert registry.selected(quick) == []  # narrowing never adds a check the level lacks


def test_readiness_fails_on_missing_cudnn_and_warns_on_env() -> None:
    probs = [deep.problem("cudnn_unavailable", 0, "cuDNN is not available", "use an image"),
             deep.problem("env_disables", 0, "NVIDIA_TF32_OVERRIDE=0 disables TF32", "unset")]
    c = {"tf32_matmul": False, "float32_matmul_precision": "highest", "problems": probs}
    ranks = [_rank(0, "readiness", c), _rank(1, "readiness", dict(c))]
    ok, detail, data = deep.agg_readiness(ranks)
    assert not ok and detail == "cuDNN is not available"
    assert len(data["problems"]) == 2  # said once for the whole host, not per rank


# --------------------------------------------------------------------------- rules


def _report(checks: list[SmokeCheck], backend: str = "nccl") -> Report:
    status = "pass" if all(c.passed for c in checks) else "fail"
    smoke = SmokeResult(status=status, backend=backend, checks=tuple(checks))
    return Report(hosts={"gpu01": HostResult("gpu01", "ok", smoke=smoke)})


def test_each_problem_kind_becomes_its_rule_with_the_scripts_fix() -> None:
    ranks = [_rank(0, "sdc", _sdc(0, GOOD, ref=REF)),
             _rank(1, "sdc", _sdc(1, {**GOOD, "sum_int": [0, 0]}))]
    ok, detail, data = deep.agg_sdc(ranks)
    found = evaluate(_report([SmokeCheck("sdc", ok, detail, data)]))
    assert [f.rule for f in found] == ["GF604"]
    f = found[0]
    assert f.severity == "error" and f.hosts == ("gpu01",)
    assert "GPU1 of rank 1" in f.message and f.evidence["subject"] == "rank1"
    assert f.remediation.startswith("drain the host and run `dcgmi diag -r 3`")
    assert f.remediation.endswith("(on gpu01); then rerun `gpufleet smoke -l gpu01 --level full`")


def test_tf32_default_is_info_on_gpus_only() -> None:
    c = SmokeCheck("readiness", True, "", {"tf32_matmul_default": False, "problems": [],
                                           "tf32_gain": {"fp32_tflops": 51.2,
                                                         "tf32_tflops": 411.6, "speedup": 8.04}})
    (f,) = evaluate(_report([c]))
    assert (f.rule, f.severity) == ("GF534", "info")
    assert "fp32 matmul 51.2 TFLOP/s, 411.6 with TF32 (8.0x)" in f.message
    assert evaluate(_report([c], backend="gloo")) == ()


def test_a_crashed_deep_check_is_gf601() -> None:
    c = SmokeCheck("scaling", False, "RuntimeError: CUDA out of memory", {"problems": []})
    (f,) = evaluate(_report([c]))
    assert f.rule == "GF601" and "scaling" in f.message
