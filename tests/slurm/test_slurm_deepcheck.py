"""`gpufleet deepcheck` on a real Slurm cluster: a full check submitted to an idle node of the
scavenger partition is preempted by a real production job at once (requeued, the node goes to
the production job), runs again once the node is idle, and its save makes the node covered;
then a multinode check over both nodes, preempted and requeued whole the same way, covers both
at the multinode depth; last, the cron entry the role wrote from the inventory, run as cron
runs it, submits the check that is due.

Its own small cluster (slurmlib): dc1 and dc2, each in partition gpu (PriorityTier=10) and
scavenger (PriorityTier=0). The production partition is the line docs/slurm.md shows; the
scavenger partition and the preemption lines are written by the healthcheck role's
deep-check partition tasks, and must be the lines docs/slurm.md says to add.
Both are CPU nodes declared as such (gpufleet_expected_gpu_count: 0), so the full smoke test
runs its gloo ranks: the same job, script and save a GPU node gets.
"""

from __future__ import annotations

import json
import os
import pwd
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import slurmlib
import yaml

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

VENV_BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]
HOSTS = [("dc1", "no-nvidia-smi", "gpu"), ("dc2", "no-nvidia-smi", "gpu")]


def _documented_conf() -> tuple[list[str], str]:
    """The slurm.conf lines docs/slurm.md tells an admin to add ("How to turn it on"), with this
    cluster's nodes: (every line but the production partition's, that partition's line)."""
    doc = (REPO / "docs" / "slurm.md").read_text()
    block = doc.split("### How to turn it on", 1)[1].split("```ini\n", 1)[1].split("```", 1)[0]
    lines = [ln.replace("gpu[001-128]", "dc1,dc2") for ln in block.splitlines()
             if ln.strip() and not ln.startswith("#")]
    (gpu,) = [ln for ln in lines if ln.startswith("PartitionName=gpu ")]
    assert sum(ln.startswith("Partition") for ln in lines) == 2 and "dc1,dc2" in gpu, block
    return [ln for ln in lines if ln != gpu], gpu


def _inventory(c: slurmlib.Cluster) -> dict[str, Any]:
    """The lab's host vars for the role: the partition's nodes, and the deep-check schedule's
    goals as an admin sets them (issue 28: full weekly, multinode daily). The plan file's name
    has a space and an apostrophe: the cron line must quote it."""
    return {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "gpufleet_healthcheck_slurm_conf": str(c.conf),
        "gpufleet_healthcheck_deepcheck_nodes": "dc1,dc2",
        "gpufleet_healthcheck_deepcheck_schedule": True,
        "gpufleet_healthcheck_deepcheck_goal": "7d",
        "gpufleet_healthcheck_deepcheck_multinode_goal": "1d",
        "gpufleet_healthcheck_deepcheck_every": "15m",
        # dc2's multinode check ends a minute before the cron run: the default 6 h would hold it.
        "gpufleet_healthcheck_deepcheck_cooldown": "1s",
        "gpufleet_healthcheck_deepcheck_max_jobs": 2,
        "gpufleet_healthcheck_deepcheck_store": str(c.root / "store"),
        "gpufleet_healthcheck_deepcheck_log_dir": str(c.root / "joblogs"),
        "gpufleet_healthcheck_deepcheck_extra_args": ["--smoke-timeout", "240"],
        "gpufleet_healthcheck_deepcheck_cron_file": str(c.root / "cron.d" / "gpufleet-deepcheck"),
        "gpufleet_healthcheck_deepcheck_output": str(c.root / "deep check's plan.json"),
        "gpufleet_healthcheck_command": str(VENV_BIN / "gpufleet"),
        "gpufleet_healthcheck_config_dir": str(c.root),  # expect.yml, as on the nodes
    }


