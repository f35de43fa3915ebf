"""`gpufleet deepcheck` on a real Slurm cluster: a full check submitted to an idle node of the
scavenger partition is preempted by a real production job at once (requeued, the node goes to
the production job), runs again once the node is idle, and its save makes the node covered.

Its own small cluster (slurmlib): dc1 and dc2, each in partition gpu (PriorityTier=10) and
scavenger (PriorityTier=1), with the slurm.conf lines docs/slurm.md says to add, read from it.
Both are CPU nodes declared as such (gpufleet_expected_gpu_count: 0), so the full smoke test
runs its gloo ranks: the same job, script and save a GPU node gets.
"""

from __future__ import annotations

import json
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


def _documented_conf() -> tuple[str, list[str]]:
    """The slurm.conf lines docs/slurm.md tells an admin to add ("How to turn it on"), with this
    cluster's nodes: the settings tested are the settings documented."""
    doc = (REPO / "docs" / "slurm.md").read_text()
    block = doc.split("### How to turn it on", 1)[1].split("```ini\n", 1)[1].split("```", 1)[0]
    lines = [ln for ln in block.splitlines() if ln.strip() and not ln.startswith("#")]
    parts = [ln.replace("gpu[001-128]", "dc1,dc2") for ln in lines if ln.startswith("Partition")]
    assert len(parts) == 2 and all("dc1,dc2" in p for p in parts), block
    return "\n".join(ln for ln in lines if not ln.startswith("Partition")), parts


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[slurmlib.Cluster]:
    root = tmp_path_factory.mktemp("slurm-deepcheck")
    extra, partitions = _documented_conf()
    c = slurmlib.prepare(root, HOSTS, extra=extra, partitions=partitions)
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
               cluster, 30)
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
               lambda: _job(cluster, deep).get("JobState") == "RUNNING", cluster, 60)
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
                      cluster, 30)
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
    _until("dc2 idle", lambda: cluster.states()["dc2"][0] == "idle", cluster, 30)
    _, nxt = _deepcheck(cluster, "--dry-run")
    by_node = {ch["node"]: ch for ch in nxt["choices"]}
    assert by_node["dc2"]["decision"] == "submit", by_node
    assert by_node["dc1"]["decision"] == "skip"
    assert by_node["dc1"]["why"].startswith("covered "), by_node["dc1"]
    print(f"deepcheck lab test: {time.monotonic() - t_start:.1f} s")

