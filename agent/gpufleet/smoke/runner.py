"""Run smoke_ddp.py on a host, or on a group of hosts as one world, and read back its verdict.

Per host: one preflight command (run dir, and what `facts` lacks: GPU list, compute processes,
topology, docker runtimes), the script copied over the same transport, then torchrun in its own
session (`setsid`) under a host-side `timeout`, every process marked with GPUFLEET_SMOKE_RUN=<id>.
Afterwards, always, one cleanup command kills the session and anything still carrying the marker
(torchrun starts its workers in sessions of their own, so a group kill alone misses them), checks
that nothing of the run remains, prints the files the ranks wrote, and removes the run dir.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet.model import (
    CommandResult,
    Facts,
    HostSpec,
    RankInfo,
    SmokeCheck,
    SmokeResult,
    SmokeStatus,
)
from gpufleet.transport.base import Transport, TransportError

SCRIPT = Path(__file__).with_name("smoke_ddp.py")
MARKER = "GPUFLEET_SMOKE_RUN"
LABEL = "gpufleet.smoke"  # on every container of a run, value = the run id
LOG_TAIL_BYTES = 6000
MIB = 1 << 20
GIB = 1 << 30

# nccl-tests all_reduce_perf out-of-place busbw (GB/s), REFERENCE.md "Measured on a 2xH200
# machine": keyed by (GPU name, GPUs in the world, GPU-GPU link from `nvidia-smi topo -m`).
REFERENCE_BUSBW: Mapping[tuple[str, int, str], Mapping[int, float]] = {
    ("NVIDIA H200", 2, "NV18"): {
        1 * MIB: 66.6, 4 * MIB: 119.4, 16 * MIB: 212.9, 64 * MIB: 267.8,
        256 * MIB: 298.3, 1 * GIB: 330.3, 4 * GIB: 343.7,
    },
}  # fmt: skip
# Sizes >= 64 MiB must reach this fraction of the reference (the check, not the benchmark goal).
REFERENCE_FRACTION = 0.8
CPU_RANKS = 2  # ranks on a host without GPUs: enough for real collectives, cheap for CI


@dataclass(frozen=True)
class SmokeOptions:
    """Knobs the CLI does not expose; tests and benchmarks set them (or GPUFLEET_SMOKE_* env)."""

    pg_timeout: float | None = None  # per collective; default derived from the overall timeout
    nproc: int | None = None  # ranks per host; default: GPU count, or CPU_RANKS without GPUs
    sizes: tuple[int, ...] | None = None  # bandwidth sweep sizes (bytes), overriding the level
    test_hang_rank: int | None = None  # test-only: this global rank stops before a collective
    test_hang_phase: str = "allreduce_exact"
    bw_method: str = "auto"  # auto|graph|loop: how small all-reduces are launched (see script)
    env: Mapping[str, str] = field(default_factory=dict)  # extra environment for the ranks
    launcher: str = "auto"  # auto: the script's --spawn on one node with host python; torchrun

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> SmokeOptions:
        hang = environ.get("GPUFLEET_SMOKE_TEST_HANG")  # "RANK" or "RANK:PHASE"
        rank, _, ph = (hang or "").partition(":")
        sizes = environ.get("GPUFLEET_SMOKE_SIZES")
        pg = environ.get("GPUFLEET_SMOKE_PG_TIMEOUT")
        nproc = environ.get("GPUFLEET_SMOKE_NPROC")
        return cls(
            pg_timeout=float(pg) if pg else None,
            nproc=int(nproc) if nproc else None,
            sizes=tuple(int(s) for s in sizes.split(",") if s) if sizes else None,
            test_hang_rank=int(rank) if rank else None,
            test_hang_phase=ph or "allreduce_exact",
            launcher=environ.get("GPUFLEET_SMOKE_LAUNCHER", "auto"),
        )


@dataclass
class _Host:
    """What the preflight learned about one host, and the run's state there."""

    spec: HostSpec
    transport: Transport
    facts: Facts | None
    run_id: str
    run_dir: str = ""
    gpu_count: int | None = None  # nvidia-smi's count; None = unknown
    gpu_names: tuple[str, ...] = ()
    link: str | None = None
    busy: tuple[str, ...] = ()
    runtime: str = "host"
    runtimes: tuple[str, ...] = ()  # docker's runtimes (docker info), when known
    nproc: int = 0
    script: str = ""
    versions: dict[str, Any] = field(default_factory=dict)
    launch: CommandResult | None = None
    files: dict[str, str] = field(default_factory=dict)
    leftover: str = ""
    error: str | None = None


