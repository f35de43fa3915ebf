"""The smoke test for real: `gpufleet smoke` over SSH to the fleet's CPU hosts (gloo, 2 ranks each).

Single host, one multinode world of 2 hosts x 2 ranks on loopback, and a rank made to hang
(the script's test-only switch, through GPUFLEET_SMOKE_TEST_HANG): killed within the
configured timeout, named in the verdict, and nothing of the run left on the host.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from typing import Any

import pytest
from fleetlib import Fleet

pytestmark = [pytest.mark.fleet, pytest.mark.slow]


def _smoke(fleet: Fleet, *args: str, env: dict[str, str] | None = None,
           timeout: float = 240) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, "-m", "gpufleet", "smoke", "-i", str(fleet.inventory), *args,
         "--format", "json"],
        env={**fleet.env, **(env or {})}, cwd=fleet.root, capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        pytest.fail(f"no JSON report (exit {proc.returncode}); stderr:\n{proc.stderr[-3000:]}")
    return proc, report


# Every process a smoke run starts on a fleet host descends from that host's sshd session and
# keeps its SSH_CONNECTION ("client port server 22"): the server address is this fleet's own
# (reserved among all fleets on the machine), so processes of another test run on the same
# machine, and their markers, are told apart from this run's. The runner names every run dir
# after its run id (/tmp/gpufleet-smoke.gfsmoke-<hex>.XXXXXXXX; other tools' dirs there are not
# this run's), and a dir whose run id another fleet's live processes carry is that run's. The
# script names are matched by a pattern that the listing's own command line does not match.
_LISTING = r"""
me=$(echo "$SSH_CONNECTION" | cut -d" " -f3,4)
for p in $( (grep -l GPUFLEET_SMOKE_RUN= /proc/[0-9]*/environ
             grep -lE "smoke_(ddp|launch)[.]py" /proc/[0-9]*/cmdline) 2>/dev/null |
           cut -d/ -f3 | sort -u); do
  env=$(tr "\0" "\n" < "/proc/$p/environ" 2>/dev/null) || continue
  conn=$(printf "%s\n" "$env" | sed -n "s/^SSH_CONNECTION=//p" | cut -d" " -f3,4)
  run=$(printf "%s\n" "$env" | sed -n "s/^GPUFLEET_SMOKE_RUN=//p")
  if [ "$conn" = "$me" ]; then
    echo "ours $p ${run:-unmarked} $(tr "\0" " " < "/proc/$p/cmdline" 2>/dev/null)"
  elif [ -n "$run" ]; then echo "other $run"; fi
done
ls -d /tmp/gpufleet-smoke.gfsmoke-* 2>/dev/null | sed "s/^/dir /"
true
"""


def _listing(fleet: Fleet, name: str) -> tuple[set[str], set[str], set[str]]:
    """This fleet host's smoke processes, the run ids of other fleets' live smoke processes,
    and every smoke run dir, as the host lists them."""
    r = subprocess.run(fleet.ssh_argv(name, "sh", "-c", shlex.quote(_LISTING)),
                       capture_output=True, text=True, timeout=30, check=False, env=fleet.env)
    assert r.returncode == 0, r.stderr
    rows = [ln.split(" ", 1) for ln in r.stdout.splitlines() if " " in ln]
    ours = {rest for kind, rest in rows if kind == "ours"}
    others = {rest.strip() for kind, rest in rows if kind == "other"}
    dirs = {rest.strip() for kind, rest in rows if kind == "dir"}
    return ours, others, dirs


def _run_id(run_dir: str) -> str:
    return run_dir.removeprefix("/tmp/gpufleet-smoke.").rsplit(".", 1)[0]


def _left_behind(fleet: Fleet, name: str, before: set[str]) -> set[str]:
    """What this run left on the host: every process of this fleet's sessions (by
    SSH_CONNECTION), and run dirs that were not there before and belong to no other live run.
    A dir of another test run (created meanwhile) goes with that run's cleanup: waited for."""
    deadline = time.monotonic() + 20
    while True:
        ours, others, dirs = _listing(fleet, name)
        new = {d for d in dirs - before if _run_id(d) not in others}
        if ours or not new or time.monotonic() > deadline:
            return ours | new
        time.sleep(1)


def _dirs(fleet: Fleet, name: str) -> set[str]:
    ours, _, dirs = _listing(fleet, name)
    assert ours == set(), f"smoke processes of this fleet before the run: {ours}"
    return dirs


def _passed(smoke: dict[str, Any]) -> None:
    failed = [c for c in smoke["checks"] if not c["passed"]]
    assert smoke["status"] == "pass", (smoke["error"], failed, smoke["log_tail"])
    names = {c["name"] for c in smoke["checks"]}
    assert {"versions", "device_count", "matmul", "allreduce_exact", "ddp", "busbw"} <= names


def test_single_host_gloo_two_ranks(fleet: Fleet) -> None:
    before = _dirs(fleet, "cpu-1")
    proc, report = _smoke(fleet, "-l", "cpu-1")
    smoke = report["hosts"]["cpu-1"]["smoke"]
    _passed(smoke)
    assert smoke["backend"] == "gloo" and smoke["world_size"] == 2
    assert [r["rank"] for r in smoke["ranks"]] == [0, 1]
    assert all(r["device"] == "cpu" and r["torch"] for r in smoke["ranks"])
    assert smoke["busbw_gbps"] and smoke["matmul_tflops"].keys() == {"0", "1"}
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _left_behind(fleet, "cpu-1", before) == set()


def test_multinode_two_hosts_two_ranks_each(fleet: Fleet) -> None:
    before = {n: _dirs(fleet, n) for n in ("cpu-1", "cpu-2")}
    proc, report = _smoke(fleet, "-l", "cpu", "--multinode")
    for name in ("cpu-1", "cpu-2"):
        smoke = report["hosts"][name]["smoke"]
        _passed(smoke)
        assert smoke["world_size"] == 4 and smoke["hosts"] == ["cpu-1", "cpu-2"]
        assert sorted({r["host"] for r in smoke["ranks"]}) == ["cpu-1", "cpu-2"]
        busbw = next(c for c in smoke["checks"] if c["name"] == "busbw")
        per_host = busbw["data"]["per_host_busbw_gbps"]
        assert set(per_host) == {"cpu-1", "cpu-2"}
        # this host's own bandwidth (its two local ranks), not the world's
        assert smoke["busbw_gbps"] == per_host[name]
        assert _left_behind(fleet, name, before[name]) == set()
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_hung_rank_is_killed_named_and_cleaned_up(fleet: Fleet) -> None:
    before = _dirs(fleet, "cpu-2")
    t = time.monotonic()
    proc, report = _smoke(fleet, "-l", "cpu-2", "--smoke-timeout", "300",
                          env={"GPUFLEET_SMOKE_TEST_HANG": "1", "GPUFLEET_SMOKE_PG_TIMEOUT": "5"})
    took = time.monotonic() - t
    smoke = report["hosts"]["cpu-2"]["smoke"]
    assert smoke["status"] == "timeout", smoke
    assert smoke["hung_ranks"] == [1]
    assert "rank(s) 1 hung (before collective" in smoke["error"]
    assert "rank(s) 0 waited for them" in smoke["error"]
    assert took < 300, took  # the process-group timeout ended it, well inside the run's timeout
    assert proc.returncode == 1  # a finding at error severity
    assert _left_behind(fleet, "cpu-2", before) == set()
