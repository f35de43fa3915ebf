"""gpufleet smoke launcher and watchdog: part of the shipped package (stdlib only).

Two ways in:
- `smoke.pyz --spawn N [--nnodes M --node-rank R --master-addr A --master-port P] ...` (host
  python, one node or each node of a world) calls `spawn()`: the ranks are this process's
  children, so their exit codes and killing signals are known exactly;
- `smoke.pyz watch --run-dir D --level-spec JSON -- CMD...` (torchrun: images, or on request)
  runs CMD (torchrun) and watches the ranks it starts through their progress files (pid
  inside).

The limits come from the level's `watchdog` row (gpufleet.smoke.levels), one per verdict.

Either way a watchdog ends the world as soon as one rank exits non-zero, is stopped
(SIGSTOP, `T` state), sits in uninterruptible sleep, stops beating (its heartbeat file goes
stale) or stops making progress while the others wait for it in a collective. Everything it
saw goes to `launcher.json` in the run dir: the verdict, every rank's exit, and the kernel-log
lines (XIDs, OOM killer) that appeared during the run. The runner turns that into the cause.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Any, NamedTuple

SCHEMA = "gpufleet.smoke-launcher/v1"
POLL_S = 0.1
# The import phase gets IMPORT_FACTOR x the level's "stall" limit: torch's import is slow on
# loaded hosts.
IMPORT_FACTOR = 4.0
XID_RE = re.compile(r"NVRM: Xid")
OOM_RE = re.compile(r"Out of memory|oom-kill|oom_reaper|Killed process", re.IGNORECASE)


def _signame(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return "signal %d" % num


def exit_info(code: int | None) -> dict[str, Any]:
    """Popen.returncode (negative = killed by that signal) or a shell status (128+N)."""
    if code is None:
        return {"exit_code": None, "signal": None}
    if code < 0:
        return {"exit_code": None, "signal": _signame(-code)}
    return {"exit_code": code, "signal": None}


def read_kernel_log() -> tuple[list[str] | None, str | None]:
    """The kernel log's lines now, or (None, why not). dmesg needs root on many hosts."""
    try:
        out = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10,
                             check=False)
    except (OSError, subprocess.SubprocessError) as e:
        return None, "dmesg: %s" % e
    if out.returncode != 0:
        return None, "dmesg exit %d: %s" % (out.returncode, out.stderr.strip()[-200:])
    return out.stdout.splitlines(), None


def new_kernel_lines(before: list[str] | None, after: list[str] | None) -> dict[str, Any]:
    if before is None or after is None:
        return {"read": False}
    seen = set(before)
    fresh = [ln for ln in after if ln not in seen]
    return {"read": True, "xid": [ln for ln in fresh if XID_RE.search(ln)][-20:],
            "oom": [ln for ln in fresh if OOM_RE.search(ln)][-20:]}


