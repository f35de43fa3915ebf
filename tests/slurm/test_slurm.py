"""gpufleet inside a real Slurm cluster: HealthCheckProgram drains and resumes, the circuit
breaker, the multinode smoke test under salloc, and issue 26's break-fix loop: the remediation
playbooks run from the controller over SSH against the drained node, its re-test resumes it, and
a node whose GPU keeps asking for a reboot ends held for RMA with its evidence bundle.

One cluster for the module (slurmlib): node1-4 (partition gpu) simulate 2xH200 hosts, cpu1-2
(partition cpu) hosts without NVIDIA GPUs. Every node runs its own sshd in its namespaces (its
address, port 22, its own host key in the lab's known_hosts); node4 is rebootable: each boot new
namespaces with a new boot id, a fresh driver state, slurmd and sshd, as a real node's init
starts them. The role gpufleet_healthcheck installs the health check (real ansible-playbook,
connection local, paths inside the cluster's directory) with a 50 % breaker, and renders node4's
own with a node-local run store (host vars), which the RMA test shows to node4 alone: the
escalation over boots needs saved runs. Each slurmd runs the check every few seconds inside its
node's namespaces, so a fault is injected by swapping that node's host profile under the running
slurmd.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import slurmlib
import yaml

from harness.sshhost import client_argv, public_key
from paths import COLLECTION

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
INTERVAL = 4  # HealthCheckInterval, seconds
HOSTS = [*((f"node{i}", "h200x2", "gpu") for i in range(1, 5)),
         ("cpu1", "no-nvidia-smi", "cpu"), ("cpu2", "no-nvidia-smi", "cpu")]
FAULT = "ecc-remap"  # GF402/GF403/GF404 errors on GPU 1
GPU_NODES = ("node1", "node2", "node3", "node4")
REBOOTABLE = "node4"
REMEDIATED, REMEDIATION_LIMIT = "node3", 2  # GF435's node and its gpufleet_remediation_limit
# The one point a reboot is replaced (tests/fleet/test_remediate.py says why): shutdown's
# stand-in takes the node's boot down for real; the rung's timeout is under play()'s 300 s, so
# Ansible says why it waited.
SIM_REBOOT = ("-e", "remediate_reboot_command=/usr/local/sbin/gpufleet-sim-reboot",
              "-e", "remediate_reboot_timeout=180")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[slurmlib.Cluster]:
    root = tmp_path_factory.mktemp("slurm")
    c = slurmlib.prepare(root, HOSTS, ssh=True, rebootable=[REBOOTABLE])
    extra = {
        "gpufleet_healthcheck_command": str(VENV_BIN / "gpufleet"),
        "gpufleet_healthcheck_config_dir": str(root / "etc"),
        "gpufleet_healthcheck_program": str(root / "libexec" / "gpufleet-healthcheck"),
        "gpufleet_healthcheck_report_dir": str(root / "reports"),
        # No node-local store (but REBOOTABLE's own, below): each run is judged on its own log,
        # so the faults injected one after another never escalate over runs, and no check pays
        # for reading a store that grows all module long (1.3 CPU-s a run at 80 runs).
        "gpufleet_healthcheck_history_dir": "",
        "gpufleet_healthcheck_counters_file": "",
        "gpufleet_healthcheck_slurm_conf": str(c.conf),
        # The role removes this file where deep checks are not scheduled: not the machine's own.
        "gpufleet_healthcheck_deepcheck_cron_file": str(root / "cron.d" / "gpufleet-deepcheck"),
        "gpufleet_healthcheck_breaker_share": 0.5,
        "gpufleet_healthcheck_interval": INTERVAL,
        "gpufleet_mig_expected": False,  # one expectation every node meets, rendered by the role
    }
    # REBOOTABLE's own health check with a node-local run store (its host vars, rendered as a
    # role run per node would; the RMA test shows it to that node alone, _own_health_check).
    own = root / "node-local" / REBOOTABLE
    node_local = {"gpufleet_healthcheck_program": str(own / "gpufleet-healthcheck"),
                  "gpufleet_healthcheck_history_dir": str(own / "history"),
                  "gpufleet_healthcheck_slurm_conf_manage": False,
                  "gpufleet_healthcheck_trial_run": False}
    # REMEDIATED's own too: a node-local store and gpufleet_remediation_limit 2 in its own
    # expectations file (config dir), for the test of GF435.
    own = root / "node-local" / REMEDIATED
    remediated = {"gpufleet_healthcheck_program": str(own / "gpufleet-healthcheck"),
                  "gpufleet_healthcheck_config_dir": str(own / "etc"),
                  "gpufleet_healthcheck_history_dir": str(own / "history"),
                  "gpufleet_healthcheck_slurm_conf_manage": False,
                  "gpufleet_healthcheck_trial_run": False,
                  "gpufleet_remediation_limit": REMEDIATION_LIMIT}
    (root / "role-inventory.yml").write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_connection": "local", **extra},
        "hosts": {"localhost": {}, REBOOTABLE: node_local, REMEDIATED: remediated}}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               PATH=f"{VENV_BIN}:{env.get('PATH', '')}")
    play = subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), "-i", str(root / "role-inventory.yml"),
         str(REPO / "tests/slurm/playbooks/healthcheck.yml")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=180, check=False)
    assert play.returncode == 0, play.stdout[-4000:] + play.stderr[-2000:]
    with slurmlib.running(c):
        yield c


def _report(c: slurmlib.Cluster, node: str) -> tuple[float, dict[str, Any]] | None:
    path = c.root / "reports" / f"node-check-{node}.json"
    try:
        return path.stat().st_mtime, json.loads(path.read_text())
    except (OSError, ValueError):
        return None


# Generous: on an oversubscribed machine one health check can take tens of seconds.
def _until(what: str, ok: Callable[[], bool], c: slurmlib.Cluster, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout} s; sinfo: {c.states()}\n{c.log('ctl', 15)}")
        time.sleep(0.3)


def _runs_after(c: slurmlib.Cluster, node: str, since: float, count: int = 1) -> None:
    """Wait until `node`'s health check has written its report `count` times after `since`."""
    seen: list[float] = []

    def ok() -> bool:
        r = _report(c, node)
        if r is not None and r[0] > since and r[0] not in seen:
            seen.append(r[0])
        return len(seen) >= count

    _until(f"{count} health check run(s) of {node}", ok, c, timeout=INTERVAL * (count + 1) + 90)


