"""GF544 and the p2p_gbps lines, judged from simulated smoke results of the full level's copy
matrix (smoke/remote/p2p.py; issue 25 item 4). The rank side needs GPUs: tests/gpu measures it.

Hosts: the rules builders' 2 x H200 NV18 pair (no NVSwitch) and the h200x8 profile's facts
(tests/fixtures/golden/profiles: 8 x H200 behind 4 NVSwitches). A pair's expectation there is
18 x 26.562 GB/s x 0.92 = 439.9, floor x 0.76 = 334.3 (skus.json; Azure floors at 335). The
matrix records are shaped as the rank side writes them: {"devices": {torch index: uuid},
"pairs": [{"src", "dst", "gbps" | "error", "peer_access"}]}.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import jsonschema
import pytest
from test_fabric_classes import _facts
from test_rules_builders import facts, fleet, smoke

from gpufleet.model import Facts, Finding, GpuNvLinks, NvLink, SmokeCheck, Topology
from gpufleet.report import json_schema, render
from gpufleet.report.pipeline import judge
from gpufleet.rules import evaluate
from gpufleet.sku.expect import host_expectations
from gpufleet.smoke.remote.p2p import agg_p2p

FAST, SLOW = 380.0, 120.0  # GB/s: above and below the 334.3 floor


def matrix(f: Facts, rate: Any = FAST, *, order: list[int] | None = None,
           **extra: Any) -> SmokeCheck:
    """The check as rank 0 aggregates it: `rate(src, dst)` -> GB/s, or a {"error"} dict."""
    idx = order or [g.index for g in f.gpus]  # torch index t is nvidia-smi GPU idx[t]
    pairs = []
    for dst in range(len(idx)):
        for src in range(len(idx)):
            if src != dst:
                v = rate(idx[src], idx[dst]) if callable(rate) else rate
                row = {"src": src, "dst": dst, "peer_access": True}
                row.update(v if isinstance(v, dict) else {"gbps": v})
                pairs.append(row)
    uuid = {g.index: g.uuid for g in f.gpus}
    rec = {"passed": True, "rank": 0, "method": "read_ce", "pairs": pairs,
           "devices": {str(t): uuid[i] for t, i in enumerate(idx)}, **extra}
    return SmokeCheck("p2p", True, "", {"per_rank": {"0": rec}})


def run(f: Facts, check: SmokeCheck | None) -> list[Finding]:
    s = smoke("gpu02", level="full", world_size=len(f.gpus), device_count=len(f.gpus),
              checks=(check,) if check else ())
    return [x for x in evaluate(fleet({"gpu02": {"facts": f, "smoke": s}})) if x.rule == "GF544"]


def lines(f: Facts, check: SmokeCheck | None) -> list[tuple[int | None, int | None,
                                                              float | None]]:
    s = smoke("gpu02", level="full", checks=(check,) if check else ())
    return [(e.gpu, e.peer, e.measured) for e in host_expectations(f, s)
            if e.metric == "p2p_gbps"]


H8 = _facts("h200x8")


@pytest.mark.parametrize("f", [facts(), H8], ids=["2xH200-NV18", "8xH200-NVSwitch"])
def test_a_fast_matrix_is_no_finding_and_each_gpu_shows_its_slowest_pair(f: Facts) -> None:
    def rate(s: int, d: int) -> float:
        return FAST + s + 10 * d  # GPU d's slowest read is from GPU 0 (GPU 0's from GPU 1)

    assert run(f, matrix(f, rate)) == []
    got = lines(f, matrix(f, rate))
    assert [g for g, _p, _m in got] == [g.index for g in f.gpus], "one line per reading GPU"
    assert got[0] == (0, 1, FAST + 1) and got[1] == (1, 0, FAST + 10)


def test_no_matrix_no_finding_and_the_lines_wait_for_a_measurement() -> None:
    assert run(H8, None) == []
    assert {(p, m) for _g, p, m in lines(H8, None)} == {(None, None)}


def test_8_gpus_one_gpus_nvlinks_down_is_one_finding_on_that_gpu() -> None:
    nv = tuple(GpuNvLinks(n.gpu_index, tuple(NvLink(k, not (n.gpu_index == 3 and k >= 9), 26.562)
                                             for k in range(18))) for n in H8.nvlink)
    f = dataclasses.replace(H8, nvlink=nv)
    [x] = run(f, matrix(f, lambda s, d: SLOW if 3 in (s, d) else FAST))
    ev = x.evidence
    assert ev["gpu"] == 3 and ev["subject"] == "gpu3" and x.severity == "warning"  # borrowed
    assert len(ev["pairs"]) == 14 and ev["pairs_judged"] == 56
    assert (ev["measured"], ev["expected"], ev["floor"]) == (SLOW, 439.9, 334.3)
    assert ev["ratio"] == round(SLOW / 439.9, 3) and "0.92" in ev["source"]
    assert [c["cause"] for c in ev["causes"]] == ["nvlink_down"]
    assert "GPU 3: 9 of 18 NVLinks active" in x.message and "every one involves GPU 3" in x.message
    assert "nvidia-smi nvlink -s" in x.remediation


def test_2_gpus_without_peer_access_name_p2p_disabled() -> None:
    f = facts()

    def rate(s: int, d: int) -> dict[str, Any]:
        return {"gbps": 24.6, "peer_access": False}

    [x] = run(f, matrix(f, rate))
    assert x.evidence["causes"][0]["cause"] == "p2p_unavailable"
    assert "gpu" not in x.evidence, "two GPUs: no single one to blame"
    assert "staged through host memory" in x.message and "topo -p2p r" in x.remediation


def test_a_pair_over_pcie_on_an_nvswitch_host_names_the_path() -> None:
    links = {a: dict(row) for a, row in H8.topology.links.items()} if H8.topology else {}
    links["GPU2"]["GPU5"] = links["GPU5"]["GPU2"] = "SYS"
    f = dataclasses.replace(H8, topology=Topology(devices=H8.topology.devices if H8.topology
                                                  else (), links=links))
    [x] = run(f, matrix(f, lambda s, d: 52.0 if {s, d} == {2, 5} else FAST))
    assert {(p["src"], p["dst"]) for p in x.evidence["pairs"]} == {(2, 5), (5, 2)}
    assert x.evidence["causes"][0]["cause"] == "pcie_path" and "as SYS" in x.message


def test_missing_pairs_are_a_finding_with_the_rank_sides_reason() -> None:
    f = facts()
    [x] = run(f, matrix(f, lambda s, d: {"error": "not measured: the matrix's 25 s budget ran "
                                                  "out"} if d == 1 else FAST))
    assert x.evidence["missing"] == [{"src": 0, "dst": 1, "error": "not measured: the matrix's "
                                                                   "25 s budget ran out"}]
    assert "1 pair(s) not measured" in x.message and x.evidence["pairs"] == []
    [y] = run(f, matrix(f, FAST, pairs=[],
                        error="cannot load the CUDA driver API (libcuda.so.1): x"))
    assert "2 pair(s) not measured (cannot load the CUDA driver API" in y.message


def test_torch_order_is_mapped_to_nvidia_smi_by_uuid() -> None:
    # torch's device 0 is nvidia-smi's GPU 7 (CUDA_DEVICE_ORDER=FASTEST_FIRST): GPU 7's reads
    # are slow and the finding must say GPU 7, not GPU 0
    order = [7, 0, 1, 2, 3, 4, 5, 6]
    [x] = run(H8, matrix(H8, lambda s, d: SLOW if d == 7 else FAST, order=order))
    assert {p["dst"] for p in x.evidence["pairs"]} == {7} and x.evidence["gpu"] == 7


def test_a_group_floor_override_moves_every_pairs_floor() -> None:
    f = facts()
    s = smoke("gpu02", level="full", checks=(matrix(f, 300.0),))
    r = fleet({"gpu02": {"facts": f, "smoke": s, "expect": {"perf_floors": {"p2p_gbps": 250.0}}}})
    assert [x for x in evaluate(r) if x.rule == "GF544"] == []
    assert run(f, matrix(f, 300.0)), "the catalog's 334.3 floor fires without the override"


def test_the_aggregate_counts_pairs_and_says_who_judges() -> None:
    rec = matrix(H8, lambda s, d: {"error": "x"} if (s, d) == (1, 0) else FAST).data["per_rank"]
    other = {"passed": True, "skipped": "measured by local rank 0"}
    ok, detail, data = agg_p2p([{"rank": 0, "checks": {"p2p": rec["0"]}},
                                {"rank": 1, "checks": {"p2p": other}}])
    assert ok and "55 pair(s): min 380.0" in detail and "1 pair(s) not measured" in detail
    assert data["judged_by"].startswith("controller")
    one = agg_p2p([{"rank": 0, "checks": {"p2p": {"passed": True, "skipped": "one GPU"}}}])
    assert one[1] == "no GPU<->GPU copies (one GPU per host)"


@pytest.mark.parametrize("fmt", ["table", "markdown", "json", "html"])
def test_the_report_shows_each_gpus_pair_measured_beside_expected(fmt: str) -> None:
    f = facts()
    s = smoke("gpu02", level="full", checks=(matrix(f, lambda s, d: SLOW if d == 1 else FAST),))
    out = render(judge(fleet({"gpu02": {"facts": f, "smoke": s}}, hosts=("gpu02",))), fmt,
                 width=200)
    if fmt == "json":
        doc = json.loads(out)
        jsonschema.validate(doc, json_schema())
        p2p = [e for e in doc["hosts"]["gpu02"]["expectations"] if e["metric"] == "p2p_gbps"]
        assert [(e["gpu"], e["peer"], e["measured"], e["floor"]) for e in p2p] == [
            (0, 1, FAST, 334.3), (1, 0, SLOW, 334.3)]
        assert [x["rule"] for x in doc["findings"]].count("GF544") == 1
    elif fmt == "html":  # the page's data: label, metric, ..., measured, expected, floor
        assert '"GPU 1 p2p from GPU 0","p2p_gbps"' in out and "120.0,439.9,334.3" in out
    else:
        assert "GPU 1 p2p from GPU 0" in out and "below floor" in out and "27%" in out, out


def test_a_crashed_matrix_fails_the_check_and_no_pair_is_judged() -> None:
    crashed = {"passed": False, "rank": 0, "error": "OutOfMemoryError: CUDA out of memory"}
    ok, detail, _data = agg_p2p([{"rank": 0, "checks": {"p2p": crashed}}])
    assert not ok and "crashed on rank(s) 0: OutOfMemoryError" in detail
    check = SmokeCheck("p2p", False, detail, {"per_rank": {"0": crashed}})
    assert run(facts(), check) == [], "GF601 names the crash; GF544 judges measured matrices"
