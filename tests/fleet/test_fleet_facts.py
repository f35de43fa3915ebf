"""`gpufleet facts` over the real-sshd fleet: every host answers for itself (issue 2 acceptance).

Expected values come from tests/fleet/profiles/README.md (each profile replays the real 2xH200
capture with one thing changed) and from the fault hosts the fixture builds.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fleetlib import DESIRED_STATE, Fleet, make_fleet

from harness.processes import descendants

pytestmark = pytest.mark.fleet

H200_UUIDS = [
    "GPU-e0ec50b6-f483-68ed-fb7b-ecc8879a76a1",
    "GPU-d7b915ba-0fcc-7de5-ad60-046e8236bde5",
]
H200_BUSES = ["00000000:00:06.0", "00000000:00:07.0"]
DIGEST = str(DESIRED_STATE["pytorch_image_digest"])
WRONG_DIGEST = "sha256:c6cd8c0f89a1e8b0de6d7120a61e35eacbe8b552b3cd20581bfcf5b65488aa55"
H200X8_BUSES = [f"00000000:{b}:00.0" for b in ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")]

Facts = dict[str, Any]


@pytest.fixture(scope="module")
def run(fleet: Fleet) -> subprocess.CompletedProcess[str]:
    return fleet.run_cli("facts", "-i", str(fleet.inventory), "--format", "json", timeout=300)


@pytest.fixture(scope="module")
def hosts(run: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    assert run.stdout, f"no report on stdout; stderr:\n{run.stderr}"
    doc = json.loads(run.stdout)
    assert doc["schema"] == "gpufleet.report/v1"
    result: dict[str, dict[str, Any]] = doc["hosts"]
    return result


def facts_of(hosts: dict[str, dict[str, Any]], name: str) -> Facts:
    h = hosts[name]
    assert h["status"] == "ok", f"{name}: {h['status']}: {h['error']}"
    assert h["facts"] is not None, f"{name}: status ok without facts"
    facts: Facts = h["facts"]
    return facts


# ---------------------------------------------------------------------- the whole sweep


def test_every_host_has_exactly_one_result(fleet: Fleet, hosts: dict[str, Any]) -> None:
    assert list(hosts) == list(fleet.hosts), "one result per inventory host, in inventory order"
    for name, h in hosts.items():
        assert h["name"] == name


def test_exit_code_says_some_hosts_failed(run: subprocess.CompletedProcess[str]) -> None:
    assert run.returncode == 1, f"4 fault hosts must make facts exit 1, got {run.returncode}"


def test_every_reachable_host_has_complete_facts(fleet: Fleet, hosts: dict[str, Any]) -> None:
    # Profiles whose nvidia-smi cannot answer, and the CPU hosts, have their own tests below.
    partial = {"nvml-mismatch", "nvidia-smi-hang"}
    for name, h in fleet.hosts.items():
        if h.fault or h.group != "gpu" or name in partial:
            continue
        f = facts_of(hosts, name)
        assert f["errors"] == {}, f"{name}: {f['errors']}"
        assert f["os"]["id"] and f["os"]["kernel"], name
        assert f["driver"]["version"] and f["driver"]["kernel_module_version"], name
        assert f["gpus"] and f["topology"] and f["nvlink"], name
        assert f["toolkit_version"] and f["docker"] and f["containerd_version"], name
        assert f["image"]["digests"] and f["nccl_system_version"] == "2.28.3", name


# ---------------------------------------------------------------------- fault hosts


def test_sshd_down_is_unreachable_with_connection_refused(fleet: Fleet, hosts: Any) -> None:
    h = hosts["down"]
    assert (h["status"], h["facts"]) == ("unreachable", None)
    assert "refused" in h["error"] and fleet.hosts["down"].address in h["error"], h["error"]


def test_wrong_host_key_is_a_mismatch_naming_both_fingerprints(fleet: Fleet, hosts: Any) -> None:
    h = hosts["badkey"]
    assert (h["status"], h["facts"]) == ("hostkey_mismatch", None)
    served = fleet.hosts["badkey"].fingerprint
    expected = subprocess.run(
        ["ssh-keygen", "-l", "-F", fleet.hosts["badkey"].address, "-f", str(fleet.known_hosts)],
        capture_output=True, text=True, check=True,
    ).stdout.split()[-1]  # fmt: skip
    assert served in h["error"], f"the key the host really serves ({served}): {h['error']}"
    assert expected in h["error"], f"the key known_hosts holds ({expected}): {h['error']}"


def test_unauthorized_client_key_is_auth_failed(hosts: Any) -> None:
    h = hosts["noauth"]
    assert (h["status"], h["facts"]) == ("auth_failed", None)
    assert "permission denied" in h["error"].lower() and "publickey" in h["error"], h["error"]


def test_unresolvable_name_is_unreachable_and_says_so(hosts: Any) -> None:
    h = hosts["noresolve"]
    assert (h["status"], h["facts"]) == ("unreachable", None)
    assert "resolve" in h["error"] and "noresolve.gpufleet.invalid" in h["error"], h["error"]


# ---------------------------------------------------------------------- profiles


def _h200x2(f: Facts) -> None:
    assert [g["uuid"] for g in f["gpus"]] == H200_UUIDS
    assert [g["bus_id"] for g in f["gpus"]] == H200_BUSES
    assert {g["name"] for g in f["gpus"]} == {"NVIDIA H200"}
    assert {g["memory_total_mib"] for g in f["gpus"]} == {143771}
    assert f["driver"] == {
        "version": "580.159.04", "kernel_module_version": "580.159.04",
        "kernel_module_flavor": "open", "cuda_version": "13.0",
    }  # fmt: skip
    assert f["topology"]["links"]["GPU0"]["GPU1"] == "NV18"
    assert [sum(link["active"] for link in g["links"]) for g in f["nvlink"]] == [18, 18]
    assert f["toolkit_version"] == "1.19.1"
    assert f["docker"]["default_runtime"] == "nvidia" and "nvidia" in f["docker"]["runtimes"]
    assert f["image"]["digests"] == [f"pytorch/pytorch@{DIGEST}"]
    for g in f["gpus"]:
        assert g["persistence_mode"] is True and g["ecc_uncorrected_volatile"] == 0
        assert (g["pcie_gen_current"], g["pcie_width_current"]) == (5, 16)
    assert f["xid_events"] == [] and f["gpu_processes"] == []


def _h200x8(f: Facts) -> None:
    assert [g["bus_id"] for g in f["gpus"]] == H200X8_BUSES
    links = f["topology"]["links"]
    assert all(links[f"GPU{a}"][f"GPU{b}"] == "NV18" for a in range(8) for b in range(8) if a != b)
    assert len(f["topology"]["nics"]) == 8
    assert f["fabric"]["nvswitch_count"] == 4 and f["fabric"]["manager_running"] is True
    assert set(f["fabric"]["gpu_states"].values()) == {"Completed"}


def _driver_drift(f: Facts) -> None:
    assert f["driver"]["version"] == f["driver"]["kernel_module_version"] == "570.172.08"
    assert f["driver"]["cuda_version"] == "12.8"
    assert len(f["gpus"]) == 2


def _nvml_mismatch(f: Facts) -> None:
    assert f["gpus"] == []
    assert f["driver"]["version"] == "580.159.04", "userspace version from libnvidia-ml"
    assert f["driver"]["kernel_module_version"] == "580.95.05"
    assert f["driver"]["kernel_module_flavor"] == "proprietary"
    assert "Driver/library version mismatch" in f["errors"]["nvidia_smi"]
    assert f["toolkit_version"] == "1.19.1", "the rest of the host still arrives"


def _nvidia_smi_hang(f: Facts) -> None:
    assert f["gpus"] == []
    assert "hung" in f["errors"]["nvidia_smi"]
    assert f["os"]["kernel"] and f["os"]["id"] == "debian", "os and kernel still arrive"
    assert f["driver"]["kernel_module_version"] == "580.159.04"
    assert f["toolkit_version"] == "1.19.1" and f["nccl_system_version"] == "2.28.3"
    assert f["probe_duration_s"] < 30, "one hung call, not one per nvidia-smi query"


def _ecc_remap(f: Facts) -> None:
    g0, g1 = f["gpus"]
    assert (g0["ecc_uncorrected_volatile"], g0["remapped_rows_pending"]) == (0, False)
    assert (g1["ecc_uncorrected_volatile"], g1["ecc_uncorrected_aggregate"]) == (2, 7)
    assert g1["remapped_rows_pending"] is True and g1["remapped_rows_failed"] is True


def _xid(f: Facts) -> None:
    assert [(e["xid"], e["bus_id"]) for e in f["xid_events"]] == [
        (48, "00000000:00:07.0"), (79, "00000000:00:07.0"),
    ]  # fmt: skip
    assert "fallen off the bus" in f["xid_events"][1]["message"]


def _pcie_degraded(f: Facts) -> None:
    g0, g1 = f["gpus"]
    assert (g0["pcie_gen_current"], g0["pcie_width_current"]) == (5, 16)
    assert (g1["pcie_gen_current"], g1["pcie_gen_max"]) == (4, 5)
    assert (g1["pcie_width_current"], g1["pcie_width_max"]) == (8, 16)


def _nvlink_down(f: Facts) -> None:
    for g in f["nvlink"]:
        assert [link["link"] for link in g["links"] if not link["active"]] == [3, 11], g
        assert len(g["links"]) == 18
    assert f["topology"]["links"]["GPU0"]["GPU1"] == "NV16"


def _persistence_off(f: Facts) -> None:
    assert [g["persistence_mode"] for g in f["gpus"]] == [False, False]


def _old_toolkit(f: Facts) -> None:
    assert f["toolkit_version"] == "1.16.1"


def _wrong_digest(f: Facts) -> None:
    assert f["image"]["ref"] == DESIRED_STATE["pytorch_image"]
    assert f["image"]["digests"] == [f"pytorch/pytorch@{WRONG_DIGEST}"]


def _busy(f: Facts) -> None:
    assert f["gpu_processes"] == [
        {"pid": 48213, "name": "python3", "gpu_uuid": H200_UUIDS[0], "used_memory_mib": 81920}
    ]


def _fabric_incomplete(f: Facts) -> None:
    assert len(f["gpus"]) == 8
    assert set(f["fabric"]["gpu_states"].values()) == {"In Progress"}
    assert f["fabric"]["manager_running"] is False


def _gpu_missing(f: Facts) -> None:
    assert [g["index"] for g in f["gpus"]] == list(range(7))
    assert "00000000:AB:00.0" not in [g["bus_id"] for g in f["gpus"]]
    assert f["fabric"]["nvswitch_count"] == 4


def _cpu(f: Facts) -> None:
    assert f["gpus"] == [] and f["driver"]["kernel_module_version"] is None
    assert f["errors"]["nvidia_smi"] == "nvidia-smi: not found"
    assert "not present" in f["errors"]["kernel_module"]
    assert f["os"]["id"] == "debian" and f["os"]["kernel"]


PROFILE_CHECKS: dict[str, Callable[[Facts], None]] = {
    "h200x2": _h200x2,
    "h200x8": _h200x8,
    "driver-drift": _driver_drift,
    "nvml-mismatch": _nvml_mismatch,
    "nvidia-smi-hang": _nvidia_smi_hang,
    "ecc-remap": _ecc_remap,
    "xid": _xid,
    "pcie-degraded": _pcie_degraded,
    "nvlink-down": _nvlink_down,
    "persistence-off": _persistence_off,
    "old-toolkit": _old_toolkit,
    "wrong-digest": _wrong_digest,
    "busy": _busy,
    "fabric-incomplete": _fabric_incomplete,
    "gpu-missing": _gpu_missing,
    "no-nvidia-smi": _cpu,
}


@pytest.mark.parametrize("profile", sorted(PROFILE_CHECKS))
def test_profile_facts(fleet: Fleet, hosts: Any, profile: str) -> None:
    names = [n for n, h in fleet.hosts.items() if h.profile == profile]
    assert names, f"no host with profile {profile} in the session fleet"
    for name in names:
        PROFILE_CHECKS[profile](facts_of(hosts, name))


# ---------------------------------------------------------------------- CLI options


def test_limit_selects_hosts_and_groups(fleet: Fleet) -> None:
    r = fleet.run_cli("facts", "-i", str(fleet.inventory), "-l", "cpu,h200x2-2", "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert set(doc["hosts"]) == {"cpu-1", "cpu-2", "h200x2-2"}
    assert all(h["status"] == "ok" for h in doc["hosts"].values())


def test_table_format_lists_every_host_with_its_status(fleet: Fleet) -> None:
    names = [n for n in fleet.hosts if n != "nvidia-smi-hang"]  # keeps this run short
    r = fleet.run_cli(
        "facts", "-i", str(fleet.inventory), "-l", ",".join(names), "--format", "table"
    )
    assert r.returncode == 1, r.stderr
    cells = [line.split() for line in r.stdout.splitlines()]
    rows = {c[0]: c[1] for c in cells if len(c) > 1}
    for name in names:
        want = {"down": "unreachable", "badkey": "hostkey_mismatch", "noauth": "auth_failed",
                "noresolve": "unreachable"}.get(name, "ok")  # fmt: skip
        assert rows.get(name) == want, f"{name} row in:\n{r.stdout}"
    assert "refused" in r.stdout and "does not resolve" in r.stdout, "errors are shown"


def test_daemon_killed_mid_run_does_not_hide_other_hosts(tmp_path: Path) -> None:
    hosts = [("peer-a", "h200x2"), ("peer-b", "h200x8"), ("victim", "nvidia-smi-hang")]
    with make_fleet(tmp_path, hosts) as fleet:
        cli = subprocess.Popen(
            [sys.executable, "-m", "gpufleet", "facts", "-i", str(fleet.inventory), "--format",
             "json"], env=fleet.env, cwd=fleet.root, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            # The victim's probe sits in the hung nvidia-smi: kill its sshd and sessions then.
            _wait_for_remote(fleet, "victim", "nvidia-smi", timeout=30)
            fleet.stop("victim")
            out, err = cli.communicate(timeout=120)
        finally:
            cli.kill()
    doc = json.loads(out)
    assert list(doc["hosts"]) == ["peer-a", "peer-b", "victim"], err
    _h200x2(facts_of(doc["hosts"], "peer-a"))
    _h200x8(facts_of(doc["hosts"], "peer-b"))
    victim = doc["hosts"]["victim"]
    # The connection died under the probe: the host is unreachable, never silently "ok".
    assert victim["status"] == "unreachable", victim
    assert "connection lost" in victim["error"], victim


def _wait_for_remote(fleet: Fleet, name: str, needle: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in descendants(fleet.hosts[name].pid or 0):
            try:
                if needle.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return
            except OSError:
                continue
        time.sleep(0.05)
    raise AssertionError(f"{needle} never ran on {name}")