def _latest(c: slurmlib.Cluster, node: str) -> dict[str, Any]:
    """The node's latest report. The wrapper removes it when a run starts (a report is never a
    stale one), so while a check runs there is none: wait for that run's."""
    found: list[dict[str, Any]] = []

    def written() -> bool:
        r = _report(c, node)
        found[:] = [r[1]] if r else []
        return bool(found)

    _until(f"a report of {node}", written, c, timeout=90)
    return found[0]


def _rules(c: slurmlib.Cluster, node: str) -> set[str]:
    return {f["rule"] for f in _latest(c, node)["findings"]}


def _findings(c: slurmlib.Cluster, node: str, rule: str) -> list[dict[str, Any]]:
    return [f for f in _latest(c, node)["findings"] if f["rule"] == rule]


def _ours(c: slurmlib.Cluster) -> list[str]:
    return sorted(n for n, (state, reason) in c.states().items()
                  if "drain" in state and reason.startswith("gpufleet:"))


def test_role_puts_the_health_check_into_slurm_conf(cluster: slurmlib.Cluster) -> None:
    conf = cluster.conf.read_text()
    program = cluster.root / "libexec" / "gpufleet-healthcheck"
    assert f"HealthCheckProgram={program}\n" in conf
    assert f"HealthCheckInterval={INTERVAL}\n" in conf
    expect = yaml.safe_load((cluster.root / "etc" / "expect.yml").read_text())
    assert expect == {"gpufleet_mig_expected": False}
    # Only REBOOTABLE's own program (its host vars) saves its runs, into its node-local store.
    assert "--history" not in program.read_text()
    own = (cluster.root / "node-local" / REBOOTABLE / "gpufleet-healthcheck").read_text()
    assert f"--history {cluster.root / 'node-local' / REBOOTABLE / 'history'} " in own, own


