"""The test fleet itself, checked with tools we do not own: OpenSSH, ansible, pgrep."""

from __future__ import annotations

import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from fleetlib import FAULTS, PROFILE_BIN_TARGET, Fleet, make_fleet

from harness.processes import descendants

pytestmark = pytest.mark.fleet


Results = dict[str, subprocess.CompletedProcess[str]]


def _ssh_all(fleet: Fleet, names: list[str], command: str) -> Results:
    with ThreadPoolExecutor(max_workers=len(names)) as pool:
        futures = {n: pool.submit(fleet.run, fleet.ssh_argv(n, command), timeout=30) for n in names}
    return {n: f.result() for n, f in futures.items()}


def _sshd_pids(config: Path) -> set[int]:
    out = subprocess.run(["pgrep", "-f", str(config)], capture_output=True, text=True).stdout
    return {int(p) for p in out.split()}


def test_openssh_reaches_every_healthy_host_with_profile_path(fleet: Fleet) -> None:
    healthy = [n for n, h in fleet.hosts.items() if h.fault is None]
    results = _ssh_all(fleet, healthy, 'echo "$PATH"; command -v nvidia-smi || echo none')
    for name, r in results.items():
        assert r.returncode == 0, f"{name}: ssh failed: {r.stderr}"
        path, smi = r.stdout.split("\n")[:2]
        assert path.split(":")[0] == PROFILE_BIN_TARGET, f"{name}: session PATH is {path}"
        profile = fleet.profiles_dir / str(fleet.hosts[name].profile)
        expect_smi = (profile / "bin/nvidia-smi").exists()
        found = smi == f"{PROFILE_BIN_TARGET}/nvidia-smi"
        assert found == expect_smi, f"{name}: nvidia-smi at {smi}"


def test_profile_proc_driver_is_per_host(fleet: Fleet) -> None:
    healthy = [n for n, h in fleet.hosts.items() if h.fault is None]
    results = _ssh_all(fleet, healthy, "cat /proc/driver/nvidia/version 2>/dev/null || echo absent")
    for name, r in results.items():
        src = fleet.profiles_dir / str(fleet.hosts[name].profile) / "proc_driver_nvidia" / "version"
        want = src.read_text() if src.exists() else "absent\n"
        assert r.stdout == want, f"{name}: /proc/driver/nvidia/version differs from {src}"
    # The mounts stay inside each daemon's namespace.
    assert not Path(PROFILE_BIN_TARGET, "nvidia-smi").exists()


def test_openssh_fault_hosts_fail_each_their_own_way(fleet: Fleet) -> None:
    want = {
        "down": "Connection refused",
        "badkey": "REMOTE HOST IDENTIFICATION HAS CHANGED",
        "noauth": "Permission denied (publickey)",
        "noresolve": "Could not resolve hostname",
    }
    results = _ssh_all(fleet, list(want), "true")
    for name, text in want.items():
        assert results[name].returncode == 255, f"{name}: {results[name]}"
        assert text in results[name].stderr, f"{name}: {results[name].stderr}"
    served = fleet.hosts["badkey"].fingerprint
    assert served in results["badkey"].stderr, "ssh reports the key the badkey host really serves"


def test_ansible_ping_reads_the_inventory_like_the_fixture_says(fleet: Fleet) -> None:
    # One host per reachable group and every fault host: pinging all 20+ costs ~12 s on 2 cores.
    names = ["h200x2-1", "cpu-1", *FAULTS]
    argv = ["ansible", "all", "-i", str(fleet.inventory), "-l", ",".join(names), "-m", "ping"]
    r = fleet.run([*argv, "-o", "-f", "8"], timeout=300)
    status = dict(re.findall(r"^(\S+) \| (SUCCESS|UNREACHABLE!|FAILED!)", r.stdout, re.M))
    assert set(status) == set(names), r.stdout + r.stderr
    for name in names:
        want = "UNREACHABLE!" if fleet.hosts[name].fault else "SUCCESS"
        assert status[name] == want, f"{name}: {status[name]}"


def test_controller_env_is_isolated(fleet: Fleet) -> None:
    assert Path(fleet.env["HOME"]).is_relative_to(fleet.root)
    assert not any(k.startswith("SSH_") for k in fleet.env)
    kh = fleet.known_hosts.read_text()
    assert all(h.host_key_pub in kh for h in fleet.hosts.values() if h.fault in (None, "noauth"))
    assert fleet.hosts["badkey"].host_key_pub not in kh


def test_make_fleet_stops_every_sshd_and_session(tmp_path: Path) -> None:
    hosts: list[tuple[str, str | None]] = [("p1", None), ("p2", None)]
    with pytest.raises(RuntimeError, match="boom"), make_fleet(tmp_path, hosts) as f:
        configs = [h.config for h in f.hosts.values()]
        pids = {h.pid for h in f.hosts.values()}
        assert set().union(*(_sshd_pids(c) for c in configs)) >= pids
        # A session that would outlive its listener unless the fixture kills it too.
        sleeper = subprocess.Popen(f.ssh_argv("p1", "sleep 300"), env=f.env)
        deadline = time.monotonic() + 10
        while not _session_pids(f.hosts["p1"].pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        sessions = _session_pids(f.hosts["p1"].pid)
        assert sessions, "ssh session to p1 never started"
        raise RuntimeError("boom")
    sleeper.wait(timeout=10)
    for c in configs:
        assert _sshd_pids(c) == set(), f"sshd still running for {c}"
    for pid in pids | set(sessions):
        assert not _alive(pid), f"pid {pid} survived the fleet"


def _alive(pid: int) -> bool:
    """A zombie is dead: whoever inherits it (PID 1 here) reaps it in its own time."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _session_pids(listener: int | None) -> list[int]:
    return descendants(listener) if listener else []


def test_stop_and_start_one_host(tmp_path: Path) -> None:
    with make_fleet(tmp_path, [("p1", None), ("p2", None)]) as f:
        f.stop("p1")
        assert f.hosts["p1"].pid is None
        down = f.run(f.ssh_argv("p1", "true"), timeout=30)
        assert "Connection refused" in down.stderr
        assert f.run(f.ssh_argv("p2", "true"), timeout=30).returncode == 0
        f.start("p1")
        back = f.run(f.ssh_argv("p1", "true"), timeout=30)
        assert back.returncode == 0, "restarted host keeps its host key and authorized key"
