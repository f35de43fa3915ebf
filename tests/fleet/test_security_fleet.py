"""The security-floor audit over the sshd test fleet: each simulated host below a floor gets its
rule with the advisory in the evidence; the host exactly at every floor and the healthy capture
get none. The same run's Prometheus output feeds the shipped alert rules (test_monitoring.py)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]
from fleetlib import DESIRED_STATE, FAULTS, Fleet, make_fleet
from prometheus_client.parser import text_string_to_metric_families

pytestmark = [pytest.mark.fleet, pytest.mark.slow]

# Each host alone in its group: no peers, so only the floors (and the inventory) judge it.
HOSTS: dict[str, str] = {
    "sec-ok": "h200x2",
    "sec-floor": "security-at-floor",
    "sec-driver": "old-driver-580",
    "sec-r570": "driver-drift",
    "sec-ctk": "old-toolkit",
    "sec-runc": "old-runc",
    "sec-authz": "docker-authz",
    "sec-cuda": "old-cuda-image",
    "sec-reboot": "reboot-pending",
}
# Desired state without an exact driver: the floors, not nvidia_driver_version, judge the driver.
VARS = {k: v for k, v in DESIRED_STATE.items() if k != "nvidia_driver_version"}

# host -> {rule: (severity, a source the evidence must name)}
EXPECTED: dict[str, dict[str, tuple[str, str]]] = {
    "sec-driver": {"GF307": ("warning", "NVIDIA/product-security@dbb4ada05315:2026/5821/5821.md")},
    "sec-r570": {"GF307": ("warning", "NVIDIA/product-security@dbb4ada05315:2026/5821/5821.md")},
    "sec-ctk": {"GF303": ("error", "NVIDIA/product-security@dbb4ada05315:2024/5582/5582.md")},
    "sec-runc": {"GF308": ("error",
                           "https://github.com/opencontainers/runc/security/advisories/"
                           "GHSA-xr7r-f8xq-vfvv")},
    "sec-authz": {"GF309": ("error", "https://github.com/moby/moby/security/advisories/"
                                     "GHSA-v23v-6jw2-98fq")},
    "sec-cuda": {"GF310": ("info", "NVIDIA/product-security@dbb4ada05315:2026/5755/5755.md")},
    "sec-reboot": {"GF007": ("warning", "")},
}
RULES = Path(__file__).resolve().parents[2] / "monitoring" / "prometheus" / "gpufleet.rules.yml"
SECURITY_RULES = {"GF007", "GF303", "GF307", "GF308", "GF309", "GF310"}


@pytest.fixture(scope="module")
def security_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    with make_fleet(
        tmp_path_factory.mktemp("security-fleet"),
        list(HOSTS.items()),
        faults=True,
        groups={name: name for name in HOSTS},
        group_vars={name: VARS for name in HOSTS},
    ) as fleet:
        yield fleet


@pytest.fixture(scope="module")
def report(security_fleet: Fleet) -> dict[str, Any]:
    return security_fleet.check_json("-f", "8")


def test_each_host_below_a_floor_gets_its_rule_with_the_advisory(report: dict[str, Any]) -> None:
    got: dict[str, dict[str, dict[str, Any]]] = {}
    for f in report["findings"]:
        if f["rule"] in SECURITY_RULES:
            for h in f["hosts"]:
                got.setdefault(h, {})[f["rule"]] = f
    assert set(got) == set(EXPECTED), sorted(got)
    for host, rules in EXPECTED.items():
        assert set(got[host]) == set(rules), (host, sorted(got[host]))
        for rule, (severity, source) in rules.items():
            f = got[host][rule]
            assert f["severity"] == severity, (host, rule, f["message"])
            if source:
                assert source in [a["source"] for a in f["evidence"]["advisories"]], f
            assert f["remediation"] and host in f["remediation"], f


def test_the_r570_host_is_told_its_branch_gets_no_fix(report: dict[str, Any]) -> None:
    f = next(f for f in report["findings"] if f["rule"] == "GF307" and f["hosts"] == ["sec-r570"])
    assert "gets no fix on R570" in f["message"], f["message"]
    assert "570.211.01" in f["message"]  # and it is below January 2026's R570 fix as well
    assert "nvidia_driver_branch=" in f["remediation"]


def test_the_pending_reboot_names_both_kernels(report: dict[str, Any],
                                               security_fleet: Fleet) -> None:
    f = next(f for f in report["findings"] if f["rule"] == "GF007")
    running = report["hosts"]["sec-reboot"]["facts"]["os"]["kernel"]
    assert f["evidence"]["running"] == running
    assert f["evidence"]["newest_installed"] == "99.0.0-1-generic"
    assert sorted(f["evidence"]["installed"]) == sorted([running, "99.0.0-1-generic"])
    # The others' /boot holds just the running kernel: they are judged, and nothing is pending.
    assert report["hosts"]["sec-ok"]["facts"]["kernels"]["installed"] == [running]


def _series(prom_text: str) -> list[dict[str, str]]:
    """Each sample of a gpufleet.prom as a promtool input series, constant over the test."""
    out = []
    for family in text_string_to_metric_families(prom_text):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out.append({"series": f"{s.name}{{{labels}}}", "values": f"{s.value:g}x1600"})
    return out


def test_the_shipped_alerts_fire_on_this_fleet_run(security_fleet: Fleet, tmp_path: Path) -> None:
    """promtool test rules over the metrics `gpufleet check --format prometheus` wrote for this
    fleet: the alerts name exactly the hosts the fleet was built to break."""
    prom = tmp_path / "gpufleet.prom"
    r = security_fleet.run_cli("check", "-i", str(security_fleet.inventory), "--level", "facts",
                               "--format", "prometheus", "-o", str(prom), "-f", "8", timeout=300)
    assert r.returncode == 1, r.stderr
    firing = 'count by (alertname, host) (ALERTS{alertstate="firing"})'
    expected = {
        "GpufleetHostDown": set(FAULTS),
        # Errors: the floors that are container escapes, GF104 (toolkit != inventory), GF301 (the
        # R570 host cannot run the CUDA 13.0 image), and the hosts that could not be checked.
        "GpufleetHostUnhealthy": {"sec-ctk", "sec-runc", "sec-authz", "sec-r570", *FAULTS},
        "GpufleetSecurityFloor": {"sec-driver", "sec-r570", "sec-ctk", "sec-runc", "sec-authz"},
    }

    def samples(alerts: dict[str, set[str]]) -> list[dict[str, Any]]:
        return [{"labels": f'{{alertname="{a}", host="{h}"}}', "value": 1}
                for a, hosts in sorted(alerts.items()) for h in sorted(hosts)]

    suite = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": _series(prom.read_text()),
            "promql_expr_test": [
                {"expr": firing, "eval_time": "10m", "exp_samples": samples(expected)},
                # A day later the pending reboot has held long enough to alert too.
                {"expr": firing, "eval_time": "25h",
                 "exp_samples": samples({**expected, "GpufleetRebootPending": {"sec-reboot"}})},
            ],
        }],
    }
    path = tmp_path / "fleet.test.yml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    tool = shutil.which("promtool")
    assert tool, "promtool is missing: scripts/setup.sh installs Debian's prometheus package"
    r = subprocess.run([tool, "test", "rules", str(path)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
