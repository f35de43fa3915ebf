"""Read back what a smoke run left on its hosts and turn it into a SmokeResult.

Inputs per host (files the cleanup printed): result.json (rank 0's verdict), rank<R>.json and
rank<R>.progress (each rank's measurements and last position), launcher.json (the launcher's
watchdog verdict, every rank's exit and the kernel-log lines that appeared during the run),
`exit` (the wrapper's record of how the launch ended and whether the host-side deadline fired)
and the log tail. `timeout` is reported only when a deadline really fired.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from gpufleet.model import RankInfo, SmokeCheck, SmokeResult, SmokeStatus
from gpufleet.redact import number
from gpufleet.smoke.hostrun import LOG_TAIL_BYTES, HostRun
from gpufleet.smoke.nccl_paths import GLOO, parse_nccl_init

_ERROR_LINE = re.compile(r"CUDA error|NCCL WARN|NCCL error|ncclInternalError|ncclSystemError|"
                         r"ncclUnhandledCudaError|ncclRemoteError|CUDA out of memory|"
                         r"illegal memory access|uncorrectable ECC", re.IGNORECASE)
# torchrun's failure summary: "rank      : 1 (local_rank: 1)" then "exitcode  : -9 (pid: 123)".
_TORCHRUN_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)", re.MULTILINE)
_TORCHRUN_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)\s*\(pid:\s*(\d+)\)", re.MULTILINE)
_SIGNALS = {1: "SIGHUP", 2: "SIGINT", 6: "SIGABRT", 7: "SIGBUS", 9: "SIGKILL", 11: "SIGSEGV",
            15: "SIGTERM"}
_TIMED_OUT = re.compile(r"timed out|timeout", re.IGNORECASE)


def loads(text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        # NaN/Infinity (or 1e999) from a host are missing numbers, as in every renderer.
        obj = json.loads(text, parse_constant=lambda _: None,
                         parse_float=lambda s: f if math.isfinite(f := float(s)) else None)
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def rank_of(obj: Mapping[str, Any], world: Sequence[HostRun]) -> int | None:
    """The rank a rank file names, or None outside the world: a huge rank from a host (its
    data) must not size our loops."""
    try:
        r = int(obj["rank"])
    except (KeyError, TypeError, ValueError, OverflowError):
        return None
    world_size = sum(m.nproc for m in world)
    return r if 0 <= r < (world_size or 1 << 16) else None


def ignored_rank_files(world: Sequence[HostRun]) -> list[str]:
    """Rank files whose rank lies outside the world, named for a note."""
    out = []
    for m in world:
        for k, v in m.files.items():
            obj = loads(v)
            if obj is not None and k.startswith("rank") and rank_of(obj, world) is None:
                out.append(f"{m.spec.name}:{k}")
    return out


def deadline_fired(exit_text: str | None) -> tuple[bool, dict[str, Any]]:
    """From the wrapper's `rc=N start=S end=E limit=L`: did the host-side `timeout` fire?

    It did when the launch ended with timeout's statuses (124 after TERM, 137 after -k KILL)
    no earlier than the limit; 137 before the limit is a rank (or launcher) killed by SIGKILL.
    """
    fields = dict(kv.split("=", 1) for kv in (exit_text or "").split() if "=" in kv)
    try:
        rc, start, end, limit = (int(fields[k]) for k in ("rc", "start", "end", "limit"))
    except (KeyError, ValueError):
        return False, {}
    info = {"rc": rc, "elapsed_s": end - start, "limit_s": limit}
    return rc in (124, 137) and end - start >= limit, info


def hung_ranks(
    progress: Mapping[int, Mapping[str, Any]],
    rank_files: Mapping[int, Mapping[str, Any]],
    nranks: int,
) -> tuple[list[int], str]:
    """Which ranks stopped the others, from where each rank last said it was.

    Position = 2 * collectives entered, +1 while inside one. A rank that errored out of a
    collective (a process-group timeout) was waiting there. The hung ranks are those furthest
    behind; when all are level and inside a collective, the collective itself hung.
    """
    del rank_files
    pos: dict[int, int] = {}
    where: dict[int, str] = {}
    for r in range(nranks):
        p = progress.get(r)
        if p is None:
            pos[r], where[r] = -1, "never reported progress"
            continue
        state = p.get("state")
        if state == "done":
            continue
        seq = int(p.get("seq", 0))
        inside = state in ("in", "error")
        pos[r] = 2 * seq + int(inside)
        where[r] = (f"{'inside' if inside else 'before'} collective #{seq + (not inside)} "
                    f"in phase {p.get('phase')} on {p.get('host')}")
    if not pos:
        return [], ""
    low = min(pos.values())
    hung = sorted(r for r, v in pos.items() if v == low)
    waiting = sorted(r for r, v in pos.items() if v > low)
    if waiting:
        why = (f"rank(s) {', '.join(map(str, hung))} hung ({where[hung[0]]}); "
               f"rank(s) {', '.join(map(str, waiting))} waited for them")
    else:
        why = f"all unfinished ranks stuck together ({where[hung[0]]})"
    return hung, why


def _where(p: Mapping[str, Any] | None) -> str:
    if not p:
        return "before reporting any progress"
    state, seq = p.get("state"), int(p.get("seq", 0) or 0)
    inside = state in ("in", "error")
    return (f"in phase {p.get('phase')}, {'inside' if inside else 'after'} collective "
            f"#{seq}" if seq else f"in phase {p.get('phase')}, before any collective")


def _torchrun_exits(log: str) -> dict[int, dict[str, Any]]:
    """torchrun's failure summary, when it printed one: rank -> exit code or signal."""
    out: dict[int, dict[str, Any]] = {}
    ranks = [(m.start(), int(m.group(1))) for m in _TORCHRUN_RANK.finditer(log)]
    for m in _TORCHRUN_EXIT.finditer(log):
        before = [r for pos, r in ranks if pos < m.start()]
        if not before:
            continue
        code, pid = int(m.group(1)), int(m.group(2))
        out[before[-1]] = ({"exit_code": None, "signal": _SIGNALS.get(-code, f"signal {-code}"),
                           "pid": pid} if code < 0 else {"exit_code": code, "signal": None,
                                                         "pid": pid})
    return out