# --------------------------------------------------------------------------- public API


def run_smoke(
    spec: HostSpec,
    transport: Transport,
    facts: Facts | None,
    *,
    level: str = "quick",
    timeout: float = 300.0,
    force: bool = False,
    options: SmokeOptions | None = None,
) -> SmokeResult:
    """The smoke test on one host, one rank per GPU (or CPU_RANKS gloo ranks without GPUs)."""
    opts = options if options is not None else SmokeOptions.from_env(os.environ)
    started = time.monotonic()
    h = _Host(spec, transport, facts, _new_run_id())
    try:
        early = _start_single(h, level, opts, timeout, force)
    except BaseException:
        # Interrupted (Ctrl-C) or a broken transport: never leave the run behind on the host.
        _cleanup(h, quiet=True)
        raise
    _cleanup(h, quiet=early is not None)
    return early or _result(h, [h], level, time.monotonic() - started)


def _start_single(
    h: _Host, level: str, opts: SmokeOptions, timeout: float, force: bool
) -> SmokeResult | None:
    """Preflight and launch on one host; a SmokeResult when it must not (or could not) run."""
    try:
        _preflight(h)
    except TransportError as e:
        return SmokeResult(status="error", level=level, error=e.message)
    if h.error:
        return SmokeResult(status="error", level=level, error=h.error)
    if h.busy and not force:
        return SmokeResult(
            status="busy", level=level, device_count=h.gpu_count,
            error=f"{h.spec.name}: GPU compute processes already running ("
            + "; ".join(h.busy) + "); the smoke test would disturb them and measure "
            "too little: rerun with --force to test anyway",
        )  # fmt: skip
    _upload(h)
    nproc = _nproc(h, opts)
    argv = _command(h, level=level, opts=opts, nproc=nproc, ref=_reference(h, nproc),
                    timeout=timeout, rendezvous=None)
    _launch(h, argv, timeout)
    return None


def run_multinode(
    members: Sequence[tuple[HostSpec, Transport, Facts | None]],
    *,
    level: str = "quick",
    timeout: float = 600.0,
    force: bool = False,
    options: SmokeOptions | None = None,
) -> dict[str, SmokeResult]:
    """One world over every member (torchrun with c10d rendezvous on the first host).

    Each host gets a SmokeResult carrying the world's checks and that host's own bandwidth.
    Before launching, torch/CUDA/NCCL versions are compared across the group: mismatched NCCL
    versions abort or hang at init (REFERENCE.md), so a mismatch is refused with status "error".
    """
    opts = options if options is not None else SmokeOptions.from_env(os.environ)
    started = time.monotonic()
    run_id = _new_run_id()
    hosts = [_Host(s, t, f, run_id) for s, t, f in members]
    if not hosts:
        return {}
    try:
        _each(hosts, _prepare_member)
        failed = [h for h in hosts if h.error]
        if failed:
            msg = "; ".join(f"{h.spec.name}: {h.error}" for h in failed)
            return _all(hosts, level, f"multinode smoke not started: {msg}")
        mismatch = _version_mismatch(hosts)
        if mismatch:
            return _all(hosts, level, mismatch)
        busy = [h for h in hosts if h.busy]
        if busy and not force:
            _each(hosts, lambda h: _cleanup(h, quiet=True))
            why = "; ".join(f"{h.spec.name}: {', '.join(h.busy)}" for h in busy)
            names = tuple(h.spec.name for h in hosts)
            return {h.spec.name: SmokeResult(
                status="busy" if h.busy else "skipped", level=level, hosts=names,
                error=f"multinode smoke not started: GPU compute processes already running "
                f"({why}); rerun with --force to test anyway") for h in hosts}  # fmt: skip
        nprocs = {_nproc(h, opts) for h in hosts}
        if len(nprocs) != 1:
            counts = ", ".join(f"{h.spec.name} {_nproc(h, opts)}" for h in hosts)
            return _all(hosts, level, "multinode smoke needs the same number of ranks on every "
                        f"host (torchrun --nproc_per_node), got: {counts}")
        nproc = nprocs.pop()
        first = hosts[0]
        address = first.spec.expect.smoke_address or first.spec.address
        port = 20000 + secrets.randbelow(20000)
        rdzv = {"endpoint": f"{address}:{port}", "id": run_id, "nnodes": len(hosts)}
        argvs = {
            h.spec.name: _command(h, level=level, opts=opts, nproc=nproc, ref=None,
                                  timeout=timeout, rendezvous={**rdzv, "is_host": h is first})
            for h in hosts
        }  # fmt: skip
        _each(hosts, lambda h: _launch(h, argvs[h.spec.name], timeout))
    except BaseException:
        _each(hosts, lambda h: _cleanup(h, quiet=True))
        raise
    _each(hosts, _cleanup)
    elapsed = time.monotonic() - started
    return {h.spec.name: _result(h, hosts, level, elapsed) for h in hosts}