def _role_converges(c: slurmlib.Cluster) -> None:
    """The healthcheck role's deep-check tasks (issue 28), from the inventory, in one
    ansible-playbook run. The partition tasks write the scavenger partition and preemption lines
    into this cluster's slurm.conf, which holds only the production partition; run twice (the
    second changes nothing), and they refuse, on a copy, an admin's PreemptType=preempt/none,
    PreemptMode=OFF (in lower case: slurm.conf keys are case-insensitive) and own scavenger
    partition. Slurm then runs the whole test on what the role wrote. The schedule tasks write
    the cron entry (twice, the second changing nothing) and refuse a bad goal, an interval cron
    cannot keep and a % in a value; the test's last part runs the entry's line as cron would."""
    before = c.conf.read_text()
    conflicting = c.root / "conflicting-slurm.conf"
    admin = "PreemptType=preempt/none\npreemptmode=off\n"
    conflicting.write_text(before.replace("ClusterName=", admin + "ClusterName=", 1)
                           + "PartitionName=scavenger Nodes=dc1 State=UP\n")
    (c.root / "cron.d").mkdir()
    inventory = c.root / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": _inventory(c)}}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               PATH=f"{VENV_BIN}:{env.get('PATH', '')}")
    t0 = time.monotonic()
    play = subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), "-i", str(inventory),
         "-e", json.dumps({"deepcheck_conflicting_conf": str(conflicting)}),
         str(REPO / "tests/slurm/playbooks/deepcheck_role.yml")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=180, check=False)
    print(f"role: deep-check partition and schedule written, idempotent, refusals: "
          f"{time.monotonic() - t0:.1f} s")
    assert play.returncode == 0, play.stdout[-4000:] + play.stderr[-2000:]
    after = c.conf.read_text()
    assert after.startswith(before), "the role changed an admin's line"
    assert "PreemptType=preempt/none" in conflicting.read_text()
    assert conflicting.read_text().count("gpufleet deepcheck") == 0, "refused, yet written"
    documented, _ = _documented_conf()
    written = after[len(before):].splitlines()
    assert [ln for ln in written if not ln.startswith("#")] == documented, written


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[slurmlib.Cluster]:
    root = tmp_path_factory.mktemp("slurm-deepcheck")
    _, gpu = _documented_conf()
    c = slurmlib.prepare(root, HOSTS, partitions=[gpu])
    # The multinode check's batch script runs srun on dc1, whose name resolves to 127.0.0.121
    # in its namespace: under NoInAddrAny srun would listen there, while its messages leave
    # from 127.0.0.1 (every simulated node shares one loopback), and slurmd connects the
    # step's I/O back to that source address ("connect io: Connection refused", seen here).
    # On a real cluster a node's source address is its own. Here every daemon listens on any
    # address instead (Slurm's default); the slurmds keep their own ports, so they still part.
    conf = c.conf.read_text()
    assert "CommunicationParameters=NoInAddrAny\n" in conf
    c.conf.write_text(conf.replace("CommunicationParameters=NoInAddrAny\n", ""))
    _role_converges(c)
    (root / "expect.yml").write_text(yaml.safe_dump({
        "gpufleet_expected_gpu_count": 0, "gpufleet_smoke_runtime": "host",
        "gpufleet_smoke_python": sys.executable}))
    (root / "joblogs").mkdir()
    with slurmlib.running(c):
        yield c


def _deepcheck(c: slurmlib.Cluster, *args: str) -> tuple[int, dict[str, Any]]:
    proc = c.run([str(VENV_BIN / "gpufleet"), "deepcheck", "--store", str(c.root / "store"),
                  "--command", str(VENV_BIN / "gpufleet"), "--expect", str(c.root / "expect.yml"),
                  "--smoke-timeout", "240", "--log-dir", str(c.root / "joblogs"),
                  "--format", "json", *args])
    try:
        return proc.returncode, json.loads(proc.stdout)
    except ValueError:
        pytest.fail(f"no JSON (exit {proc.returncode}): {proc.stderr[-2000:]}")


def _job(c: slurmlib.Cluster, job: str) -> dict[str, str]:
    """scontrol show job, as key -> value (the fields this test reads have no spaces)."""
    out = c.run(["scontrol", "-o", "show", "job", job]).stdout
    return dict(f.split("=", 1) for f in out.split() if "=" in f)


def _until(what: str, ok: Callable[[], bool], c: slurmlib.Cluster, timeout: float) -> float:
    t0 = time.monotonic()
    while not ok():
        if time.monotonic() - t0 > timeout:
            pytest.fail(f"{what}: not within {timeout} s\n"
                        f"{c.run(['squeue', '-o', '%i %P %j %T %r %N']).stdout}\n"
                        f"{c.log('ctl', 20)}")
        time.sleep(0.2)
    return time.monotonic() - t0


