"""Where this rank is: its identity (torchrun's environment), phase, collective count, heartbeat.

Every rank writes `rank<R>.progress` (phase, collectives entered, in/out of one) into the run
dir; the launcher's watchdog (launch.py) and the controller read it to say which rank hung.
Checks record through `phase`, `coll`, `enter` and `leave` here, one state per rank process.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time


def _env_int(name, default):
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


RANK = _env_int("RANK", 0)
WORLD = _env_int("WORLD_SIZE", 1)
LOCAL_RANK = _env_int("LOCAL_RANK", 0)
LOCAL_WORLD = _env_int("LOCAL_WORLD_SIZE", 1)
GROUP_RANK = _env_int("GROUP_RANK", 0)  # node rank assigned by the rendezvous


class _State:
    run_dir = None  # set by start(); None: record nothing (unit tests of pure parts)
    host = None
    seq = 0  # collectives entered by this rank (through coll())
    phase = "start"
    hang_phase = None  # test-only: stop in this phase (with --test-hang-rank == RANK)


STATE = _State()


def start(run_dir, host, hang_phase=None):
    STATE.run_dir, STATE.host, STATE.hang_phase = run_dir, host, hang_phase


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, sort_keys=True)
    os.replace(tmp, path)


def progress(state, phase=None):
    """Record where this rank is; `state` is "out" (working) or "in" (inside collective seq)."""
    if phase is not None:
        STATE.phase = phase
    if STATE.run_dir is None:
        return
    write_json(
        os.path.join(STATE.run_dir, "rank%d.progress" % RANK),
        {"rank": RANK, "phase": STATE.phase, "seq": STATE.seq, "state": state,
         "t": time.time(), "pid": os.getpid(), "host": STATE.host},
    )


def enter():
    """Mark that this rank enters its next collective (or a step that runs collectives)."""
    STATE.seq += 1
    progress("in")


def leave():
    progress("out")


def coll(fn, *a, **kw):
    """Run one collective with progress bookkeeping, so a hang can be attributed to a rank."""
    enter()
    out = fn(*a, **kw)
    leave()
    return out


def phase(name):
    progress("out", name)
    if STATE.hang_phase == name:
        sys.stderr.write("rank %d: test hang in phase %s\n" % (RANK, name))
        sys.stderr.flush()
        while True:
            time.sleep(3600)


def arm_deadline(seconds):
    """Last line of defence if the controller vanished: torchrun starts ranks in sessions of their
    own, so a kill of the launcher's group misses them; each rank ends itself instead."""
    def fire():
        time.sleep(seconds)
        try:
            progress("deadline")
        finally:
            os._exit(124)

    threading.Thread(target=fire, name="gpufleet-deadline", daemon=True).start()


def start_heartbeat(interval=1.0):
    """Touch rank<R>.beat every second from a thread: the launcher's watchdog reads its age.

    A stopped or frozen process stops beating; one merely waiting in a collective does not
    (torch releases the GIL while it waits), so the two are told apart.
    """
    path = os.path.join(STATE.run_dir, "rank%d.beat" % RANK)

    def beat():
        while True:
            try:
                with open(path, "a"):
                    os.utime(path, None)
            except OSError:
                pass
            time.sleep(interval)

    threading.Thread(target=beat, name="gpufleet-heartbeat", daemon=True).start()


def gather_json(torch, dist, obj):
    """all_gather_object without pickle or numpy (neither is promised on the host): JSON bytes."""
    data = json.dumps(obj, sort_keys=True).encode()
    n = torch.tensor([len(data)], dtype=torch.int64)
    lens = [torch.zeros(1, dtype=torch.int64) for _ in range(WORLD)]
    coll(dist.all_gather, lens, n)
    most = max(int(x) for x in lens)
    buf = torch.zeros(most, dtype=torch.uint8)
    if data:
        buf[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    bufs = [torch.zeros(most, dtype=torch.uint8) for _ in range(WORLD)]
    coll(dist.all_gather, bufs, buf)
    return [json.loads(bytes(bufs[i][: int(lens[i])].tolist()).decode()) for i in range(WORLD)]