# --------------------------------------------------------------------------- steps

_PREFLIGHT = r"""
d=$(mktemp -d /tmp/gpufleet-smoke.XXXXXXXX) || exit 90
echo "@@gpufleet rundir"; echo "$d"
to=""; command -v timeout >/dev/null 2>&1 && to="timeout -k 2 20"
if [ "$1" = 1 ]; then
  echo "@@gpufleet gpus"
  if command -v nvidia-smi >/dev/null 2>&1; then
    $to nvidia-smi --query-gpu=index,name --format=csv,noheader || echo "@@gpufleet gpus-failed $?"
    echo "@@gpufleet apps"
    $to nvidia-smi --query-compute-apps=pid,process_name,gpu_uuid --format=csv,noheader
    echo "@@gpufleet topo"
    $to nvidia-smi topo -m
  fi
fi
if [ "$2" = 1 ]; then
  echo "@@gpufleet docker"
  $to docker info --format '{{json .Runtimes}}' 2>/dev/null
fi
exit 0
"""

_CLEANUP = r"""
d="$1"; id="$2"; name="$3"; label="$4"
if [ -s "$d/pgid" ]; then kill -KILL -"$(cat "$d/pgid")" 2>/dev/null; fi
if [ -n "$name" ]; then
  docker rm -f "$name" >/dev/null 2>&1
  c=$(docker ps -a -q --filter "label=$label" 2>/dev/null)
  [ -n "$c" ] && docker rm -f $c >/dev/null 2>&1
  c=$(docker ps -a -q --filter "label=$label" 2>/dev/null)
  [ -n "$c" ] && echo "@@gpufleet leftover containers" $c
fi
i=0
while :; do
  left=""
  for p in /proc/[0-9]*; do
    if grep -qxzF "$id" "$p/environ" 2>/dev/null; then left="$left ${p#/proc/}"; fi
  done
  [ -z "$left" ] && break
  if [ $i -ge 25 ]; then echo "@@gpufleet leftover$left"; break; fi
  kill -KILL $left 2>/dev/null; sleep 0.2; i=$((i+1))
done
cd "$d" 2>/dev/null || exit 0
for f in result.json rank*.json rank*.progress; do
  [ -f "$f" ] && { printf '\n@@gpufleet file %s\n' "$f"; cat "$f"; }
done
printf '\n@@gpufleet file log\n'; tail -c %d log 2>/dev/null
printf '\n@@gpufleet file traces\n'; ls nccl_trace_rank_* 2>/dev/null
cd / && rm -rf "$d"
exit 0
""".replace("%d", str(LOG_TAIL_BYTES))


def _new_run_id() -> str:
    return "gfsmoke-" + secrets.token_hex(6)


def _sections(text: str, prefix: str = "@@gpufleet ") -> dict[str, str]:
    out: dict[str, list[str]] = {}
    cur: list[str] | None = None
    for line in text.splitlines():
        if line.startswith(prefix):
            key = line[len(prefix):].strip()
            if key.startswith("file "):
                key = key[5:]
            cur = out.setdefault(key, [])
        elif cur is not None:
            cur.append(line)
    return {k: "\n".join(v).strip("\n") for k, v in out.items()}