def test_nodes_answer_over_ssh_with_their_own_host_keys(cluster: slurmlib.Cluster) -> None:
    """Each node's sshd serves that node's namespaces (hostname, simulated GPUs, a rebootable
    node's boot id) under its own host key: known_hosts holding another node's key for the
    address is refused as OpenSSH refuses a changed key."""
    boot_ids = {}
    for node in ("node1", REBOOTABLE):
        res = cluster.ssh(node, "hostname; nvidia-smi -L | wc -l; "
                                "cat /proc/sys/kernel/random/boot_id")
        assert res.returncode == 0, res.stderr
        name, gpus, boot_ids[node] = res.stdout.split()
        assert (name, gpus) == (node, "2")
    this_boot = cluster.root / "boots" / REBOOTABLE / f"boot_id.{cluster.boots(REBOOTABLE)}"
    assert boot_ids[REBOOTABLE] == this_boot.read_text().strip()
    assert boot_ids["node1"] != boot_ids[REBOOTABLE]
    ssh = cluster.root / "ssh"
    wrong = ssh / "known_hosts.wrong"
    wrong.write_text(f"{cluster.nodes['node1'].address} {public_key(ssh / 'host-node2')}\n")
    res = subprocess.run(client_argv(cluster.nodes["node1"].address, ssh / "client", wrong, "true"),
                         capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 255 and "Host key verification failed" in res.stderr, res.stderr


def test_slurmd_runs_the_check_against_its_own_hosts_gpus(cluster: slurmlib.Cluster) -> None:
    t = time.time()
    for node in ("node1", "cpu1"):
        _runs_after(cluster, node, t)
    gpu, cpu = _latest(cluster, "node1"), _latest(cluster, "cpu1")
    # The name came from SLURMD_NODENAME; the GPUs from the profile mounted in that namespace.
    assert list(gpu["hosts"]) == ["node1"] and list(cpu["hosts"]) == ["cpu1"]
    assert [g["name"] for g in gpu["hosts"]["node1"]["facts"]["gpus"]] == ["NVIDIA H200"] * 2
    assert cpu["hosts"]["cpu1"]["facts"]["gpus"] == []
    assert gpu["summary"]["findings"]["error"] == 0
    assert _ours(cluster) == []


def test_smoke_slurm_under_salloc(cluster: slurmlib.Cluster) -> None:
    expect = cluster.root / "smoke-expect.yml"
    expect.write_text(yaml.safe_dump({"gpufleet_smoke_runtime": "host",
                                      "gpufleet_smoke_python": sys.executable}))
    t = time.monotonic()
    proc = cluster.run(["salloc", "-p", "cpu", "-N2", "--immediate=30", str(VENV_BIN / "gpufleet"),
                        "smoke", "--slurm", "--expect", str(expect), "--format", "json"],
                       timeout=240)
    took = time.monotonic() - t
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        pytest.fail(f"no JSON (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    assert sorted(report["hosts"]) == ["cpu1", "cpu2"]
    for name in ("cpu1", "cpu2"):
        smoke = report["hosts"][name]["smoke"]
        failed = [c for c in smoke["checks"] if not c["passed"]]
        assert smoke["status"] == "pass", (smoke["error"], failed, smoke["log_tail"])
        assert smoke["backend"] == "gloo" and smoke["world_size"] == 4
        assert smoke["hosts"] == ["cpu1", "cpu2"]
        assert sorted({r["host"] for r in smoke["ranks"]}) == ["cpu1", "cpu2"]
        assert {"versions", "device_count", "matmul", "allreduce_exact", "ddp", "busbw"} <= {
            c["name"] for c in smoke["checks"]}
        assert report["hosts"][name]["facts"]["gpus"] == []  # facts came through srun too
    assert proc.returncode == 0, proc.stderr[-2000:]
    print(f"smoke --slurm under salloc -N2: {took:.1f} s")


def test_smoke_slurm_outside_an_allocation_is_a_usage_error(cluster: slurmlib.Cluster) -> None:
    proc = cluster.run([str(VENV_BIN / "gpufleet"), "smoke", "--slurm"])
    assert proc.returncode == 2
    assert "needs a Slurm allocation" in proc.stderr


def test_fault_drains_with_rule_id_then_resumes(cluster: slurmlib.Cluster) -> None:
    cluster.set_profile("node1", FAULT)
    try:
        _until("node1 drained by gpufleet",
               lambda: cluster.states()["node1"][1].startswith("gpufleet: GF40"), cluster)
        state, reason = cluster.states()["node1"]
        assert "drain" in state
        assert reason.startswith("gpufleet: GF402 node1 GPU 1: 2 uncorrected ECC errors"), reason
        assert "(+2 more)" in reason  # GF403 and GF404 too
        _runs_after(cluster, "node1", time.time())
        assert "GF902" in _rules(cluster, "node1")
    finally:
        cluster.set_profile("node1", "h200x2")
    _until("node1 resumed", lambda: cluster.states()["node1"] == ("idle", "none"), cluster)


def test_admin_drain_is_never_resumed_or_relabelled(cluster: slurmlib.Cluster) -> None:
    reason = "maintenance: PSU swap"
    res = cluster.run(["scontrol", "update", "NodeName=node2", "State=DRAIN", f"Reason={reason}"])
    assert res.returncode == 0, res.stderr
    try:
        t = time.time()
        _runs_after(cluster, "node2", t, count=2)  # healthy: two chances to (wrongly) resume
        assert cluster.states()["node2"][1] == reason
        assert "GF904" in _rules(cluster, "node2")
        cluster.set_profile("node2", FAULT)  # faulty now: still not relabelled
        _runs_after(cluster, "node2", time.time(), count=2)
        state, got = cluster.states()["node2"]
        assert "drain" in state and got == reason
        assert {"GF402", "GF904"} <= _rules(cluster, "node2")
    finally:
        cluster.set_profile("node2", "h200x2")
        cluster.run(["scontrol", "update", "NodeName=node2", "State=RESUME"])
    _until("node2 idle", lambda: cluster.states()["node2"] == ("idle", "none"), cluster)


def test_breaker_drains_at_most_half_of_the_partition(cluster: slurmlib.Cluster) -> None:
    faulty = ("node1", "node2", "node3")
    for node in faulty:
        cluster.set_profile(node, FAULT)
    most, seen = 0, []
    try:
        def two_drained() -> bool:
            nonlocal most
            ours = _ours(cluster)
            if len(ours) > most:
                seen.append((time.time(), ours))
            most = max(most, len(ours))
            return len(ours) == 2

        _until("two of three faulty nodes drained", two_drained, cluster)
        drained = _ours(cluster)
        (spared,) = set(faulty) - set(drained)
        t = time.time()
        # Several more rounds of all three checks: the count never exceeds the limit.
        for _ in range(2):
            _runs_after(cluster, spared, t)
            t = time.time()
            now = _ours(cluster)
            if len(now) > most:
                seen.append((t, now))
            most = max(most, len(now))
        if most > 2:
            why = {n: [(f["rule"], f["message"]) for f in (_report(cluster, n) or (0, {
                "findings": []}))[1]["findings"] if f["rule"].startswith("GF9")] for n in faulty}
            pytest.fail(f"{most} drained at once: {seen}; last GF9xx: {why}")
        assert _ours(cluster) == drained
        tripped = _findings(cluster, spared, "GF901")
        assert tripped, _latest(cluster, spared)["findings"]
        assert "circuit breaker tripped" in tripped[0]["message"]
        assert sorted(tripped[0]["evidence"]["budget"]["gpu"]["drained"]) == drained
        assert tripped[0]["evidence"]["budget"]["gpu"]["limit"] == 2
        assert "node4" not in drained
        # Every claim was cleared again (the node Comment is back to what it was: empty).
        comments = cluster.run(["sinfo", "-h", "-N", "-O", "NodeList:|,Comment:"]).stdout
        assert "gpufleet-claim" not in comments, comments
    finally:
        for node in faulty:
            cluster.set_profile(node, "h200x2")
    _until("all resumed", lambda: all(cluster.states()[n] == ("idle", "none")
                                      for n in GPU_NODES), cluster)


def test_a_gpu_that_fell_off_the_bus_days_ago_still_drains(cluster: slurmlib.Cluster) -> None:
    """Issue 26's node: Xid 79 two days old in this boot's kernel log, 7 of 8 GPUs enumerated,
    no expected count. It passed and stayed in service before: the Xid was "outside the 24 h
    window". Now the lasting Xid is current and the node tells the lost GPU from its PCI bus."""
    cluster.set_profile("node3", "xid79-lost")
    try:
        _until("node3 drained by gpufleet",
               lambda: cluster.states()["node3"][1].startswith("gpufleet: GF4"), cluster)
        state, reason = cluster.states()["node3"]
        assert "drain" in state
        assert reason.startswith("gpufleet: GF405 node3: Xid 79 on 00000000:AB:00.0"), reason
        _runs_after(cluster, "node3", time.time())
        by_rule = {f["rule"]: f for f in _latest(cluster, "node3")["findings"]}
        xid = by_rule["GF405"]["evidence"]
        assert xid["lasting"] and not xid["recent"] and xid["this_boot"]
        assert xid["decided_by"] == "NVIDIA Xid catalog" and xid["bucket"] == "RESTART_BM"
        assert "analyzing-xid-catalog" in xid["source"]
        lost = by_rule["GF421"]["evidence"]
        assert (lost["pci"], lost["enumerated"], lost["missing"]) == (8, 7, ["0000:ab:00.0"])
        assert lost["xids"] == {"0000:ab:00.0": [79]}
    finally:
        cluster.set_profile("node3", "h200x2")
    _until("node3 resumed", lambda: cluster.states()["node3"] == ("idle", "none"), cluster)


def test_breaker_keeps_an_admins_comment_written_while_it_claims(
        cluster: slurmlib.Cluster) -> None:
    """Security review F23: an admin's Comment written during the breaker's claim window (the
    settle time before a drain) survives; only the claim token is taken out."""
    def comment() -> str:
        out = cluster.run(["sinfo", "-h", "-N", "-n", "node4", "-O", "NodeList:|,Comment:"])
        return out.stdout.split("|", 1)[-1].strip()

    cluster.set_profile("node4", FAULT)
    try:
        _until("node4 claims before draining", lambda: "gpufleet-claim:" in comment(), cluster)
        claim = comment()
        res = cluster.run(["scontrol", "update", "NodeName=node4",
                           f"Comment=RMA ticket 4711 {claim}"])
        assert res.returncode == 0, res.stderr
        _until("node4 drained by gpufleet",
               lambda: cluster.states()["node4"][1].startswith("gpufleet: GF402"), cluster)
        _until("node4's claim cleared", lambda: "gpufleet-claim" not in comment(), cluster)
        assert comment() == "RMA ticket 4711"
    finally:
        cluster.set_profile("node4", "h200x2")
        cluster.run(["scontrol", "update", "NodeName=node4", "Comment="])
    _until("node4 resumed", lambda: cluster.states()["node4"] == ("idle", "none"), cluster)


def test_drain_reason_is_redacted_like_the_report(cluster: slurmlib.Cluster) -> None:
    """Security review F11: a secret in the worst finding's message (here host output in an
    Xid line) never becomes the node's Reason, which every cluster user can read."""
    cluster.set_profile("node2", "xid-leaky")
    try:
        _until("node2 drained by gpufleet",
               lambda: cluster.states()["node2"][1].startswith("gpufleet: GF4"), cluster)
        reason = cluster.states()["node2"][1]
        assert "Zx9-s3cr3t" not in reason and "hf_abcdefghijklmnop" not in reason, reason
        assert "https://***@" in reason and "HF_TOKEN=***" in reason, reason
        shown = cluster.run(["scontrol", "show", "node", "node2"]).stdout
        assert "Zx9-s3cr3t" not in shown
    finally:
        cluster.set_profile("node2", "h200x2")
    _until("node2 resumed", lambda: cluster.states()["node2"] == ("idle", "none"), cluster)


def _remediate(c: slurmlib.Cluster, node: str, *extra: str,
               playbook: str = "remediate_gpu_reset.yml") -> subprocess.CompletedProcess[str]:
    """A remediation rung (default: the reset) from the controller over SSH against `node`, with
    the Slurm gate: the node must be one gpufleet drained."""
    return c.play(node, COLLECTION / "playbooks" / playbook, "-e", f"remediate_slurm_node={node}",
                  "-e", f"remediate_slurm_conf={c.conf}", *extra)


# Each rung and its first task that changes something.
RUNGS = {"remediate_gpu_reset.yml": "TASK [Reset the GPU]",
         "remediate_reboot.yml": "TASK [Reboot the node]",
         "remediate_reinstall.yml": "TASK [Reinstall the driver"}


def _refused(c: slurmlib.Cluster, node: str, reason: str) -> None:
    """Every rung refuses `node` (drained with `reason`, not gpufleet's to remediate) at its
    Slurm gate, before its first change, and leaves the reason as it is. The three run at once
    (an ansible-playbook run is seconds of CPU on a loaded 2-core machine); a gate that let one
    through fails the test whatever the others did."""
    with ThreadPoolExecutor(len(RUNGS)) as pool:
        plays = dict(zip(RUNGS, pool.map(
            lambda rung: _remediate(c, node, "-e", "remediate_gpu=0", *SIM_REBOOT,
                                    playbook=rung), RUNGS), strict=True))
    for rung, play in plays.items():
        flat = " ".join(play.stdout.split())  # the callback wraps long messages
        assert play.returncode != 0 and f"{node} is drained ({reason}" in flat, \
            f"{rung}: " + _why(c, node, play)
        assert RUNGS[rung] not in play.stdout, f"{rung}: {play.stdout[-2000:]}"
        assert "TASK [Record the remediation" not in play.stdout, f"{rung}: {play.stdout[-2000:]}"
    assert c.states()[node][1].startswith(reason)


def _why(c: slurmlib.Cluster, node: str, play: subprocess.CompletedProcess[str]) -> str:
    """What a failed step shows: the play's tail, sinfo, the node's slurmd log and boots."""
    return (f"rc {play.returncode}\n{play.stdout[-3000:]}\nsinfo: {c.states()}\n"
            f"--- slurmd {node}\n{c.log(node, 15)}\n--- boots of {node}: {c.boots(node)}\n"
            f"{c.boot_log(node, 10)}")


def _lifecycle(c: slurmlib.Cluster, node: str, seen: set[str]) -> None:
    """Add the GF90x transitions of `node`'s latest report to `seen` ("GF903 a->b")."""
    r = _report(c, node)
    for f in (r[1]["findings"] if r else []):
        if f["rule"].startswith("GF90"):
            life = f["evidence"]["lifecycle"]
            seen.add(f"{f['rule']} {life['from']}->{life['to']}")


def _resumed_after_retest(c: slurmlib.Cluster, node: str) -> set[str]:
    seen: set[str] = set()

    def resumed() -> bool:
        _lifecycle(c, node, seen)
        return c.states()[node] == ("idle", "none")

    _until(f"{node} resumed after its re-test", resumed, c)
    return seen


def test_break_fix_loop_drain_reset_retest_resume(cluster: slurmlib.Cluster) -> None:
    """suspect -> drained -> remediating -> re-validating -> resumed: the driver asks for a
    reset of GPU 1 (Xid 94), the reset rung (over SSH) resets that GPU only, the next health
    check re-tests the node and resumes it. Every step is in the reports' GF90x evidence."""
    cluster.set_profile("node3", "recovery-reset")
    try:
        _until("node3 drained for the reset",
               lambda: cluster.states()["node3"][1].startswith("gpufleet: GF405"), cluster)
        assert "Xid 94" in cluster.states()["node3"][1]
        play = _remediate(cluster, "node3", "-e", "remediate_gpu=1")
        assert play.returncode == 0, _why(cluster, "node3", play)
        assert "GPU 1 reset; recovery action None" in play.stdout
        seen = _resumed_after_retest(cluster, "node3")
        assert "GF903 re-validating->in service" in seen, seen
    finally:
        cluster.set_profile("node3", "h200x2")
        cluster.run(["scontrol", "update", "NodeName=node3", "State=RESUME"])
    _until("node3 idle", lambda: cluster.states()["node3"] == ("idle", "none"), cluster)


def test_remediation_refuses_an_admins_drain(cluster: slurmlib.Cluster) -> None:
    reason = "maintenance: PSU swap"
    cluster.set_profile("node2", "recovery-reset")
    res = cluster.run(["scontrol", "update", "NodeName=node2", "State=DRAIN", f"Reason={reason}"])
    assert res.returncode == 0, res.stderr
    try:
        _refused(cluster, "node2", reason)
        assert cluster.states()["node2"][1] == reason
    finally:
        cluster.set_profile("node2", "h200x2")
        cluster.run(["scontrol", "update", "NodeName=node2", "State=RESUME"])
    _until("node2 idle", lambda: cluster.states()["node2"] == ("idle", "none"), cluster)


def _boot_id(c: slurmlib.Cluster, node: str) -> str:
    res = c.ssh(node, "cat /proc/sys/kernel/random/boot_id")
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def test_reboot_rung_reboots_the_node_and_the_retest_resumes_it(
        cluster: slurmlib.Cluster) -> None:
    """Profile recovery-reboot (the driver asks for a node reboot): drained by the health
    check, rebooted by remediate_reboot.yml over SSH. The node really goes down (its sshd and
    slurmd die with the boot) and comes back as a new boot whose slurmd registers again; the
    play sees a new boot id and no recovery action left; the re-test resumes the node."""
    node = REBOOTABLE
    cluster.set_profile(node, "recovery-reboot")
    try:
        _until(f"{node} drained for the reboot",
               lambda: cluster.states()[node][1].startswith("gpufleet: GF405"), cluster)
        boots, boot_id, started = cluster.boots(node), _boot_id(cluster, node), \
            cluster.slurmd_started(node)
        play = _remediate(cluster, node, *SIM_REBOOT, playbook="remediate_reboot.yml")
        assert play.returncode == 0, _why(cluster, node, play)
        assert "rebooted; 2 GPU(s), recovery action None" in play.stdout
        assert cluster.boots(node) == boots + 1 and _boot_id(cluster, node) != boot_id
        _until(f"{node}'s slurmd registered from the new boot",
               lambda: cluster.slurmd_started(node) not in ("", started), cluster)
        seen = _resumed_after_retest(cluster, node)
        assert "GF903 re-validating->in service" in seen, seen
    finally:
        cluster.set_profile(node, "h200x2")
        cluster.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"])
    _until(f"{node} idle", lambda: cluster.states()[node] == ("idle", "none"), cluster)


def _own_health_check(c: slurmlib.Cluster, node: str, on: bool) -> None:
    """The node's own rendering of the health check (fixture: its host vars, a node-local run
    store) at the path slurm.conf names, on the node alone, or the shared one again. Only for
    the test that needs the store: a node-check over a growing store costs more every run."""
    c.node_file(node, c.root / "libexec" / "gpufleet-healthcheck",
                c.root / "node-local" / node / "gpufleet-healthcheck" if on else None)


def test_a_gpu_that_asks_again_after_two_reboots_ends_held_for_rma(
        cluster: slurmlib.Cluster, tmp_path: Path) -> None:
    """Profile reboot-again: the GPU asks for a reboot in every boot. drained -> reboot (the
    rung fails, naming the next rung) -> the re-test drains again -> reboot -> the third boot
    that asks is past gpud's limit of 2 reboots: GF432, counted by boot id over the node's own
    saved runs, holds the node as `gpufleet: RMA GF432 …`. collect_bug_report.yml writes its
    bundle over SSH; every rung refuses the hold, and gpufleet never resumes the node, not even
    once nothing is left to find."""
    node = REBOOTABLE
    store = cluster.root / "node-local" / node / "history"
    _own_health_check(cluster, node, True)
    cluster.set_profile(node, "reboot-again")
    try:
        boot_ids = []
        for n in (1, 2):
            _until(f"{node} drained (by a finding) before reboot {n}",
                   lambda: cluster.states()[node][1].startswith("gpufleet: GF4"), cluster)
            boot_ids.append(_boot_id(cluster, node))
            play = _remediate(cluster, node, *SIM_REBOOT, playbook="remediate_reboot.yml")
            flat = " ".join(play.stdout.split())  # the callback wraps long messages
            assert play.returncode != 0 and "TASK [Reboot the node]" in play.stdout, \
                _why(cluster, node, play)
            assert "recovery actions Reboot, None: next rung, the driver/fabric manager " \
                   "reinstall (playbooks/remediate_reinstall.yml" in flat, flat[-3000:]
        boot_ids.append(_boot_id(cluster, node))
        _until(f"{node} held for RMA",
               lambda: cluster.states()[node][1].startswith("gpufleet: RMA GF432"), cluster)
        (rma,) = _findings(cluster, node, "GF432")
        assert rma["evidence"]["count"] == 3, rma
        assert sorted(rma["evidence"]["boot_ids"]) == sorted(boot_ids), (rma, boot_ids)

        dest = tmp_path / "rma"
        play = cluster.play(node, COLLECTION / "playbooks" / "collect_bug_report.yml",
                            "-e", f"collect_bug_report_dest={dest}",
                            # the node-local store, on a disk the lab's controller can read
                            "-e", f"collect_bug_report_store={store}",
                            "-e", f"collect_bug_report_gpufleet={VENV_BIN / 'gpufleet'}")
        assert play.returncode == 0, _why(cluster, node, play)
        with tarfile.open(dest / node / f"rma-{node}.tar.gz") as tar:
            members = {m.name.split("/", 1)[1]: tar.extractfile(m).read()  # type: ignore[union-attr]
                       for m in tar.getmembers()}
        manifest = json.loads(members.pop("manifest.json"))
        assert (manifest["schema"], manifest["host"]) == ("gpufleet.rma-bundle/v1", node)
        assert {n: f["sha256"] for n, f in manifest["files"].items()} == {
            n: hashlib.sha256(b).hexdigest() for n, b in members.items()}
        assert {"identity.json", "xid-timeline.json", "findings.json",
                "nvidia-bug-report.log.gz"} <= set(members)
        assert "GF432" in {f["rule"] for f in json.loads(members["findings.json"])}
        assert len([e for e in json.loads(members["xid-timeline.json"]) if e["xid"] == 31]) == 3

        # Nothing left to find (a healthy GPU, its saved runs removed as an admin may): no
        # finding keeps the node out any more, only the hold does. The rungs refuse it while
        # the health check runs on.
        cluster.set_profile(node, "h200x2")
        for saved in [*store.glob("gpufleet-*.json"), store / "index.json"]:
            saved.unlink(missing_ok=True)
        t = time.time()
        _refused(cluster, node, "gpufleet: RMA GF432")
        _runs_after(cluster, node, t, count=2)
        state, reason = cluster.states()[node]
        assert "drain" in state and reason.startswith("gpufleet: RMA GF432"), reason
        assert not {"GF431", "GF432", "GF405"} & _rules(cluster, node), _rules(cluster, node)
        held = _findings(cluster, node, "GF906")
        assert [f["evidence"]["lifecycle"] for f in held] == [{"from": "rma", "to": "rma"}]
    finally:
        cluster.set_profile(node, "h200x2")
        _own_health_check(cluster, node, False)
        cluster.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"])
    _until(f"{node} idle", lambda: cluster.states()[node] == ("idle", "none"), cluster)


def test_a_node_that_keeps_coming_back_from_remediations_ends_held_for_rma(
        cluster: slurmlib.Cluster) -> None:
    """GF435 in the lab: the same node needs the reset rung again and again. Each time the
    driver asks for a reset (profile recovery-reset), the health check drains the node, the
    reset rung runs over SSH, the re-test resumes it; with gpufleet_remediation_limit 2 in the
    node's own expectations, the second re-test within 7 days is one too many: the rungs do not
    hold, and the node is held as `gpufleet: RMA GF435`, counted over its own saved runs."""
    node = REMEDIATED
    store = cluster.root / "node-local" / node / "history"
    _own_health_check(cluster, node, True)
    try:
        for n in range(1, REMEDIATION_LIMIT + 1):
            cluster.set_profile(node, "recovery-reset")  # anew: the fault is back
            _until(f"{node} drained for reset {n}",
                   lambda: cluster.states()[node][1].startswith("gpufleet: GF405"), cluster)
            play = _remediate(cluster, node, "-e", "remediate_gpu=1")
            assert play.returncode == 0, _why(cluster, node, play)
            if n < REMEDIATION_LIMIT:
                seen = _resumed_after_retest(cluster, node)
                assert "GF903 re-validating->in service" in seen, seen
                cluster.set_profile(node, "h200x2")
        _until(f"{node} held for RMA",
               lambda: cluster.states()[node][1].startswith("gpufleet: RMA GF435"), cluster)
        (rma,) = _findings(cluster, node, "GF435")
        ev = rma["evidence"]
        assert (ev["count"], ev["limit"], ev["window_days"]) == (REMEDIATION_LIMIT,
                                                                 REMEDIATION_LIMIT, 7), rma
        assert "MultipleRemediations" in ev["source"], rma
        assert len(list(store.glob("gpufleet-*.json"))) >= REMEDIATION_LIMIT
        _refused(cluster, node, "gpufleet: RMA GF435")
    finally:
        cluster.set_profile(node, "h200x2")
        _own_health_check(cluster, node, False)
        cluster.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"])
    _until(f"{node} idle", lambda: cluster.states()[node] == ("idle", "none"), cluster)