def rank_causes(world: Sequence[HostRun]) -> dict[str, Any]:
    """Per rank: exit, last phase and collective, errors; the watchdog verdict; kernel lines."""
    ranks: dict[int, dict[str, Any]] = {}
    verdicts: list[dict[str, Any]] = []
    kernel: dict[str, Any] = {"xid": [], "oom": [], "read": []}
    deadline: dict[str, Any] = {}
    for m in world:
        for k, v in m.files.items():
            obj = loads(v)
            if obj is None or not k.startswith("rank") or (n := rank_of(obj, world)) is None:
                continue
            r = ranks.setdefault(n, {"host": m.spec.name})
            if k.endswith(".progress"):
                r["last"] = {x: obj.get(x) for x in ("phase", "seq", "state")}
                r.setdefault("pid", obj.get("pid"))
            elif not obj.get("ok", True):
                r["error"] = str(obj.get("error", ""))[:500]
        launcher = loads(m.files.get("launcher.json"))
        if launcher is not None:
            if launcher.get("verdict"):
                verdicts.append({**launcher["verdict"], "host": m.spec.name})
            for rk, info in (launcher.get("ranks") or {}).items():
                r = ranks.setdefault(int(rk), {"host": m.spec.name})
                r.update({x: info[x] for x in ("pid", "exit_code", "signal", "ended_by_watchdog",
                                               "t_exit") if x in info})
            kl = launcher.get("kernel") or {}
            kernel["read"].append(bool(kl.get("read")))
            kernel["xid"] += [f"{m.spec.name}: {ln}" for ln in kl.get("xid", [])]
            kernel["oom"] += [(m.spec.name, ln) for ln in kl.get("oom", [])]
        log = m.files.get("log", "")
        for rk, info in _torchrun_exits(log).items():
            r = ranks.setdefault(rk, {"host": m.spec.name})
            for x, val in info.items():
                r.setdefault(x, val)
        lines = [ln.strip()[:300] for ln in log.splitlines() if _ERROR_LINE.search(ln)]
        if lines:
            kernel.setdefault("log_errors", []).extend(f"{m.spec.name}: {ln}" for ln in lines[-5:])
        fired, info = deadline_fired(m.files.get("exit"))
        if info:
            deadline[m.spec.name] = {**info, "fired": fired}
    for r in ranks.values():
        pid = r.get("pid")
        if pid and any(h == r["host"] and re.search(rf"\b{pid}\b", ln)
                       for h, ln in kernel["oom"]):
            r["oom_killed"] = True
    return {"ranks": {str(k): v for k, v in sorted(ranks.items())}, "watchdog": verdicts,
            "kernel": {"xid": kernel["xid"], "oom": [f"{h}: {ln}" for h, ln in kernel["oom"]],
                       "read": all(kernel["read"]) if kernel["read"] else False,
                       "log_errors": kernel.get("log_errors", [])},
            "deadline": deadline}