def _preflight(h: _Host) -> None:
    facts = h.facts
    need_smi = facts is None
    exp = h.spec.expect
    need_docker = (exp.smoke_runtime in (None, "docker") and exp.pytorch_image is not None
                   and (facts is None or facts.docker is None))
    res = h.transport.run(["sh", "-c", _PREFLIGHT, "sh", str(int(need_smi)),
                           str(int(need_docker))], timeout=60)
    sec = _sections(res.stdout)
    if res.rc != 0 or not sec.get("rundir", "").startswith("/tmp/gpufleet-smoke."):
        h.error = (f"could not create a run directory on {h.spec.name} (mktemp -d under /tmp): "
                   f"{(res.stderr or res.stdout).strip()[-300:] or f'exit {res.rc}'}")
        return
    h.run_dir = sec["rundir"].strip()
    if facts is not None:
        smi_error = facts.errors.get("nvidia_smi", "")
        # No GPUs listed: none there (no nvidia-smi), or unknown (nvidia-smi failed or hung;
        # asking it again would only hang again).
        unknown = not facts.gpus and smi_error and "not found" not in smi_error
        h.gpu_count = None if unknown else len(facts.gpus)
        h.gpu_names = tuple(g.name or "" for g in facts.gpus)
        h.busy = tuple(f"pid {p.pid} {p.name}" for p in facts.gpu_processes)
        if facts.topology is not None:
            h.link = _uniform_link({a: dict(b) for a, b in facts.topology.links.items()})
    elif "gpus" not in sec:
        h.gpu_count = 0  # no nvidia-smi: a host without NVIDIA GPUs
    elif any(k.startswith("gpus-failed") for k in sec):
        h.gpu_count = None
    else:
        rows = [r.split(",", 1) for r in sec["gpus"].splitlines() if r.strip()]
        h.gpu_count = len(rows)
        h.gpu_names = tuple(r[1].strip() for r in rows if len(r) > 1)
        h.busy = tuple(
            f"pid {c[0].strip()} {c[1].strip()}"
            for c in (r.split(",") for r in sec.get("apps", "").splitlines() if r.strip())
            if len(c) >= 2
        )  # fmt: skip
        h.link = _uniform_link(_parse_topo(sec.get("topo", "")))
    runtimes: tuple[str, ...] = ()
    if facts is not None and facts.docker is not None:
        runtimes = facts.docker.runtimes
    elif sec.get("docker"):
        try:
            runtimes = tuple(json.loads(sec["docker"]))
        except (ValueError, TypeError):
            runtimes = ()
    h.runtimes = runtimes
    h.runtime = exp.smoke_runtime or (
        "docker" if exp.pytorch_image and "nvidia" in runtimes else "host"
    )
    if h.runtime == "docker" and not exp.pytorch_image:
        h.error = (f"{h.spec.name}: gpufleet_smoke_runtime is docker but pytorch_image is not set; "
                   "set pytorch_image (and pytorch_image_digest) or gpufleet_smoke_runtime=host")