def test_preempted_deep_check_is_requeued_and_later_covers_the_node(
        cluster: slurmlib.Cluster) -> None:
    t_start = time.monotonic()
    # dc2 is busy with a production job: deepcheck leaves it alone and picks dc1.
    busy = cluster.run(["sbatch", "--parsable", "-p", "gpu", "-w", "dc2", "--exclusive",
                        "-o", "/dev/null", "--wrap", "sleep 300"])
    assert busy.returncode == 0, busy.stderr
    busy_job = busy.stdout.strip()
    try:
        _until("dc2 allocated", lambda: _job(cluster, busy_job).get("JobState") == "RUNNING",
               cluster, 300)
        code, dry = _deepcheck(cluster, "--dry-run")
        assert code == 0 and dry["dry_run"] is True
        by_node = {ch["node"]: ch for ch in dry["choices"]}
        assert by_node["dc1"]["decision"] == "submit", by_node
        assert by_node["dc1"]["why"] == "never passed a full check"
        assert by_node["dc2"]["decision"] == "skip"
        assert by_node["dc2"]["why"].startswith("not idle (alloc"), by_node["dc2"]
        assert cluster.run(["squeue", "-h", "-n", "gpufleet-deepcheck"]).stdout == ""

        code, real = _deepcheck(cluster)
        assert code == 0, real
        (sub,) = [ch for ch in real["choices"] if ch["decision"] == "submit"]
        assert sub["node"] == "dc1" and sub["job"], real
        deep = sub["job"]
        info = _job(cluster, deep)
        assert info["Partition"] == "scavenger" and info["Requeue"] == "1", info
        assert info["Nice"] == "1000000" and info["OverSubscribe"] == "NO", info
        _until("the deep check running on dc1",
               lambda: _job(cluster, deep).get("JobState") == "RUNNING", cluster, 300)
        # Again while it runs: dc1 already has its job, nothing more is submitted.
        _, again = _deepcheck(cluster)
        assert [ch["decision"] for ch in again["choices"]] == ["skip", "skip"], again
        assert {ch["node"]: ch["job"] for ch in again["choices"]}["dc1"] == deep

        # A real job for dc1: it takes the node at once, the deep check goes back to the queue.
        time.sleep(2)  # the check is inside its smoke test by now
        prod = cluster.run(["sbatch", "--parsable", "-p", "gpu", "-w", "dc1", "-o",
                            "/dev/null", "--wrap", "sleep 3"])
        assert prod.returncode == 0, prod.stderr
        prod_job = prod.stdout.strip()
        took = _until("the production job running on dc1",
                      lambda: _job(cluster, prod_job).get("JobState") in ("RUNNING",
                                                                          "COMPLETED"),
                      cluster, 300)
        info = _job(cluster, deep)
        assert info["JobState"] in ("PENDING", "REQUEUED", "REQUEUE_HOLD"), info
        assert int(info["Restarts"]) == 1, info
        assert not (cluster.root / "store").exists() or not any(
            (cluster.root / "store").glob("gpufleet-*.json")), "the preempted run saved"
        print(f"production job started {took:.1f} s after submission, deep check requeued")

        # Slurm holds a requeued batch job back for 120 s (Reason=BeginTime; measured here:
        # EligibleTime = requeue + 120 s, then the next scheduling pass, 171 s in all). An
        # admin's StartTime=now skips that wait: the rest is Slurm's own scheduling.
        assert info["Reason"] == "BeginTime", info
        res = cluster.run(["scontrol", "update", f"JobId={deep}", "StartTime=now"])
        assert res.returncode == 0, res.stderr
        # Once the production job is done, the requeued check runs to the end and saves.
        wait = _until("the requeued deep check running again",
                      lambda: _job(cluster, deep).get("JobState") == "RUNNING", cluster, 300)
        run = _until("the requeued deep check completed",
                     lambda: _job(cluster, deep).get("JobState") in ("COMPLETED", "FAILED"),
                     cluster, 300)
        print(f"requeued check restarted after {wait:.1f} s, ran {run:.1f} s")
        info = _job(cluster, deep)
        log = next((cluster.root / "joblogs").glob(f"*-{deep}.out"), None)
        assert info["JobState"] == "COMPLETED", (info, log and log.read_text()[-3000:])
    finally:
        cluster.run(["scancel", busy_job])

    cov = cluster.run([str(VENV_BIN / "gpufleet"), "coverage", "--store",
                       str(cluster.root / "store"), "--goal", "full=7d", "--format", "json",
                       "dc1", "dc2"])
    rows = {r["host"]: r for r in json.loads(cov.stdout)["nodes"]}
    assert rows["dc1"]["overdue"] == [] and rows["dc1"]["age_s"]["full"] is not None, rows
    assert rows["dc2"]["overdue"] == ["full"], rows
    assert cov.returncode == 1  # dc2 is still out of goal

    # The next run: dc1 is covered, dc2 (idle again) is the one to check.
    _until("dc2 idle", lambda: cluster.states()["dc2"][0] == "idle", cluster, 300)
    _, nxt = _deepcheck(cluster, "--dry-run")
    by_node = {ch["node"]: ch for ch in nxt["choices"]}
    assert by_node["dc2"]["decision"] == "submit", by_node
    assert by_node["dc1"]["decision"] == "skip"
    assert by_node["dc1"]["why"].startswith("covered "), by_node["dc1"]
    print(f"deepcheck lab test, full checks: {time.monotonic() - t_start:.1f} s")
    _multinode_check_is_requeued_and_covers_both_nodes(cluster)
    _cron_entry_submits_the_due_check(cluster)
    print(f"deepcheck lab test: {time.monotonic() - t_start:.1f} s")


