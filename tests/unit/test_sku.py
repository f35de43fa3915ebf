"""The SKU catalog (gpufleet/sku) and the lone-host judgement against it (GF540-GF543).

Inputs are the real 1xH200 report committed in benchmarks/results (facts and smoke captured on
the device machine, 2026-12-01); the slow case replaces its bf16 matmul by 321.7 TFLOP/s, the
value the same kind of host measured with another process computing on the GPU (REFERENCE.md,
"Measured on a 1xH200 machine"), and adds that process as the facts list it under --force.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from gpufleet import sku
from gpufleet.engines.ansible import from_jsonable
from gpufleet.model import Facts, GpuProcess, HostResult, Report, SmokeCheck, SmokeResult
from gpufleet.report.pipeline import judge
from gpufleet.rules import evaluate
from gpufleet.sku import causes
from gpufleet.sku import expect as sku_expect

ROOT = Path(__file__).resolve().parents[2]
H200_RUN = ROOT / "benchmarks/results/2026-12-01-nvidia-h200-final-check-full.json"
CATALOG = ROOT / "agent/gpufleet/sku/skus.json"
ISSUE_MODELS = ("NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB", "NVIDIA A100-PCIE-40GB",
                "NVIDIA A100 80GB PCIe", "NVIDIA A10", "NVIDIA L4", "NVIDIA L40", "NVIDIA L40S",
                "NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA H200",
                "NVIDIA H200 NVL", "NVIDIA GH200 480GB", "NVIDIA B200", "NVIDIA GB200")


def _h200() -> tuple[Facts, SmokeResult]:
    doc = json.loads(H200_RUN.read_text())
    host = next(iter(doc["hosts"].values()))
    return from_jsonable(Facts, host["facts"]), from_jsonable(SmokeResult, host["smoke"])


def _rules(f: Facts, s: SmokeResult | None, name: str = "h200") -> list[Any]:
    report = Report(hosts={name: HostResult(name, "ok", facts=f, smoke=s)}, level="full")
    return [x for x in evaluate(report) if x.rule.startswith("GF54")]


# ----------------------------------------------------------------------------- the catalog


def test_every_model_the_issue_lists_has_a_reference_and_each_number_a_source() -> None:
    cat = sku.load()
    keys = {sku.match(name)[0].key for name in ISSUE_MODELS}  # type: ignore[union-attr]
    assert len(keys) == len(ISSUE_MODELS), keys
    for m in cat.models:
        assert m.peaks, m.key
        for name, num in m.peaks.items():
            assert cat.sources[num.source]["cite"], (m.key, name)


def _doc() -> dict[str, Any]:
    return json.loads(CATALOG.read_text())


@pytest.mark.parametrize(("edit", "why"), [
    (lambda d: d["models"][0].__setitem__("bf16_tflops", {"v": 312}), "has no source"),
    (lambda d: d["models"][0].__setitem__("bf16_tflops", {"value": "312"}), "must be"),
    (lambda d: d["models"][0].__setitem__("names", ["A100", 7]), "has no source"),
    (lambda d: d["models"][0]["hbm_gbps"].__setitem__("src", "my-guess"), "not in the catalog"),
    (lambda d: d["efficiency"]["hopper"].__setitem__("bf16_tflops", 0.8), "has no source"),
    (lambda d: d["models"][0].__setitem__("ids_src", None), "ids_src"),
])
def test_a_number_without_a_source_is_rejected(edit: Any, why: str) -> None:
    doc = copy.deepcopy(_doc())
    edit(doc)
    with pytest.raises(sku.CatalogError, match=why):
        sku.parse(doc)
    sku.parse(_doc())  # the shipped catalog itself passes


def test_pci_device_id_wins_over_the_name_and_unknown_is_no_reference() -> None:
    model, how = sku.match("NVIDIA H200", "0x233B10DE")  # NVML's id: device then vendor
    assert model is not None and model.key == "H200-NVL" and how == "pci_device_id 0x233B"
    assert sku.match("NVIDIA A100-SXM4-80GB")[0].key == "A100-SXM4-80GB"  # type: ignore[union-attr]
    assert sku.match("NVIDIA A10")[0].key == "A10"  # type: ignore[union-attr]
    assert sku.match("Tesla V100-SXM2-16GB") == (None, "no reference")


def test_disagreeing_sources_each_arch_uses_its_own_and_the_unmeasured_borrow_the_lower() -> None:
    a100, h200, l40s = (sku.match(n)[0] for n in ("NVIDIA A100-SXM4-80GB", "NVIDIA H200",
                                                  "NVIDIA L40S"))
    assert a100 and h200 and l40s
    ampere, hopper = sku.efficiency(a100, "bf16_tflops"), sku.efficiency(h200, "bf16_tflops")
    assert ampere and hopper and ampere[1] == hopper[1] == "measured"
    assert ampere[0].source == "superbench-a100-x-check"
    assert hopper[0].source == "ours-h200-gemm-check"
    borrowed = sku.efficiency(l40s, "bf16_tflops")
    assert borrowed == (hopper[0], "borrowed") and hopper[0].value < ampere[0].value


# ----------------------------------------------------------------------------- the judgement


def test_the_issue_41_percent_case_fails_and_names_the_other_process() -> None:
    f, s = _h200()
    uuid = f.gpus[0].uuid
    f = dataclasses.replace(f, gpu_processes=(GpuProcess(4242, "python3", uuid, 2110),))
    s = dataclasses.replace(s, matmul_tflops={0: 321.7})
    [gf540] = [x for x in _rules(f, s) if x.rule == "GF540"]
    assert gf540.severity == "error"
    assert "bf16 GEMM 321.7 TFLOP/s is 44% of the 726.3 expected" in gf540.message
    assert "pid 4242 python3" in gf540.message
    ev = gf540.evidence
    assert (ev["expected"], ev["floor"], ev["ratio"]) == (726.3, 617.3, 0.443)
    assert "H200-SXM (pci_device_id 0x2335)" in ev["basis"] and "989.5" in ev["source"]


def test_the_healthy_h200_run_is_inside_every_band() -> None:
    f, s = _h200()
    assert _rules(f, s) == []
    [bf16] = [e for e in sku_expect.host_expectations(f, s) if e.dtype == "bf16"]
    assert bf16.measured == 794.3 and bf16.floor < bf16.measured


def _with_sample(s: SmokeResult, uuid: str, **gpu: str) -> SmokeResult:
    row = {"uuid": uuid, "clocks_event_reasons.active": "0x0000000000000004", "clocks.sm": "1470",
           "clocks.max.sm": "1980", "power.draw": "693.7", "power.limit": "700.00",
           "power.default_limit": "700.00", "pcie.link.gen.current": "5",
           "pcie.link.gen.max": "5", "pcie.link.width.current": "16",
           "pcie.link.width.max": "16", "mig.mode.current": "Disabled",
           "ecc.mode.current": "Enabled", "utilization.gpu": "100", "memory.used": "2000",
           "memory.total": "143771"} | gpu
    rec = {"passed": True, "identity": {"uuid": uuid}, "tflops": {"bf16": 500.0, "fp16": 760.0},
           "sample": {"gpu": row, "apps": [], "own_pid": 1}}
    return dataclasses.replace(s, checks=(*s.checks, SmokeCheck("gemm", True, "",
                                                               {"per_rank": {"0": rec}})))


@pytest.mark.parametrize(("gpu", "cause"), [
    ({"power.limit": "400.00"}, "power limit 400 W below its default 700 W"),
    ({"clocks_event_reasons.active": "0x0000000000000008"}, "HW slowdown"),
    ({"clocks_event_reasons.active": "0x0000000000000000", "clocks.sm": "990"},
     "SM clock 990 MHz of max 1980"),
    ({"mig.mode.current": "Enabled"}, "MIG is enabled"),
])
def test_a_slow_gemm_names_the_cause_seen_in_the_run_sample(gpu: dict[str, str],
                                                            cause: str) -> None:
    f, s = _h200()
    s = _with_sample(s, f.gpus[0].uuid or "", **gpu)
    found = _rules(f, s)
    assert [x.rule for x in found] == ["GF540"], found
    assert "bf16 GEMM 500.0" in found[0].message and cause in found[0].message


def test_a_power_capped_gemm_at_default_limit_is_not_a_cause() -> None:
    f, _s = _h200()
    smp = {"gpu": {"clocks_event_reasons.active": "0x4", "power.limit": "700",
                   "power.default_limit": "700", "clocks.sm": "1470", "clocks.max.sm": "1980"},
           "apps": []}
    assert causes.likely(f, f.gpus[0], smp, "matmul_tflops") == []


def test_a_co_tenant_in_the_sample_is_its_own_warning() -> None:
    f, s = _h200()
    s = _with_sample(s, f.gpus[0].uuid or "")
    check = s.checks[-1]
    rec = check.data["per_rank"]["0"]
    rec["sample"]["apps"] = [{"gpu_uuid": f.gpus[0].uuid, "pid": "777",
                              "process_name": "python3", "used_memory": "120000"}]
    rec["tflops"] = {"bf16": 790.0}
    found = _rules(f, s)
    assert [x.rule for x in found] == ["GF543"]
    assert "holding 120000 MiB of 143771 MiB: pid 777 python3" in found[0].message


def test_an_unknown_model_is_no_reference_and_judges_nothing() -> None:
    f, s = _h200()
    f = dataclasses.replace(f, gpus=(dataclasses.replace(f.gpus[0], name="NVIDIA X9000"),),
                            pci_gpus=())
    s = dataclasses.replace(s, matmul_tflops={0: 1.0})
    found = _rules(f, s)
    assert [(x.rule, x.severity) for x in found] == [("GF542", "info")]
    assert sku_expect.host_expectations(f, s) == ()


def test_expectations_ride_on_the_report_at_the_facts_level_too() -> None:
    f, _s = _h200()
    report = judge(Report(hosts={"h200": HostResult("h200", "ok", facts=f)}, level="facts"))
    lines = report.hosts["h200"].expectations
    metrics = {(e.metric, e.dtype) for e in lines}
    assert {("matmul_tflops", "bf16"), ("matmul_tflops", "fp8"), ("hbm_gbps", None),
            ("h2d_gbps", None), ("d2h_gbps", None), ("nvlink_link_gbps", None)} <= metrics
    assert all(e.measured is None for e in lines)
    [h2d] = [e for e in lines if e.metric == "h2d_gbps"]
    assert (h2d.expected, h2d.floor) == (55.4, 47.1)  # Azure's floor on Gen5 x16: 48


# ------------------------------------------------- replay of the lent H200's captures (2026-12-01)
# gpufleet's smoke (main@cead1f1: the device tool sends the session's checkout, not this branch)
# healthy and with a co-tenant computing; the two nvidia-smi queries smoke/remote/sample.py runs,
# captured on the same machine under each co-tenant, with a plain-torch GEMM per dtype
# (2026-12-01-nvidia-h200-k-anchors.py.txt). The gemm check's record is rebuilt from those.
RESULTS = ROOT / "benchmarks/results"
ANCHOR_PID = "429"  # the anchor script itself: the measuring process, as a rank is


def _device(scenario: str | None) -> tuple[Facts, SmokeResult]:
    doc = json.loads((RESULTS / "2026-12-01-nvidia-h200-k-facts.json").read_text())
    f = from_jsonable(Facts, next(iter(doc["hosts"].values()))["facts"])
    name = {"healthy": "full", "matmul": "hog-matmul", "copy": "hog-copy"}.get(scenario or "",
                                                                                "full")
    run = json.loads((RESULTS / f"2026-12-01-nvidia-h200-k-smoke-{name}.json").read_text())
    s = from_jsonable(SmokeResult, run["result"])
    if scenario is None:
        return f, s
    cap = json.loads((RESULTS / "2026-12-01-nvidia-h200-k-anchors.json").read_text())[scenario]
    from gpufleet.smoke.remote import sample  # noqa: PLC0415 (host-side module, stdlib only)

    apps = [a for a in sample.parse_rows(cap["sample_apps"], sample.APP_FIELDS)
            if a["pid"] != ANCHOR_PID]
    rec = {"identity": {"uuid": f.gpus[0].uuid},
           "tflops": {d: cap[d] for d in ("bf16", "fp16", "tf32", "fp32", "fp8")},
           "sample": {"gpu": sample.parse_rows(cap["sample_gpu"], sample.GPU_FIELDS)[0],
                      "apps": apps}}
    checks = [c for c in s.checks if c.name != "membw"]
    checks.append(SmokeCheck("gemm", True, "", {"per_rank": {"0": rec}}))
    checks.append(SmokeCheck("membw", True, "", {"per_rank": {"0": {
        "uuid": f.gpus[0].uuid, "gbps": cap["hbm_one_side"], "counted": "one side"}}}))
    return f, dataclasses.replace(s, checks=tuple(checks))


def test_device_healthy_run_has_every_value_inside_its_band() -> None:
    for scenario in (None, "healthy"):
        f, s = _device(scenario)
        assert _rules(f, s) == [], scenario
        judged = [e for e in sku_expect.host_expectations(f, s) if e.measured is not None]
        assert all(e.measured >= e.floor for e in judged), judged  # type: ignore[operator]
    assert {(e.metric, e.dtype) for e in judged} >= {
        ("matmul_tflops", d) for d in ("bf16", "fp16", "tf32", "fp32", "fp8")} | {
        ("hbm_gbps", None), ("h2d_gbps", None), ("d2h_gbps", None)}


def test_device_co_tenant_computing_fails_gemm_and_names_the_process() -> None:
    f, s = _device("matmul")
    rules = {(x.rule, x.evidence.get("dtype")) for x in _rules(f, s)}
    assert {("GF540", d) for d in ("bf16", "fp16", "tf32", "fp32", "fp8")} <= rules
    assert ("GF543", None) in rules and ("GF541", None) in rules  # HBM halved too
    [bf16] = [x for x in _rules(f, s) if x.evidence.get("dtype") == "bf16"]
    assert bf16.message.startswith("h200 GPU 0: bf16 GEMM 354.8 TFLOP/s is 49% of the 726.3")
    assert "pid 461 /opt/torch/.venv/bin/python (874 MiB)" in bf16.message
    # gpufleet's own quick matmul under the same co-tenant (no gemm record): the issue's case
    f, s = _device(None)
    run = json.loads((RESULTS / "2026-12-01-nvidia-h200-k-smoke-hog-matmul.json").read_text())
    s = from_jsonable(SmokeResult, run["result"])
    [gf540] = [x for x in _rules(f, s) if x.rule == "GF540"]
    assert "bf16 GEMM 326.7 TFLOP/s is 45% of the 726.3 expected" in gf540.message


def test_device_co_tenant_is_one_finding_naming_the_pid_after_the_judge() -> None:
    """Issue 36.3: the same capture through the one judge: the five GEMM dtypes, HBM and the
    co-tenant warning are one GF549 error naming pid 461, each measurement in its evidence."""
    f, s = _device("matmul")
    report = judge(Report(hosts={"h200": HostResult("h200", "ok", facts=f, smoke=s)},
                          level="full"))
    perf = [x for x in report.findings if x.rule.startswith("GF54")]
    assert [(x.rule, x.severity) for x in perf] == [("GF549", "error")], perf
    [one] = perf
    assert "pid 461" in one.message and "6 slow measurement(s)" in one.message, one.message
    ms = one.evidence["measurements"]
    assert sorted((m["rule"], m.get("dtype")) for m in ms) == sorted(
        [("GF540", d) for d in ("bf16", "fp16", "tf32", "fp32", "fp8")]
        + [("GF541", None), ("GF543", None)])
    assert all({"measured", "expected", "floor"} <= set(m) for m in ms if m["rule"] != "GF543")
    assert "pid 461" in one.remediation and "gpufleet check --level full -l h200" in \
        one.remediation, one.remediation
    assert report.summary["findings"]["error"] == 1, report.summary


def test_device_memory_hog_is_named_with_the_memory_it_holds() -> None:
    f, s = _device("mem")
    found = _rules(f, s)
    [gf543] = [x for x in found if x.rule == "GF543"]
    assert "1 other process(es) on the GPU during the smoke run, holding 113934 MiB of 143771" \
        in gf543.message
    assert not [x for x in found if x.rule == "GF540" and x.evidence["dtype"] == "bf16"]


def test_device_copier_slows_host_copies_and_is_named() -> None:
    f, s = _device("copy")
    found = {x.rule: x for x in evaluate(Report(hosts={"h200": HostResult(
        "h200", "ok", facts=f, smoke=s)}, level="full"))}
    assert "pinned H2D 34.7 GB/s alone, below 85 % of the 55.4" in found["GF530"].message
    assert "pid 513" in found["GF543"].message
    [h2d] = [e for e in sku_expect.host_expectations(f, s) if e.metric == "h2d_gbps"]
    assert h2d.measured == 34.7 and h2d.measured < h2d.floor


def test_table_and_markdown_show_measured_against_expected() -> None:
    from gpufleet.report import render  # noqa: PLC0415

    f, s = _device("matmul")
    report = judge(Report(hosts={"h200": HostResult("h200", "ok", facts=f, smoke=s)},
                          level="full"))
    md = render(report, "markdown")
    assert "## measured against expected" in md
    assert r"| h200 | GPU 0 matmul bf16 | 354.8 TFLOP/s | 726.3 | 617.3 | below floor \(49%\) |" \
        in md
    assert "fix: `` stop the other process(es) or wait for them: pid 461;" in md
    assert "| h200 | GPU 0 h2d | 55.0 GB/s | 55.4 | 47.1 | ok |" not in md  # the smoke's own
    table = render(report, "table", width=160)
    assert "GPU 0 matmul fp8" in table and "below floor (58%)" in table
    facts_only = judge(Report(hosts={"h200": HostResult("h200", "ok", facts=f)}, level="facts"))
    assert "measured against expected" not in render(facts_only, "markdown")


def test_the_sampler_tells_its_own_rank_from_others_even_without_a_shared_pid_namespace(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A real nvidia-smi stand-in on PATH printing the lent H200's captured rows (k-anchors.json,
    # "mem" scenario), with this process's pid put in (host runtime) or not (a container).
    import os  # noqa: PLC0415

    from gpufleet.smoke.remote import sample  # noqa: PLC0415

    cap = json.loads((RESULTS / "2026-12-01-nvidia-h200-k-anchors.json").read_text())["mem"]
    uuid = cap["sample_gpu"].split(",")[0]
    for own, want in ((True, ["487"]), (False, ["99999", "487"])):
        apps = cap["sample_apps"].replace(f", {ANCHOR_PID},", f", {os.getpid()},") if own \
            else cap["sample_apps"].replace(f", {ANCHOR_PID},", ", 99999,")
        (tmp_path / "gpu.txt").write_text(cap["sample_gpu"])
        (tmp_path / "apps.txt").write_text(apps)
        smi = tmp_path / "nvidia-smi"
        smi.write_text(f"#!/bin/sh\ncase \"$1\" in --query-gpu=*) cat {tmp_path}/gpu.txt;; "
                       f"*) cat {tmp_path}/apps.txt;; esac\n")
        smi.chmod(0o755)
        monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
        got = sample.finish(sample.start(), uuid)
        assert [a["pid"] for a in got["apps"]] == want and got["own_pid_seen"] is own, got
        assert got["gpu"]["memory.used"] == "115303"
        assert [a["pid"] for a in causes.foreign(got)] == want  # two rows: one is not the rank
        alone = {**got, "apps": got["apps"][:1]}
        assert causes.foreign(alone) == ([] if not own else alone["apps"])