def _parse_topo(text: str) -> dict[str, dict[str, str]]:
    """`nvidia-smi topo -m` → links between GPUs (just enough to pick a reference)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)  # nvidia-smi underlines the header
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return {}
    header = lines[0].split()
    gpus = [c for c in header if re.fullmatch(r"GPU\d+", c)]
    links: dict[str, dict[str, str]] = {}
    for ln in lines[1:]:
        cells = ln.split()
        if cells and cells[0] in gpus:
            links[cells[0]] = {g: cells[1 + i] for i, g in enumerate(gpus) if 1 + i < len(cells)}
    return links


def _uniform_link(links: Mapping[str, Mapping[str, str]]) -> str | None:
    """The GPU-GPU link type when every pair has the same one ("NV18"), else None."""
    kinds = {v for a, row in links.items() if a.startswith("GPU")
             for b, v in row.items() if b.startswith("GPU") and a != b}
    return kinds.pop() if len(kinds) == 1 else None


def _upload(h: _Host) -> None:
    if h.spec.connection == "local" and h.runtime == "host":
        h.script = str(SCRIPT)  # used in place: it is already on this host
        return
    h.script = f"{h.run_dir}/smoke_ddp.py"
    h.transport.put(SCRIPT.read_bytes(), h.script, 0o644)


def _prepare_member(h: _Host) -> None:
    try:
        _preflight(h)
        if h.error:
            return
        _upload(h)
        res = h.transport.run(_python(h, [h.script, "--run-dir", h.run_dir, "--versions"]),
                              timeout=120)
        line = res.stdout.strip().splitlines()[-1:] or [""]
        try:
            h.versions = json.loads(line[0])
        except ValueError:
            h.error = ("could not read torch/NCCL versions: "
                       + (res.stderr.strip()[-300:] or f"exit {res.rc}"))
    except TransportError as e:
        h.error = e.message


def _version_mismatch(hosts: Sequence[_Host]) -> str | None:
    for key, what in (("nccl", "NCCL"), ("torch", "torch"), ("cuda", "CUDA runtime")):
        seen = {h.spec.name: h.versions.get(key) for h in hosts}
        if len(set(seen.values())) > 1:
            listing = ", ".join(f"{n} {v or 'none'}" for n, v in seen.items())
            hint = (" (NCCL >= 2.23.4 aborts init on any version difference, older versions "
                    "hang)") if key == "nccl" else ""
            return (f"refusing multinode smoke: {what} versions differ across the group: "
                    f"{listing}{hint}; align pytorch_image/pytorch_image_digest or the hosts' "
                    "torch install first")
    return None


def _nproc(h: _Host, opts: SmokeOptions) -> int:
    if opts.nproc:
        return opts.nproc
    return h.gpu_count if h.gpu_count else CPU_RANKS


def _reference(h: _Host, nproc: int) -> Mapping[int, float] | None:
    names = set(h.gpu_names)
    if len(names) != 1 or h.link is None or nproc != h.gpu_count:
        return None
    return REFERENCE_BUSBW.get((names.pop(), nproc, h.link))


def _image(h: _Host) -> str:
    exp = h.spec.expect
    img = exp.pytorch_image or ""
    return f"{img}@{exp.pytorch_image_digest}" if exp.pytorch_image_digest else img


def _python(h: _Host, args: Sequence[str]) -> list[str]:
    """argv running `python args` in the host's smoke runtime (for the version probe)."""
    if h.runtime == "docker":
        return ["docker", "run", "--rm", "--network=host", "--label", f"{LABEL}={h.run_id}",
                "-v", f"{h.run_dir}:{h.run_dir}", _image(h), "python3", *args]
    return [h.spec.expect.smoke_python, *args]