def _watchdog_parts(watchdog: Mapping[str, Any],
                    causes: Mapping[str, Any]) -> tuple[list[str], list[int]]:
    """What the launcher's watchdog saw: the sentences, and the ranks it names as hung."""
    first = [int(x) for x in watchdog.get("ranks", [])]
    if watchdog.get("kind") == "exited":
        r = causes["ranks"].get(str(first[0]), {}) if first else {}
        return [_describe_rank(first[0], r) if first else watchdog.get("detail", ""),
                f"the watchdog on {watchdog['host']} ended the world "
                f"{watchdog.get('after_s')} s into the run"], []
    where = "; ".join(f"rank {x} {_where(causes['ranks'].get(str(x), {}).get('last'))}"
                      for x in first)
    return [f"{watchdog.get('detail')} ({where}); the watchdog on {watchdog['host']} ended "
            f"the world {watchdog.get('after_s')} s into the run"], first


def _evidence(causes: Mapping[str, Any], world: Sequence[HostRun]) -> list[str]:
    """Kernel-log XIDs, errors in the log, and NCCL flight-recorder dumps, when there are any."""
    parts = []
    if causes["kernel"]["xid"]:
        parts.append("new XID lines in the kernel log during the run: "
                     + "; ".join(causes["kernel"]["xid"][:3]))
    if causes["kernel"]["log_errors"]:
        parts.append("errors in the log: " + "; ".join(causes["kernel"]["log_errors"][:2]))
    traces = [f"{m.spec.name}: {m.files['traces']}" for m in world if m.files.get("traces")]
    if traces:
        parts.append("NCCL flight recorder dumps: " + "; ".join(traces))
    return parts


def _describe_rank(rank: int, r: Mapping[str, Any]) -> str:
    who = f"rank {rank} ({r.get('host')}" + (f", pid {r['pid']})" if r.get("pid") else ")")
    if r.get("signal"):
        how = f"was killed by {r['signal']}"
    elif r.get("exit_code") not in (None, 0):
        how = f"exited with code {r['exit_code']}"
    else:
        how = "ended"
    text = f"{who} {how} {_where(r.get('last'))}"
    if r.get("oom_killed"):
        text += " (out of memory? the kernel's OOM killer logged this pid)"
    if r.get("error"):
        text += f": {r['error'][:300]}"
    return text