def proc_state(pid: int) -> str | None:
    """One-letter state from /proc/PID/stat (R, S, D, T, t, Z), None when it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            text = f.read()
    except OSError:
        return None
    return text.rsplit(")", 1)[-1].split()[0] if ")" in text else None


def _read_json(path: str) -> dict[str, Any] | None:
    try:
        with open(path) as f:
            obj = json.load(f)
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


def _mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def position(p: dict[str, Any] | None) -> int:
    """2 x collectives entered, +1 while inside one (as the runner counts)."""
    if p is None:
        return -1
    seq = int(p.get("seq", 0) or 0)
    return 2 * seq + int(p.get("state") in ("in", "error"))


class Watchdog:
    """Polls the ranks of one host; `check()` returns a verdict dict once the world must end."""

    def __init__(self, run_dir: str, limits: Mapping[str, float], nproc: int | None) -> None:
        self.run_dir = run_dir
        self.limits = dict(limits)
        for key in self.limits:  # tests shorten them (GPUFLEET_SMOKE_WATCHDOG_<KEY>)
            val = os.environ.get("GPUFLEET_SMOKE_WATCHDOG_" + key.upper())
            if val:
                self.limits[key] = float(val)
        self.nproc = nproc
        self.t0 = time.time()
        self.since: dict[tuple[int, str], float] = {}  # (rank, condition) -> first seen
        self.last_sig: tuple[Any, ...] | None = None
        self.last_change = time.time()

    def progress(self) -> dict[int, dict[str, Any]]:
        out: dict[int, dict[str, Any]] = {}
        try:
            names = os.listdir(self.run_dir)
        except OSError:
            return out
        for name in names:
            m = re.fullmatch(r"rank(\d+)\.progress", name)
            if m:
                obj = _read_json(os.path.join(self.run_dir, name))
                if obj is not None:
                    out[int(m.group(1))] = obj
        return out

    def _held(self, rank: int, cond: str, active: bool, now: float) -> float:
        key = (rank, cond)
        if not active:
            self.since.pop(key, None)
            return 0.0
        return now - self.since.setdefault(key, now)

    def check(self, pids: dict[int, int]) -> dict[str, Any] | None:
        """pids: rank -> pid of the ranks still running (from Popen or the progress files)."""
        now = time.time()
        prog = self.progress()
        states = {rank: proc_state(pid) for rank, pid in pids.items()}
        for rank, pid in sorted(pids.items()):
            state = states[rank]
            if self._held(rank, "stopped", state in ("T", "t"), now) >= self.limits["stopped"]:
                return self._verdict("stopped", [rank], prog, "rank %d (pid %d) is stopped "
                                     "(state %s: SIGSTOP or a debugger)" % (rank, pid, state))
        stalled = self._stall(prog, now)
        if stalled is not None:
            return stalled
        for rank, pid in sorted(pids.items()):
            state = states[rank]
            if self._held(rank, "dstate", state == "D", now) >= self.limits["beat"]:
                return self._verdict("uninterruptible", [rank], prog, "rank %d (pid %d) sat "
                                     "in uninterruptible sleep (D state) for %.0f s"
                                     % (rank, pid, self.limits["beat"]))
            beat = _mtime(os.path.join(self.run_dir, "rank%d.beat" % rank))
            p = prog.get(rank) or {}
            if beat is not None and p.get("state") not in ("done", "deadline") and state in (
                "R", "S"
            ) and now - beat >= self.limits["beat"]:
                return self._verdict("frozen", [rank], prog, "rank %d (pid %d) stopped its "
                                     "heartbeat %.0f s ago" % (rank, pid, now - beat))
        return None

    def _stall(self, prog: dict[int, dict[str, Any]], now: float) -> dict[str, Any] | None:
        sig = tuple(sorted((r, p.get("phase"), p.get("seq"), p.get("state"))
                           for r, p in prog.items()))
        if sig != self.last_sig:
            self.last_sig, self.last_change = sig, now
            return None
        live = {r: p for r, p in prog.items() if p.get("state") not in ("done", "deadline")}
        if not live or (self.nproc and len(prog) < self.nproc and now - self.t0 < 60):
            return None
        pos = {r: position(p) for r, p in prog.items()}
        pos = {r: (v if r in live else 1 << 30) for r, v in pos.items()}
        low, high = min(pos.values()), max(pos.values())
        behind = sorted(r for r, v in pos.items() if v == low)
        importing = any(live[r].get("phase") in ("start", "import") for r in behind)
        limit = self.limits["stall"] * (IMPORT_FACTOR if importing else 1.0)
        stalled = now - self.last_change
        if stalled < limit:
            return None
        if low < high:
            return self._verdict("hung", behind, prog, "rank(s) %s made no progress for %.0f s "
                                 "while rank(s) %s waited for them"
                                 % (", ".join(map(str, behind)), stalled,
                                    ", ".join(str(r) for r, v in sorted(pos.items())
                                              if v > low)))
        if low % 2 == 1:
            return self._verdict("hung", behind, prog, "all ranks sat inside collective #%d "
                                 "for %.0f s" % (low // 2, stalled))
        return None

    def _verdict(self, kind: str, ranks: list[int], prog: dict[int, dict[str, Any]],
                 detail: str) -> dict[str, Any]:
        return {"kind": kind, "ranks": ranks, "detail": detail, "at": time.time(),
                "after_s": round(time.time() - self.t0, 3),
                "where": {str(r): prog.get(r) for r in ranks}}


def _kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)  # SIGKILL also ends a stopped process


def _write(run_dir: str, obj: dict[str, Any]) -> None:
    path = os.path.join(run_dir, "launcher.json")
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f, sort_keys=True)
    os.replace(path + ".tmp", path)


class World(NamedTuple):
    """This host's place in the world: torchrun's static rendezvous (`--nnodes --node-rank
    --master-addr --master-port`). Global rank 0 (node 0's local rank 0) hosts the TCP store
    that init_process_group's env:// method makes; the others connect to it, each within the
    process group's timeout."""

    nnodes: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = 0  # 0: a free port on this host (one node only)


ONE_NODE = World()


def spawn(n: int, script: str, argv: list[str], run_dir: str,
          limits: Mapping[str, float], *, world: World = ONE_NODE) -> int:
    """The launcher: torchrun --max_restarts=0 (standalone, or a static rendezvous over several
    hosts) without torchrun's cost.

    torchrun's launcher process imports torch (3-4 s on an H200 host, 1.5 s of CPU on the
    test machine, per host and world) before any rank starts, then runs its c10d rendezvous;
    this one imports nothing and starts the ranks at once. Ranks share this process group (the
    runner's timeout and kill reach them) and the environment (the run marker).
    """
    before, klog_err = read_kernel_log()
    port = world.master_port
    if not port:
        if world.nnodes > 1:
            raise SystemExit("--master-port is required with --nnodes > 1")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    dog = Watchdog(run_dir, limits, n)
    # Keyed by global rank, as the ranks name their progress files (the watchdog reads them).
    procs: dict[int, subprocess.Popen[bytes]] = {}
    for r in range(n):
        rank = world.node_rank * n + r
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(r),
                   WORLD_SIZE=str(world.nnodes * n), LOCAL_WORLD_SIZE=str(n),
                   GROUP_RANK=str(world.node_rank), MASTER_ADDR=world.master_addr,
                   MASTER_PORT=str(port))
        procs[rank] = subprocess.Popen([sys.executable, script, *argv], env=env)
    ranks: dict[str, dict[str, Any]] = {
        str(r): {"pid": p.pid, "ended_by_watchdog": False} for r, p in procs.items()
    }
    verdict: dict[str, Any] | None = None
    live = dict(procs)
    while live:
        for r, p in list(live.items()):
            code = p.poll()
            if code is None:
                continue
            del live[r]
            ranks[str(r)].update(exit_info(code), t_exit=round(time.time() - dog.t0, 3))
            if code != 0 and verdict is None:
                verdict = {"kind": "exited", "ranks": [r], "after_s": round(time.time()
                           - dog.t0, 3), "detail": "rank %d %s" % (r, _describe(code)),
                           "where": {str(r): dog.progress().get(r)}}
        if verdict is None and live:
            verdict = dog.check({r: p.pid for r, p in live.items()})
        if verdict is not None and live:
            for r in live:
                ranks[str(r)]["ended_by_watchdog"] = True
            _kill([p.pid for p in live.values()])
            for r, p in live.items():
                ranks[str(r)].update(exit_info(p.wait()), t_exit=round(time.time() - dog.t0, 3))
            live = {}
        time.sleep(POLL_S)
    after, _ = read_kernel_log() if before is not None else (None, None)
    _write(run_dir, {"schema": SCHEMA, "mode": "spawn", "limits": dog.limits, "verdict": verdict,
                     "ranks": ranks, "elapsed_s": round(time.time() - dog.t0, 3),
                     "kernel": {**new_kernel_lines(before, after), "error": klog_err}})
    if verdict is None:
        return 0
    first = procs[verdict["ranks"][0]].returncode if verdict["kind"] == "exited" else None
    if first:
        return first if first > 0 else 128 - first  # as a shell reports a killed child
    return 1