def _command(
    h: _Host,
    *,
    level: str,
    opts: SmokeOptions,
    nproc: int,
    ref: Mapping[int, float] | None,
    timeout: float,
    rendezvous: Mapping[str, Any] | None,
) -> list[str]:
    """The full argv: setsid → sh (records pgid, redirects to log) → timeout → env → launcher."""
    exp = h.spec.expect
    h.nproc = nproc
    pg_timeout = opts.pg_timeout or max(10.0, min(120.0, timeout / 4))
    script_args = [
        h.script, "--run-dir", h.run_dir, "--level", level, "--host", h.spec.name,
        "--pg-timeout", f"{pg_timeout:g}", "--deadline-in", f"{timeout + 15:g}",
    ]  # fmt: skip
    # -1: nvidia-smi could not be read; the script then reports that instead of asking again.
    script_args += ["--smi-count", str(-1 if h.gpu_count is None else h.gpu_count)]
    if exp.gpu_count is not None:
        script_args += ["--expect-gpus", str(exp.gpu_count)]
    if ref:
        script_args += ["--reference", json.dumps({str(k): v for k, v in ref.items()}),
                        "--ref-fraction", str(REFERENCE_FRACTION)]
    if exp.min_busbw_gbps is not None:
        script_args += ["--min-busbw", str(exp.min_busbw_gbps)]
    if opts.sizes:
        script_args += ["--sizes", ",".join(str(s) for s in opts.sizes)]
    if opts.bw_method != "auto":
        script_args += ["--bw-method", opts.bw_method]
    if opts.test_hang_rank is not None:
        script_args += ["--test-hang-rank", str(opts.test_hang_rank),
                        "--test-hang-phase", opts.test_hang_phase]
    trun = [f"--nproc_per_node={nproc}", "--max_restarts=0"]
    if rendezvous is None:
        trun += ["--standalone", "--nnodes=1"]
    else:
        join = max(30, int(timeout / 3))
        conf = f"is_host={int(bool(rendezvous['is_host']))},join_timeout={join}"
        trun += [
            f"--nnodes={rendezvous['nnodes']}", "--rdzv_backend=c10d",
            f"--rdzv_endpoint={rendezvous['endpoint']}", f"--rdzv_id={rendezvous['id']}",
            f"--rdzv_conf={conf}",
        ]  # fmt: skip
        if _torch_at_least(h.versions.get("torch"), (2, 2)):  # pytorch#88922; surely in 2.2
            trun.append(f"--local_addr={exp.smoke_address or h.spec.address}")
    env = {MARKER: h.run_id, "PYTHONUNBUFFERED": "1", **opts.env}
    iface = exp.smoke_interface or (
        "lo" if rendezvous is not None and h.spec.address.startswith("127.") else None
    )
    if iface:
        env.update(GLOO_SOCKET_IFNAME=iface, NCCL_SOCKET_IFNAME=iface)
    if h.runtime == "docker":
        name = _container(h)
        inner = [
            "docker", "run", "--rm", "--name", name, "--label", f"{LABEL}={h.run_id}",
            *_gpu_args(h), "--ipc=host", "--network=host",
            "-v", f"{h.run_dir}:{h.run_dir}",
            *(a for k, v in env.items() for a in ("-e", f"{k}={v}")), "-e", "GPUFLEET_SMOKE_T0",
            _image(h), "torchrun", *trun, *script_args,
        ]  # fmt: skip
        envs = [f"{MARKER}={h.run_id}"]
    elif rendezvous is None and opts.launcher != "torchrun":
        # One node: the script's own launcher starts the ranks; torchrun would first spend
        # 3-4 s importing torch in its launcher process (benchmarks/results, 2026-11-30).
        inner = [exp.smoke_python, h.script, "--spawn", str(nproc), *script_args[1:]]
        envs = [f"{k}={v}" for k, v in env.items()]
    else:
        inner = [exp.smoke_python, "-m", "torch.distributed.run", *trun, *script_args]
        envs = [f"{k}={v}" for k, v in env.items()]
    # timeout's -k leaves torchrun time to TERM its workers before KILL; the workers also carry
    # their own deadline (--deadline-in), and the controller's cleanup kills by marker anyway.
    wrapper = ('d="$1"; shift; echo $$ > "$d/pgid"; '
               'GPUFLEET_SMOKE_T0=$(date +%s.%N 2>/dev/null); export GPUFLEET_SMOKE_T0; '
               'exec "$@" > "$d/log" 2>&1 < /dev/null')
    reaper: list[str] = []
    if h.runtime == "docker":
        # Killing the docker client (Ctrl-C kills the run's process group, and the controller
        # may not get to run the cleanup) leaves its container running: a reaper in a session
        # of its own waits for this session's leader to end, then removes the container.
        wrapper = ('n="$1"; shift; (setsid sh -c \'while kill -0 "$1" 2>/dev/null; do sleep 1; '
                   'done; docker rm -f "$2" >/dev/null 2>&1\' sh "$$" "$n" '
                   '</dev/null >/dev/null 2>&1 &); ' + wrapper)
        reaper = [_container(h)]
    return ["setsid", "-w", "sh", "-c", wrapper, "sh", *reaper, h.run_dir,
            "timeout", "-k", "45", f"{math.ceil(timeout) + 10}",
            "env", *envs, *inner]  # fmt: skip


def _gpu_args(h: _Host) -> list[str]:
    """GPUs into the container only where the host has them (CPU hosts: none, gloo). Unlimited
    locked memory is for NCCL's pinned buffers; raising the hard limit needs CAP_SYS_RESOURCE,
    which a CPU host's engine may lack and gloo does not need."""
    if not h.gpu_count:
        return []
    nvidia = ["--runtime=nvidia"] if "nvidia" in h.runtimes else []
    return ["--gpus", "all", *nvidia, "--ulimit", "memlock=-1"]