def failure(
    h: HostRun, world: Sequence[HostRun], level: str, *, timings: dict[str, float],
    names: tuple[str, ...], log_tail: str | None, notes: Sequence[str],
) -> SmokeResult:
    """No result.json: say exactly why, per rank, from what the run left behind."""
    causes = rank_causes(world)
    progress: dict[int, dict[str, Any]] = {}
    rank_files: dict[int, dict[str, Any]] = {}
    for m in world:
        for k, v in m.files.items():
            obj = loads(v)
            if obj is not None and k.startswith("rank") and (n := rank_of(obj, world)) is not None:
                (progress if k.endswith(".progress") else rank_files)[n] = obj
    nranks = max([sum(m.nproc for m in world), *(r + 1 for r in [*progress, *rank_files])])
    # The controller's transport timeout lies beyond the host-side limit and its kill grace
    # (command.controller_timeout): it fires only where a host did not end the run itself.
    controller = {m.spec.name: round(m.launch.duration_s, 1) for m in world
                  if m.launch is not None and m.launch.timed_out}
    if controller:
        causes["controller_timeout"] = {"hosts": controller, "fired": True}
    host_deadline = [n for n, d in causes["deadline"].items() if d["fired"]]
    watchdog = causes["watchdog"][0] if causes["watchdog"] else None
    # A rank whose collective timed out waited for others: that deadline really fired too.
    pg = sorted(int(r) for r, info in causes["ranks"].items()
                if _TIMED_OUT.search(str(info.get("error", ""))))
    own = sorted(int(r) for r, info in causes["ranks"].items()
                 if (info.get("last") or {}).get("state") == "deadline")
    if own:  # the ranks' own last-resort deadline (--deadline-in) fired
        host_deadline = host_deadline or [f"rank(s) {', '.join(map(str, own))} (their own)"]
        causes["deadline"]["ranks"] = {"ranks": own, "fired": True}
    parts: list[str] = []
    hung: list[int] = []
    status: SmokeStatus = "error"
    if host_deadline or controller or (pg and (watchdog is None
                                               or watchdog.get("kind") == "exited")):
        status = "timeout"
        if host_deadline or controller:
            backstop = ", ".join(f"{n} after {secs} s" for n, secs in controller.items())
            which = (f"the host-side deadline fired on {', '.join(host_deadline)}"
                     + "".join(f" ({causes['deadline'][n]['elapsed_s']} s of "
                               f"{causes['deadline'][n]['limit_s']} s)" for n in host_deadline
                               if n in causes["deadline"])
                     + (f"; the controller's timeout also fired on {backstop}"
                        if controller else "")) if host_deadline else \
                (f"the controller's timeout fired on {backstop}: the host did not end the run "
                 "within its own deadline and kill grace (stopped answering?)")
            parts.append(f"the run exceeded its timeout and was killed: {which}")
        else:
            first = causes["ranks"][str(pg[0])]
            parts.append(f"the process-group timeout fired on rank(s) "
                         f"{', '.join(map(str, pg))}: {str(first.get('error'))[:300]}")
            causes["deadline"]["process_group"] = {"ranks": pg, "fired": True}
        hung, why = hung_ranks(progress, rank_files, nranks) if progress else ([], "")
        if why:
            parts.append(why)
    elif watchdog is not None:
        parts, hung = _watchdog_parts(watchdog, causes)
    else:
        dead = [(int(k), r) for k, r in causes["ranks"].items()
                if r.get("signal") or r.get("exit_code") not in (None, 0)]
        parts += [_describe_rank(k, r) for k, r in dead[:3]]
        errors = [f"rank {k}: {r['error']}" for k, r in causes["ranks"].items() if r.get("error")]
        parts += [e[:400] for e in errors[:3] if not dead]
    parts += _evidence(causes, world)
    no_torch = _no_torch(h, log_tail)
    if no_torch:
        parts.insert(0, no_torch)
    if not parts:
        rc = h.launch.rc if h.launch is not None else None
        last = (log_tail or "").strip().splitlines()[-1:] or ["no output"]
        parts.append(f"the launcher exited {rc} without a result: {last[0][:300]}")
    parts += notes
    return SmokeResult(status=status, level=level, error="; ".join(parts),
                       hung_ranks=tuple(hung), timings_s=timings, hosts=names,
                       log_tail=log_tail, device_count=h.gpu_count, causes=causes)


def _no_torch(h: HostRun, log_tail: str | None) -> str | None:
    """The headline when the interpreter has no torch (issue 25: over SSH, PATH is not the login
    PATH, so `python3` is often a system python without it)."""
    if "No module named 'torch'" not in (log_tail or ""):
        return None
    if h.runtime == "docker":
        return (f"No module named 'torch' in the image {h.spec.expect.pytorch_image}: use an "
                "image that ships torch (pytorch_image)")
    return (f"No module named 'torch' for {h.spec.expect.smoke_python} on {h.spec.name}: set "
            "gpufleet_smoke_python to an interpreter that has torch (a non-login ssh session "
            "does not read the login PATH: find one with `ssh HOST 'ls /opt/*/.venv/bin/python "
            "~/.venv/bin/python 2>/dev/null'`)")