def _multinode_check_is_requeued_and_covers_both_nodes(cluster: slurmlib.Cluster) -> None:
    """The multinode deep check (issue 28: multinode rails daily), on the same cluster right
    after the full checks: one `smoke --slurm` job over both idle nodes, preempted by a real
    job on one of them and requeued whole, then both nodes covered at the multinode depth."""
    t0 = time.monotonic()
    # --cooldown 1s: dc1 passed its full check a minute ago; the default 6 h would hold it.
    opts = ("--multinode-goal", "1d", "--cooldown", "1s", "--multinode-smoke-timeout", "120")
    code, plan = _deepcheck(cluster, *opts)
    assert code == 0, plan
    multi = {ch["node"]: ch for ch in plan["multinode"]}
    assert [multi[n]["decision"] for n in ("dc1", "dc2")] == ["submit", "submit"], multi
    assert multi["dc1"]["group"] == multi["dc2"]["group"] == ["dc1", "dc2"], multi
    assert multi["dc1"]["why"] == "never passed a multinode check"
    job = multi["dc1"]["job"]
    assert job and multi["dc2"]["job"] == job, multi
    full = {ch["node"]: ch for ch in plan["choices"]}
    assert full["dc2"]["decision"] == "skip", full  # due, but in the multinode check
    assert full["dc2"]["why"] == "in this run's multinode check (dc1, dc2)", full["dc2"]
    info = _job(cluster, job)
    # NumNodes reads "2-2" (min-max) while the job is pending.
    assert info["JobName"] == "gpufleet-deepcheck-multinode", info
    assert info["NumNodes"].split("-")[0] == "2" and info["ReqNodeList"] == "dc[1-2]", info
    assert info["Partition"] == "scavenger" and info["Requeue"] == "1", info
    _until("the multinode check running", lambda: _job(cluster, job).get("JobState") ==
           "RUNNING", cluster, 300)

    prod = cluster.run(["sbatch", "--parsable", "-p", "gpu", "-w", "dc2", "-o", "/dev/null",
                        "--wrap", "sleep 2"])
    assert prod.returncode == 0, prod.stderr
    took = _until("the production job running on dc2",
                  lambda: _job(cluster, prod.stdout.strip()).get("JobState") in (
                      "RUNNING", "COMPLETED"), cluster, 300)
    info = _job(cluster, job)
    assert info["JobState"] in ("PENDING", "REQUEUED", "REQUEUE_HOLD"), info
    assert int(info["Restarts"]) == 1, info
    # Requeued, its nodes still count as taken (squeue's compressed dc[1-2], expanded).
    _, again = _deepcheck(cluster, *opts, "--dry-run")
    assert {ch["node"]: ch["job"] for ch in again["multinode"]} == {"dc1": job, "dc2": job}
    assert {ch["node"]: ch["job"] for ch in again["choices"]} == {"dc1": job, "dc2": job}
    res = cluster.run(["scontrol", "update", f"JobId={job}", "StartTime=now"])
    assert res.returncode == 0, res.stderr
    _until("the requeued multinode check completed",
           lambda: _job(cluster, job).get("JobState") in ("COMPLETED", "FAILED"), cluster, 240)
    log = next((cluster.root / "joblogs").glob(f"*-{job}.out"), None)
    assert _job(cluster, job)["JobState"] == "COMPLETED", log and log.read_text()[-3000:]

    cov = cluster.run([str(VENV_BIN / "gpufleet"), "coverage", "--store",
                       str(cluster.root / "store"), "--goal", "full=7d", "--goal",
                       "multinode=1d", "--format", "json", "dc1", "dc2"])
    rows = {r["host"]: r for r in json.loads(cov.stdout)["nodes"]}
    assert all(rows[n]["age_s"]["multinode"] is not None for n in ("dc1", "dc2")), rows
    assert rows["dc1"]["overdue"] == [] and rows["dc2"]["overdue"] == ["full"], rows
    print(f"multinode check: production job started {took:.1f} s after submission; "
          f"{time.monotonic() - t0:.1f} s in all")



