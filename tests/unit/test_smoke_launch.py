"""The launcher's watchdog rules, pure (no ranks): heartbeat, stall, and what never trips them."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from gpufleet.smoke import levels
from gpufleet.smoke.remote import ddp, launch
from gpufleet.smoke.remote.launch import Watchdog, exit_info, new_kernel_lines

QUICK = levels.get("quick").watchdog


def _progress(d: Path, rank: int, seq: int, state: str, phase: str = "busbw") -> None:
    (d / f"rank{rank}.progress").write_text(json.dumps(
        {"rank": rank, "seq": seq, "state": state, "phase": phase, "pid": os.getpid()}))


def test_a_rank_whose_heartbeat_stopped_is_frozen(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFLEET_SMOKE_WATCHDOG_BEAT", "2")
    dog = Watchdog(str(tmp_path), QUICK, 1)
    _progress(tmp_path, 0, 3, "in")
    beat = tmp_path / "rank0.beat"
    beat.touch()
    me = {0: os.getpid()}  # a live process in R/S state stands in for the rank
    assert dog.check(me) is None
    os.utime(beat, (time.time() - 5, time.time() - 5))
    v = dog.check(me)
    assert v is not None and v["kind"] == "frozen" and v["ranks"] == [0]
    assert "stopped its heartbeat 5 s ago" in v["detail"]


def test_stall_names_the_rank_behind_once_nobody_moves(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFLEET_SMOKE_WATCHDOG_STALL", "1")
    dog = Watchdog(str(tmp_path), QUICK, 2)
    _progress(tmp_path, 0, 7, "out")  # rank 0 is further (its collective returned at once)
    _progress(tmp_path, 1, 5, "out", phase="allreduce_exact")
    assert dog.check({}) is None  # first sight: progress just changed
    dog.last_change -= 5
    v = dog.check({})
    assert v is not None and v["kind"] == "hung" and v["ranks"] == [1]
    assert v["detail"] == "rank(s) 1 made no progress for 5 s while rank(s) 0 waited for them"


def test_level_ranks_outside_collectives_are_not_hung(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """All ranks doing the same slow local work (DDP import, matmul) are not a hang; the import
    phase gets 4x the stall limit."""
    monkeypatch.setenv("GPUFLEET_SMOKE_WATCHDOG_STALL", "1")
    dog = Watchdog(str(tmp_path), QUICK, 2)
    for r in (0, 1):
        _progress(tmp_path, r, 4, "out", phase="ddp")
    dog.check({})
    dog.last_change -= 100
    assert dog.check({}) is None
    _progress(tmp_path, 0, 1, "out", phase="init")
    _progress(tmp_path, 1, 0, "out", phase="import")
    dog.check({})
    dog.last_change -= 3  # < 4 x 1 s: a slow import, not yet a hang
    assert dog.check({}) is None


def test_exit_info_and_new_kernel_lines() -> None:
    assert exit_info(-9) == {"exit_code": None, "signal": "SIGKILL"}
    assert exit_info(1) == {"exit_code": 1, "signal": None}
    got = new_kernel_lines(["[1] a"], ["[1] a", "[2] NVRM: Xid (PCI:0000:18:00): 79, x",
                                       "[3] Out of memory: Killed process 42 (python3)"])
    assert got["xid"] == ["[2] NVRM: Xid (PCI:0000:18:00): 79, x"]
    assert got["oom"] == ["[3] Out of memory: Killed process 42 (python3)"]
    assert new_kernel_lines(None, []) == {"read": False}
    assert all(lv.watchdog["beat"] > lv.watchdog["stall"] for lv in levels.LEVELS.values())


# A rank stand-in: records the environment the launcher gave it, as rank<RANK>.env.
_RANK = ("import json, os, sys\n"
         "keys = ('RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'LOCAL_WORLD_SIZE', 'GROUP_RANK',"
         " 'MASTER_ADDR', 'MASTER_PORT')\n"
         "d = sys.argv[1]\n"
         "open(os.path.join(d, 'rank%s.env' % os.environ['RANK']), 'w').write("
         "json.dumps({k: os.environ[k] for k in keys}))\n")


def test_spawn_gives_a_world_member_its_global_ranks_and_the_first_hosts_store(
        tmp_path: Path) -> None:
    """Node 1 of a world of 3 nodes x 2 ranks: global ranks 2 and 3, the store named by the
    controller (the first host's address and port), never a port of its own."""
    script = tmp_path / "rank.py"
    script.write_text(_RANK)
    world = launch.World(nnodes=3, node_rank=1, master_addr="10.0.0.1", master_port=29501)
    assert launch.spawn(2, str(script), [str(tmp_path)], str(tmp_path), QUICK, world=world) == 0
    envs = {r: json.loads((tmp_path / f"rank{r}.env").read_text()) for r in (2, 3)}
    assert envs[2] == {"RANK": "2", "LOCAL_RANK": "0", "WORLD_SIZE": "6", "LOCAL_WORLD_SIZE": "2",
                       "GROUP_RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29501"}
    assert envs[3]["RANK"] == "3" and envs[3]["LOCAL_RANK"] == "1"
    record = json.loads((tmp_path / "launcher.json").read_text())
    assert sorted(record["ranks"]) == ["2", "3"] and record["verdict"] is None
    with pytest.raises(SystemExit, match="--master-port is required"):
        launch.spawn(2, str(script), [str(tmp_path)], str(tmp_path), QUICK,
                     world=launch.World(nnodes=2, node_rank=1))


def test_the_ranks_never_see_the_launchers_own_options() -> None:
    argv = ["--spawn", "2", "--nnodes", "4", "--node-rank=3", "--master-addr", "-gpu1",
            "--master-port", "29501", "--run-dir", "/tmp/x", "--host=-node-rank"]
    assert ddp._without_spawn(argv) == ["--run-dir", "/tmp/x", "--host=-node-rank"]