def result(h: HostRun, world: Sequence[HostRun], level: str, elapsed: float) -> SmokeResult:
    found = None
    for m in world:
        found = found or loads(m.files.get("result.json"))
    tails = [f"[{m.spec.name}] {m.files.get('log', '')[-LOG_TAIL_BYTES // len(world):]}"
             for m in world if m.files.get("log")]
    log_tail = "\n".join(tails)[-LOG_TAIL_BYTES:] if tails else None
    timings = {"runner_total_s": round(elapsed, 3)}
    if h.launch is not None:
        timings["launch_s"] = round(h.launch.duration_s, 3)
    names = tuple(m.spec.name for m in world) if len(world) > 1 else ()
    notes = [m.leftover for m in world if m.leftover]
    world_size = sum(m.nproc for m in world)
    if ignored := ignored_rank_files(world):
        notes.append(f"ignored rank file(s) outside the world of {world_size}: "
                     + ", ".join(ignored[:5]))
    if found is not None:
        try:
            return from_result(h, result=found, level=level, timings=timings, names=names,
                               log_tail=log_tail, notes=notes, world=world)
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            # result.json is the host's data: an odd one is a failed run, not a lost host.
            notes = [*notes, f"could not read result.json: {type(exc).__name__}: {exc}"[:300]]
    notes += [m.ended_by_runner for m in world if m.ended_by_runner]
    return failure(h, world, level, timings=timings, names=names, log_tail=log_tail,
                   notes=notes)


def _finite(raw: object, *, keys: bool = True) -> dict[str, float]:
    """The finite numbers of a result.json mapping (`keys`: under integer keys only)."""
    if not isinstance(raw, Mapping):
        return {}
    got = {str(k): number(v) for k, v in raw.items() if not keys or str(k).isdigit()}
    return {k: v for k, v in got.items() if v is not None}


def from_result(
    h: HostRun,
    *,
    result: Mapping[str, Any],
    level: str,
    timings: dict[str, float],
    names: tuple[str, ...],
    log_tail: str | None,
    notes: Sequence[str],
    world: Sequence[HostRun],
) -> SmokeResult:
    ranks = tuple(
        RankInfo(rank=int(r["rank"]), host=r.get("host"), local_rank=int(r.get("local_rank", 0)),
                 torch=r.get("torch"), cuda=r.get("cuda"), cudnn=r.get("cudnn"),
                 nccl=r.get("nccl"), device=r.get("device"), device_name=r.get("device_name"))
        for r in result.get("ranks", [])
    )  # fmt: skip
    checks = tuple(
        SmokeCheck(name=str(c["name"]), passed=bool(c["passed"]),
                   detail=str(c.get("detail", "")), data=c.get("data") or {})
        for c in result.get("checks", [])
    )  # fmt: skip
    # result.json is the host's: "inf", "nan" or a string is no measurement (issue 22 F3)
    busbw = {int(k): v for k, v in _finite(result.get("busbw_gbps")).items()}
    if len(world) > 1:
        for c in checks:
            per_host = c.data.get("per_host_busbw_gbps", {}) if c.name == "busbw" else {}
            if h.spec.name in per_host:
                busbw = {int(k): v for k, v in _finite(per_host[h.spec.name]).items()}
    mine = {r.rank: r.local_rank for r in ranks if r.host == h.spec.name}
    tflops = {mine[int(k)]: v for k, v in _finite(result.get("matmul_tflops")).items()
              if int(k) in mine}
    for k, v in _finite(result.get("timings_s"), keys=False).items():
        timings[k] = round(v, 3)
    here = [r for r in result.get("ranks", []) if r.get("host") == h.spec.name]
    status: SmokeStatus = "pass" if result.get("status") == "pass" else "fail"
    error = None
    if status == "fail":
        error = "; ".join(f"{c.name}: {c.detail}" for c in checks if not c.passed)[:1000]
    launch_rc = h.launch.rc if h.launch is not None else None
    if launch_rc not in (0, None) and status == "pass":
        notes = [*notes, f"the launcher exited {launch_rc} after the result was written"]
    if notes:
        error = "; ".join([*([error] if error else []), *notes])
    backend = result.get("backend")
    transport = GLOO if backend == "gloo" else parse_nccl_init(
        ln for m in world for ln in m.files.get("nccl_init", "").splitlines())
    return SmokeResult(
        status=status, level=str(result.get("level", level)), backend=backend,
        world_size=int(result.get("world_size", len(ranks))),
        device_count=int(here[0]["torch_device_count"]) if here else h.gpu_count,
        ranks=ranks, checks=checks, busbw_gbps=busbw, matmul_tflops=tflops,
        timings_s=timings, error=error, hosts=names, log_tail=log_tail,
        causes=rank_causes(world) if status != "pass" else {}, transport=transport,
    )  # fmt: skip