def _describe(code: int) -> str:
    info = exit_info(code)
    return ("was killed by %s" % info["signal"]) if info["signal"] else (
        "exited with code %d" % code)


def watch(cmd: list[str], run_dir: str, limits: Mapping[str, float],
          nproc: int | None) -> int:
    """Run CMD (torchrun) and watch the ranks it starts (pids from their progress files)."""
    before, klog_err = read_kernel_log()
    dog = Watchdog(run_dir, limits, nproc)
    child = subprocess.Popen(cmd)
    verdict: dict[str, Any] | None = None
    seen: dict[int, int] = {}
    gone: dict[str, dict[str, Any]] = {}
    while child.poll() is None:
        prog = dog.progress()
        for r, p in prog.items():
            if isinstance(p.get("pid"), int):
                seen[r] = p["pid"]
        alive = {}
        for r, pid in seen.items():
            state = proc_state(pid)
            p = prog.get(r) or {}
            if state in (None, "Z") and p.get("state") not in ("done", "deadline"):
                gone.setdefault(str(r), {"pid": pid, "t_exit": round(time.time() - dog.t0, 3),
                                         "last": p})
            elif state not in (None, "Z"):
                alive[r] = pid
        if gone and verdict is None:
            r0 = sorted(gone, key=lambda k: gone[k]["t_exit"])[0]
            verdict = {"kind": "exited", "ranks": [int(r0)], "after_s": gone[r0]["t_exit"],
                       "detail": "rank %s (pid %d) ended before the run finished"
                       % (r0, gone[r0]["pid"]), "where": {r0: gone[r0]["last"]}}
        if verdict is None:
            verdict = dog.check(alive)
        if verdict is not None:
            # torchrun notices a dead worker itself and ends the others; give it a moment to
            # log the exit codes, then end everything that is left.
            deadline = time.time() + (2.0 if verdict["kind"] == "exited" else 0.0)
            while time.time() < deadline and child.poll() is None:
                time.sleep(POLL_S)
            _kill([*alive.values(), child.pid])
            break
        time.sleep(POLL_S)
    code = child.wait()
    after, _ = read_kernel_log() if before is not None else (None, None)
    _write(run_dir, {"schema": SCHEMA, "mode": "watch", "limits": dog.limits, "verdict": verdict,
                     "ranks": gone, "child": exit_info(code),
                     "elapsed_s": round(time.time() - dog.t0, 3),
                     "kernel": {**new_kernel_lines(before, after), "error": klog_err}})
    return code if code >= 0 else 128 - code


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    cmd: list[str] = []
    if "--" in args:
        i = args.index("--")
        args, cmd = args[:i], args[i + 1:]
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--run-dir", required=True)
    p.add_argument("--level-spec", required=True, help="JSON: the level (its watchdog limits)")
    p.add_argument("--nproc", type=int, default=None, help="ranks expected on this host")
    a = p.parse_args(args)
    if not cmd:
        p.error("usage: watch --run-dir D --level-spec JSON [--nproc N] -- CMD...")
    return watch(cmd, a.run_dir, json.loads(a.level_spec)["watchdog"], a.nproc)