def _torch_at_least(version: str | None, want: tuple[int, int]) -> bool:
    """True for "2.11.0+cu130" >= (2, 2); True when unknown (assume a current torch)."""
    m = re.match(r"(\d+)\.(\d+)", version or "")
    return m is None or (int(m.group(1)), int(m.group(2))) >= want


def _container(h: _Host) -> str:
    return f"{h.run_id}-{''.join(c if c.isalnum() else '-' for c in h.spec.name)}"


def _launch(h: _Host, argv: Sequence[str], timeout: float) -> None:
    h.launch = h.transport.run(argv, timeout=timeout)


def _cleanup(h: _Host, *, quiet: bool = False) -> None:
    if not h.run_dir:
        return
    name = _container(h) if h.runtime == "docker" else ""
    try:
        res = h.transport.run(["sh", "-c", _CLEANUP, "sh", h.run_dir, f"{MARKER}={h.run_id}",
                               name, f"{LABEL}={h.run_id}"], timeout=60)
    except (TransportError, OSError) as e:
        if not quiet:
            h.leftover = f"cleanup failed: {e}"
        return
    sec = _sections(res.stdout)
    h.files = sec
    left = [k for k in sec if k.startswith("leftover")]
    if left:
        h.leftover = f"processes of the run still alive after KILL: {left[0][8:].strip()}"
    if res.timed_out:
        h.leftover = "cleanup command timed out; processes of the run may remain"


def _each(hosts: Sequence[_Host], fn: Any) -> None:
    """fn(host) for every host at once (one transport per host, so threads do not share one)."""
    errors: list[BaseException] = []

    def call(h: _Host) -> None:
        try:
            fn(h)
        except BaseException as e:  # re-raised in the caller's thread
            errors.append(e)

    threads = [threading.Thread(target=call, args=(h,), daemon=True) for h in hosts[1:]]
    for t in threads:
        t.start()
    # The first host in this thread, uncaught: Ctrl-C must reach the caller's cleanup now, not
    # after the other hosts' runs end on their own (the cleanup is what ends them).
    fn(hosts[0])
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def _all(hosts: Sequence[_Host], level: str, error: str) -> dict[str, SmokeResult]:
    _each(hosts, lambda h: _cleanup(h, quiet=True))
    names = tuple(h.spec.name for h in hosts)
    return {h.spec.name: SmokeResult(status="error", level=level, error=error, hosts=names)
            for h in hosts}  # fmt: skip


# --------------------------------------------------------------------------- verdict


