"""Failure causes from what a run left behind (pure): exits and signals, OOM-killer hint, new
XIDs, torchrun's failure summary, and `timeout` only when a deadline really fired."""

from __future__ import annotations

import json

from gpufleet.model import CommandResult, HostSpec
from gpufleet.smoke import verdict
from gpufleet.smoke.hostrun import HostRun
from gpufleet.transport.local import LocalTransport


def _host(files: dict[str, object], rc: int = 1) -> HostRun:
    spec = HostSpec(name="gpu01", address="localhost", connection="local")
    h = HostRun(spec, LocalTransport(spec), None, "gfsmoke-x", run_dir="/tmp/x", nproc=2)
    h.files = {k: v if isinstance(v, str) else json.dumps(v) for k, v in files.items()}
    h.launch = CommandResult(rc=rc, stdout="", stderr="", duration_s=10.0)
    return h


PROGRESS = {"rank0.progress": {"rank": 0, "phase": "busbw", "seq": 183, "state": "in",
                               "pid": 100, "host": "gpu01"},
            "rank1.progress": {"rank": 1, "phase": "busbw", "seq": 182, "state": "in",
                               "pid": 101, "host": "gpu01"}}


def test_a_rank_killed_by_the_oom_killer_is_named_with_the_hint_and_new_xids() -> None:
    launcher = {"verdict": {"kind": "exited", "ranks": [1], "after_s": 9.2,
                            "detail": "rank 1 was killed by SIGKILL"},
                "ranks": {"0": {"pid": 100, "exit_code": None, "signal": "SIGKILL",
                                "ended_by_watchdog": True},
                          "1": {"pid": 101, "exit_code": None, "signal": "SIGKILL",
                                "ended_by_watchdog": False}},
                "kernel": {"read": True, "oom": ["Out of memory: Killed process 101 (python3)"],
                           "xid": ["NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus."]}}
    h = _host({**PROGRESS, "launcher.json": launcher,
               "exit": "rc=137 start=1000 end=1010 limit=1810"}, rc=137)
    res = verdict.result(h, [h], "full", 10.5)
    assert res.status == "error"  # exit 137 ten seconds into an 1810 s budget: not a timeout
    assert res.causes["deadline"]["gpu01"] == {"rc": 137, "elapsed_s": 10, "limit_s": 1810,
                                               "fired": False}
    assert res.causes["ranks"]["1"]["oom_killed"] is True
    assert "oom_killed" not in res.causes["ranks"]["0"]
    assert res.error is not None
    assert res.error.startswith("rank 1 (gpu01, pid 101) was killed by SIGKILL in phase busbw, "
                                "inside collective #182 (out of memory? the kernel's OOM killer "
                                "logged this pid); the watchdog on gpu01 ended the world 9.2 s")
    assert "new XID lines in the kernel log during the run: gpu01: NVRM: Xid" in res.error
    assert "exceeded its timeout" not in res.error


def test_timeout_only_when_the_deadline_fired() -> None:
    h = _host({**PROGRESS, "exit": "rc=124 start=1000 end=1310 limit=310"}, rc=124)
    res = verdict.result(h, [h], "quick", 311.0)
    assert res.status == "timeout"
    assert res.hung_ranks == (1,)
    assert res.error is not None and "host-side deadline fired on gpu01 (310 s of 310 s)" in \
        res.error


def test_torchrun_failure_summary_gives_the_signal() -> None:
    log = ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
           "Failures:\n  <NO_OTHER_FAILURES>\nRoot Cause (first observed failure):\n[0]:\n"
           "  time      : 2026-11-30_10:00:00\n  host      : gpu01\n"
           "  rank      : 1 (local_rank: 1)\n  exitcode  : -9 (pid: 101)\n"
           "  error_file: <N/A>\n  traceback : Signal 9 (SIGKILL) received by PID 101\n")
    h = _host({**PROGRESS, "log": log, "exit": "rc=1 start=1000 end=1005 limit=310"})
    res = verdict.result(h, [h], "quick", 6.0)
    assert res.causes["ranks"]["1"]["signal"] == "SIGKILL"
    assert res.error is not None and "rank 1 (gpu01, pid 101) was killed by SIGKILL" in res.error


def test_the_ranks_own_deadline_is_a_fired_deadline() -> None:
    prog = {k: {**v, "state": "deadline"} for k, v in PROGRESS.items()}
    h = _host({**prog, "exit": "rc=124 start=1000 end=1100 limit=310"}, rc=124)
    res = verdict.result(h, [h], "quick", 100.0)
    assert res.status == "timeout"
    assert res.causes["deadline"]["ranks"] == {"ranks": [0, 1], "fired": True}
    assert res.causes["deadline"]["gpu01"]["fired"] is False  # the wrapper's limit was not hit