def _cron_line(c: slurmlib.Cluster) -> tuple[list[str], str, str]:
    """The role's one cron entry: (the five time fields, the user, the command)."""
    text = (c.root / "cron.d" / "gpufleet-deepcheck").read_text()
    jobs = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    assert len(jobs) == 1, text
    *when, user, command = jobs[0].split(None, 6)
    return when, user, command


def _cron_entry_submits_the_due_check(cluster: slurmlib.Cluster) -> None:
    """The entry the role wrote from the inventory (issue 28: deep checks scheduled by the role,
    goals from the inventory), its line run as cron runs it: /bin/sh -c LINE in the user's home
    with cron's environment only (SHELL=/bin/sh, HOME and LOGNAME from the user's passwd line:
    crontab(5) of Debian's cron 3.0pl1-162; PATH=/usr/bin:/bin: the default compiled into its
    /usr/sbin/cron, read with strings, an inference). After the parts above, dc2 is due for a full
    check (its only check was the multinode one) and both are covered at the multinode depth:
    the run must submit dc2's full check to the scavenger partition and nothing else."""
    t0 = time.monotonic()
    _until("dc1 and dc2 idle", lambda: [s[0] for s in cluster.states().values()] == ["idle"] * 2,
           cluster, 300)
    when, user, command = _cron_line(cluster)
    assert when == ["*/15", "*", "*", "*", "*"] and user == "root", (when, user)
    inv = _inventory(cluster)
    defaults = yaml.safe_load((REPO / "ansible_collections/gpufleet/gpu/roles"
                               "/gpufleet_healthcheck/defaults/main.yml").read_text())
    gpufleet = inv["gpufleet_healthcheck_command"]
    assert shlex.split(command) == [
        "/usr/bin/env", f"PATH={defaults['gpufleet_healthcheck_path']}",
        f"SLURM_CONF={cluster.conf}", gpufleet, "deepcheck",
        "--store", inv["gpufleet_healthcheck_deepcheck_store"], "--partition", "scavenger",
        "--goal", "7d", "--every", "15m", "--cooldown", "1s", "--max-jobs", "2",
        "--command", gpufleet, "--expect", str(cluster.root / "expect.yml"),
        "--multinode-goal", "1d", "--multinode-nodes", "2", "--slurm-drain",
        "--log-dir", inv["gpufleet_healthcheck_deepcheck_log_dir"], "--smoke-timeout", "240",
        "--format", "json", ">", inv["gpufleet_healthcheck_deepcheck_output"]], command

    home = pwd.getpwnam(user).pw_dir
    ran = subprocess.run(["/bin/sh", "-c", command], cwd=home, capture_output=True, text=True,
                         env={"SHELL": "/bin/sh", "HOME": home, "LOGNAME": user,
                              "PATH": "/usr/bin:/bin"}, timeout=300, check=False)
    assert ran.returncode == 0 and ran.stdout == "", (ran.returncode, ran.stdout, ran.stderr)
    plan = json.loads(Path(inv["gpufleet_healthcheck_deepcheck_output"]).read_text())
    full = {ch["node"]: ch for ch in plan["choices"]}
    multi = {ch["node"]: ch for ch in plan["multinode"]}
    assert full["dc2"]["decision"] == "submit" and full["dc2"]["job"], full
    assert full["dc2"]["why"] == "never passed a full check", full["dc2"]
    assert full["dc1"]["decision"] == "skip", full
    assert [multi[n]["decision"] for n in ("dc1", "dc2")] == ["skip", "skip"], multi
    job = full["dc2"]["job"]
    try:
        info = _job(cluster, job)
        assert info["JobName"] == "gpufleet-deepcheck" and info["ReqNodeList"] == "dc2", info
        assert info["Partition"] == "scavenger" and info["Requeue"] == "1", info
        assert info["Nice"] == "1000000", info
    finally:
        cluster.run(["scancel", job])
    print(f"cron entry: dc2's full check submitted as job {job}; "
          f"{time.monotonic() - t0:.1f} s")
