"""gpufleet_perf_floors through a real Ansible inventory (ansible-core's InventoryManager and
VariableManager read group_vars/ and host_vars/ as a playbook would): host > group > catalog.

The fleet: gpu01..gpu04 in group `gpu` (group_vars: bf16 floor 700 TFLOP/s, HBM 1900 GB/s, both
above the catalog's), gpu03's host_vars replace the mapping with a bf16 floor of 650. Every host
measured bf16 680 and HBM 2000 on GPU 0 (a healthy H200 measures ~726 and ~2130; the catalog's
floors are 617 and 1771): the group's floor judges gpu01 slow, gpu03's own floor passes it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from test_rules_builders import HOSTS, fleet, smoke

from gpufleet.inventory import InventoryError, load_inventory
from gpufleet.model import SmokeCheck
from gpufleet.report.pipeline import judge
from gpufleet.sku.floors import KEYS, perf_floors

GROUP = "gpufleet_perf_floors:\n  matmul_tflops.bf16: 700\n  hbm_gbps: 1900\n"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def inventory(tmp: Path, host_vars: str = "gpufleet_perf_floors:\n  matmul_tflops.bf16: 650\n"
              ) -> dict[str, object]:
    inv = tmp / "inv"
    write(inv / "hosts.yml", "all:\n  children:\n    gpu:\n      hosts:\n"
          + "".join(f"        {h}: {{ansible_host: 127.0.0.9}}\n" for h in HOSTS))
    write(inv / "group_vars" / "gpu.yml", GROUP)
    write(inv / "host_vars" / f"{HOSTS[2]}.yml", host_vars)
    return {s.name: s.expect for s in load_inventory([str(inv)])}


def test_host_vars_replace_group_vars_which_replace_the_catalog(tmp_path: Path) -> None:
    expect = inventory(tmp_path)
    assert expect[HOSTS[0]].perf_floors == {"matmul_tflops.bf16": 700.0, "hbm_gbps": 1900.0}
    assert expect[HOSTS[2]].perf_floors == {"matmul_tflops.bf16": 650.0}
    base = fleet({h: {"smoke": slow(h)} for h in HOSTS}, with_expect=False)
    specs = {h: dataclasses.replace(base.specs[h], expect=expect[h]) for h in HOSTS}
    r = judge(dataclasses.replace(base, specs=specs))
    lines = {h: {(e.metric, e.dtype, e.gpu): e for e in r.hosts[h].expectations} for h in HOSTS}
    g1 = lines[HOSTS[0]][("matmul_tflops", "bf16", 0)]
    assert g1.floor == 700.0 and "gpufleet_perf_floors matmul_tflops.bf16" in g1.source
    assert lines[HOSTS[0]][("hbm_gbps", None, 0)].floor == 1900.0
    assert lines[HOSTS[2]][("matmul_tflops", "bf16", 0)].floor == 650.0
    catalog = lines[HOSTS[2]][("hbm_gbps", None, 0)]
    assert catalog.floor < 1900.0 and "gpufleet_perf_floors" not in catalog.basis, \
        "a key the host's mapping lacks falls back to the catalog, not the group"
    slow_hosts = sorted(f.hosts[0] for f in r.findings
                        if f.rule == "GF540" and f.evidence["dtype"] == "bf16")
    assert slow_hosts == [h for h in HOSTS if h != HOSTS[2]]
    assert not [f for f in r.findings if f.rule == "GF541"], "HBM 2000 is above every floor"


def slow(host: str) -> object:
    s = smoke(host)
    gemm = SmokeCheck("gemm", True, "", {"per_rank": {"0": {"tflops": {"bf16": 680.0}},
                                                      "1": {"tflops": {"bf16": 726.0}}}})
    membw = SmokeCheck("membw", True, "", {"per_rank": {
        str(r): {"gbps": 2000.0, "counted": "one side"} for r in (0, 1)}})
    return dataclasses.replace(s, level="full", checks=(*s.checks, gemm, membw))


@pytest.mark.parametrize(("text", "error"), [
    ("gpufleet_perf_floors:\n  hbm_gb: 1900\n", r"gpu03: gpufleet_perf_floors: unknown metric "
                                                r"'hbm_gb' \(known: matmul_tflops, hbm_gbps"),
    ("gpufleet_perf_floors:\n  hbm_gbps: fast\n", r"hbm_gbps='fast' is not a positive number"),
    ("gpufleet_perf_floors:\n  hbm_gbps: -1\n", r"hbm_gbps=-1 is not a positive number"),
    ("gpufleet_perf_floors: [600]\n", r"must be a mapping of metric to floor, not a list"),
])
def test_a_bad_override_is_an_inventory_error_naming_host_and_key(
        tmp_path: Path, text: str, error: str) -> None:
    with pytest.raises(InventoryError, match=error):
        inventory(tmp_path, host_vars=text)


def test_every_key_is_accepted_and_a_bool_is_not() -> None:
    assert perf_floors({k: 1 for k in KEYS}) == {k: 1.0 for k in KEYS}
    with pytest.raises(ValueError, match="True is not a positive number"):
        perf_floors({"hbm_gbps": True})
