"""`gpufleet check` end to end over the sshd test fleet: every injected problem is named with its
rule and host, and nothing else above info; exit codes follow --fail-on."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from fleetlib import DESIRED_STATE, Fleet, make_fleet
from prometheus_client.parser import text_string_to_metric_families

import gpufleet

pytestmark = [pytest.mark.fleet, pytest.mark.slow]

# host -> (profile, group); peers keep every group's majority healthy.
HOSTS: dict[str, tuple[str, str]] = {
    "gpu-ok-1": ("h200x2", "gpu"),
    "gpu-ok-2": ("h200x2", "gpu"),
    "gpu-ok-3": ("h200x2", "gpu"),
    "gpu-drift": ("driver-drift", "gpu"),
    "gpu-nvml": ("nvml-mismatch", "gpu"),
    "gpu-ecc": ("ecc-remap", "gpu"),
    "gpu-xid": ("xid", "gpu"),
    "gpu-pcie": ("pcie-degraded", "gpu"),
    "gpu-nvlink": ("nvlink-down", "gpu"),
    "gpu-pm": ("persistence-off", "gpu"),
    "gpu-ctk": ("old-toolkit", "gpu"),
    "gpu-digest": ("wrong-digest", "gpu"),
    "hgx-ok-1": ("h200x8", "hgx"),
    "hgx-ok-2": ("h200x8", "hgx"),
    "hgx-fabric": ("fabric-incomplete", "hgx"),
    "hgx-missing": ("gpu-missing", "hgx"),
}

# Everything above info that each host must get, and nothing more. Consequences of the injected
# problem count (a 570 driver cannot run the desired CUDA 13.0 image: GF301; R570 is past EOL).
EXPECTED: dict[str, set[str]] = {
    # R570 is past end of life too, and below (and no longer fixed by) NVIDIA's security bulletins
    "gpu-drift": {"GF101", "GF301", "GF302", "GF307"},
    "gpu-nvml": {"GF304", "GF106"},
    "gpu-ecc": {"GF402", "GF403", "GF404"},
    "gpu-xid": {"GF405"},
    "gpu-pcie": {"GF407"},
    "gpu-nvlink": {"GF408"},
    "gpu-pm": {"GF409"},
    "gpu-ctk": {"GF104", "GF303"},
    "gpu-digest": {"GF105"},
    "hgx-fabric": {"GF412"},
    "hgx-missing": {"GF106"},
}


@pytest.fixture(scope="module")
def check_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    root = tmp_path_factory.mktemp("check-fleet")
    with make_fleet(
        root,
        [(name, profile) for name, (profile, _) in HOSTS.items()],
        groups={name: group for name, (_, group) in HOSTS.items()},
        group_vars={
            "gpu": {**DESIRED_STATE, "gpufleet_expected_gpu_count": 2},
            "hgx": {**DESIRED_STATE, "gpufleet_expected_gpu_count": 8},
        },
    ) as fleet:
        yield fleet


@pytest.fixture(scope="module")
def report(check_fleet: Fleet) -> dict[str, Any]:
    return check_fleet.check_json("-f", "16")


def _above_info(doc: dict[str, Any]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for f in doc["findings"]:
        if f["severity"] != "info":
            for h in f["hosts"]:
                out.setdefault(h, set()).add(f["rule"])
    return out


def test_every_host_answers_with_its_facts(report: dict[str, Any]) -> None:
    assert list(report["hosts"]) == list(HOSTS)
    for name, host in report["hosts"].items():
        assert host["status"] == "ok", (name, host["error"])
        assert host["smoke"] is None, "--level facts runs no smoke test"


def test_each_injected_problem_is_named_with_its_rule_and_host_and_nothing_else(
    report: dict[str, Any],
) -> None:
    got = _above_info(report)
    for name in HOSTS:
        assert got.get(name, set()) == EXPECTED.get(name, set()), (
            f"{name} ({HOSTS[name][0]}): expected {sorted(EXPECTED.get(name, set()))}, "
            f"got {sorted(got.get(name, set()))}"
        )
    for f in report["findings"]:
        assert f["remediation"], f"{f['rule']} has no remediation"


def test_fail_on_and_exit_codes(check_fleet: Fleet) -> None:
    inv = str(check_fleet.inventory)
    # Only warnings on this host (persistence off): exit 0 by default, 1 with --fail-on warning.
    r = check_fleet.run_cli("check", "-i", inv, "-l", "gpu-pm", "--level", "facts",
                            "--format", "json")
    assert r.returncode == 0, r.stderr
    assert {f["rule"] for f in json.loads(r.stdout)["findings"]} >= {"GF409"}
    r = check_fleet.run_cli("check", "-i", inv, "-l", "gpu-pm", "--level", "facts",
                            "--format", "json", "--fail-on", "warning")
    assert r.returncode == 1, r.stderr
    # Healthy hosts: exit 0 even with --fail-on warning.
    r = check_fleet.run_cli("check", "-i", inv, "-l", "gpu-ok-*", "--level", "facts",
                            "--fail-on", "warning")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "HEALTHY" in r.stdout


def test_prometheus_over_the_fleet(check_fleet: Fleet, tmp_path: Path) -> None:
    inv = str(check_fleet.inventory)
    out = tmp_path / "fleet.prom"
    r = check_fleet.run_cli("check", "-i", inv, "-l", "gpu-ok-1,gpu-ecc", "--level", "facts",
                            "--format", "prometheus", "-o", str(out))
    assert r.returncode == 1, r.stderr
    names = {f.name for f in text_string_to_metric_families(out.read_text())}
    assert any("up" in n for n in names), names


def test_each_host_carries_its_expectations_from_the_facts_alone(report: dict[str, Any]) -> None:
    # issue 25: hosts.<name>.expectations at --level facts, from the SKU catalog and the links
    schema = json.loads((Path(gpufleet.__file__).parent / "schema/report-v1.json").read_text())
    jsonschema.validate(report, schema)
    hgx = report["hosts"]["hgx-ok-1"]["expectations"]
    [busbw] = [e for e in hgx if e["metric"] == "allreduce_busbw_gbps"]
    assert (busbw["expected"], busbw["floor"], busbw["measured"]) == (480.0, 456.0, None)
    assert "NVLS on: NCCL's default on NVSwitch with hopper GPUs" in busbw["basis"]
    bf16s = [e for e in hgx if e["metric"] == "matmul_tflops" and e["dtype"] == "bf16"]
    assert [e["gpu"] for e in bf16s] == list(range(8))  # one per GPU
    bf16 = bf16s[0]
    assert (bf16["expected"], bf16["floor"]) == (726.3, 617.3)
    assert "H200-SXM" in bf16["basis"] and "989.5" in bf16["source"]
    pair = report["hosts"]["gpu-ok-1"]["expectations"]
    [busbw2] = [e for e in pair if e["metric"] == "allreduce_busbw_gbps"]
    assert (busbw2["expected"], busbw2["floor"]) == (343.7, 275.0)
    # GPU<->GPU copies over NVLink: 18 x 26.562 GB/s x 0.92, floor at Azure's 335 (skus.json);
    # nothing measures the matrix yet, so measured stays empty
    for host, gpus in (("hgx-ok-1", 8), ("gpu-ok-1", 2)):
        p2p = [e for e in report["hosts"][host]["expectations"] if e["metric"] == "p2p_gbps"]
        assert [(e["gpu"], e["expected"], e["floor"], e["measured"]) for e in p2p] == [
            (g, 439.9, 334.3, None) for g in range(gpus)], host