def _loads(text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def _result(h: _Host, world: Sequence[_Host], level: str, elapsed: float) -> SmokeResult:
    result = None
    for m in world:
        result = result or _loads(m.files.get("result.json"))
    rank_files: dict[int, dict[str, Any]] = {}
    progress: dict[int, dict[str, Any]] = {}
    for m in world:
        for k, v in m.files.items():
            obj = _loads(v)
            if obj is None or not k.startswith("rank"):
                continue
            r = int(obj.get("rank", -1))
            (progress if k.endswith(".progress") else rank_files)[r] = obj
    tails = [f"[{m.spec.name}] {m.files.get('log', '')[-LOG_TAIL_BYTES // len(world):]}"
             for m in world if m.files.get("log")]
    log_tail = "\n".join(tails)[-LOG_TAIL_BYTES:] if tails else None
    launch = h.launch
    timed_out = any(m.launch is not None and (m.launch.timed_out or m.launch.rc in (124, 137))
                    for m in world)
    timings = {"runner_total_s": round(elapsed, 3)}
    if launch is not None:
        timings["launch_s"] = round(launch.duration_s, 3)
    names = tuple(m.spec.name for m in world) if len(world) > 1 else ()
    notes = [m.leftover for m in world if m.leftover]
    traces = [f"{m.spec.name}: {m.files['traces']}" for m in world if m.files.get("traces")]
    if result is not None:
        return _from_result(h, result=result, level=level, timings=timings, names=names,
                            log_tail=log_tail, notes=notes, world=world)
    nranks = max([sum(m.nproc for m in world), *(r + 1 for r in [*progress, *rank_files])])
    hung, why = _hung_ranks(progress, rank_files, nranks) if progress else ([], "")
    errors = [f"rank {r}: {f.get('error')}" for r, f in sorted(rank_files.items())
              if not f.get("ok", True)]
    timeout_like = timed_out or any("timed out" in e.lower() or "timeout" in e.lower()
                                    for e in errors)
    status: SmokeStatus = "timeout" if timeout_like else "error"
    parts = []
    if timed_out:
        parts.append("the run exceeded its timeout and was killed")
    if why:
        parts.append(why)
    parts += [e[:400] for e in errors[:3]]
    if traces:
        parts.append("NCCL flight recorder dumps: " + "; ".join(traces))
    if not parts:
        rc = launch.rc if launch is not None else None
        last = (log_tail or "").strip().splitlines()[-1:] or ["no output"]
        parts.append(f"torchrun exited {rc} without a result: {last[0][:300]}")
    parts += notes
    return SmokeResult(status=status, level=level, error="; ".join(parts),
                       hung_ranks=tuple(hung) if timeout_like else (), timings_s=timings,
                       hosts=names, log_tail=log_tail, device_count=h.gpu_count)


def _hung_ranks(
    progress: Mapping[int, Mapping[str, Any]],
    rank_files: Mapping[int, Mapping[str, Any]],
    nranks: int,
) -> tuple[list[int], str]:
    """Which ranks stopped the others, from where each rank last said it was.

    Position = 2 * collectives entered, +1 while inside one. A rank that errored out of a
    collective (a process-group timeout) was waiting there. The hung ranks are those furthest
    behind; when all are level and inside a collective, the collective itself hung.
    """
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


def _from_result(
    h: _Host,
    *,
    result: Mapping[str, Any],
    level: str,
    timings: dict[str, float],
    names: tuple[str, ...],
    log_tail: str | None,
    notes: Sequence[str],
    world: Sequence[_Host],
) -> SmokeResult:
    ranks = tuple(
        RankInfo(rank=int(r["rank"]), host=r.get("host"), local_rank=int(r.get("local_rank", 0)),
                 torch=r.get("torch"), cuda=r.get("cuda"), cudnn=r.get("cudnn"),
                 nccl=r.get("nccl"), device=r.get("device"), device_name=r.get("device_name"))
        for r in result.get("ranks", [])
    )  # fmt: skip
    checks = tuple(
        SmokeCheck(name=str(c["name"]), passed=bool(c["passed"]), detail=str(c.get("detail", "")),
                   data=c.get("data") or {})
        for c in result.get("checks", [])
    )  # fmt: skip
    busbw = {int(k): float(v) for k, v in (result.get("busbw_gbps") or {}).items()}
    if len(world) > 1:
        for c in checks:
            per_host = c.data.get("per_host_busbw_gbps", {}) if c.name == "busbw" else {}
            if h.spec.name in per_host:
                busbw = {int(k): float(v) for k, v in per_host[h.spec.name].items()}
    mine = {r.rank: r.local_rank for r in ranks if r.host == h.spec.name}
    tflops = {mine[int(k)]: float(v) for k, v in (result.get("matmul_tflops") or {}).items()
              if v is not None and int(k) in mine}
    for k, v in (result.get("timings_s") or {}).items():
        timings[str(k)] = round(float(v), 3)
    here = [r for r in result.get("ranks", []) if r.get("host") == h.spec.name]
    status: SmokeStatus = "pass" if result.get("status") == "pass" else "fail"
    error = None
    if status == "fail":
        error = "; ".join(f"{c.name}: {c.detail}" for c in checks if not c.passed)[:1000]
    launch_rc = h.launch.rc if h.launch is not None else None
    if launch_rc not in (0, None) and status == "pass":
        notes = [*notes, f"torchrun exited {launch_rc} after the result was written"]
    if notes:
        error = "; ".join([*([error] if error else []), *notes])
    return SmokeResult(
        status=status, level=str(result.get("level", level)), backend=result.get("backend"),
        world_size=int(result.get("world_size", len(ranks))),
        device_count=int(here[0]["torch_device_count"]) if here else h.gpu_count,
        ranks=ranks, checks=checks, busbw_gbps=busbw, matmul_tflops=tflops,
        timings_s=timings, error=error, hosts=names, log_tail=log_tail,
    )  # fmt: skip
