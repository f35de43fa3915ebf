"""Run the smoke test on a host, or on a group of hosts as one world, and read back its verdict.

Per host (its facts already collected by gpufleet.probes): one preflight command (run dir, NIC
rates, and docker runtimes or NCCL settings where the facts lack them), the host-side package
copied over the same transport as one zip (smoke/bundle.py), then torchrun in its own
session (`setsid`) under a host-side `timeout`, every process marked with GPUFLEET_SMOKE_RUN=<id>.
Afterwards, always, one cleanup command kills the session and anything still carrying the marker
(torchrun starts its workers in sessions of their own, so a group kill alone misses them), checks
that nothing of the run remains, prints the files the ranks wrote, and removes the run dir.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from gpufleet.model import Facts, HostSpec, SmokeResult, Topology, fmt_bytes
from gpufleet.probes.sections import STDERR_MARK, split_sections
from gpufleet.sku import bandwidth as expect  # the busbw model (was gpufleet.expect)
from gpufleet.smoke import bundle
from gpufleet.smoke import nccl_paths as nccl_log
from gpufleet.smoke.command import (
    build_command,
    container_name,
    controller_timeout,
    python_argv,
)
from gpufleet.smoke.hostrun import (
    CPU_RANKS,
    LABEL,
    LOG_TAIL_BYTES,
    MARKER,
    HostRun,
    SmokeOptions,
)
from gpufleet.smoke.verdict import loads, result
from gpufleet.transport.base import Transport, TransportError

__all__ = ["MARKER", "SmokeOptions", "run_multinode", "run_smoke"]


# --------------------------------------------------------------------------- public API


def run_smoke(
    spec: HostSpec,
    transport: Transport,
    facts: Facts,
    *,
    level: str = "quick",
    timeout: float = 300.0,
    force: bool = False,
    options: SmokeOptions | None = None,
) -> SmokeResult:
    """The smoke test on one host, one rank per GPU (or CPU_RANKS gloo ranks without GPUs).

    `facts`: the host's, from gpufleet.probes.collect (GPUs, processes, topology, docker).
    """
    opts = options if options is not None else SmokeOptions.from_env(os.environ)
    started = time.monotonic()
    h = HostRun(spec, transport, facts, _new_run_id())
    try:
        early = _start_single(h, level, opts, timeout, force)
    except BaseException:
        # Interrupted (Ctrl-C) or a broken transport: never leave the run behind on the host.
        _cleanup(h, quiet=True)
        raise
    _cleanup(h, quiet=early is not None)
    return early or _with_torch_pythons(h, result(h, [h], level, time.monotonic() - started))


# Where a torch often lives outside a non-login ssh PATH (venvs under /opt, conda, the user's).
_FIND_TORCH = r"""
for p in /opt/*/.venv/bin/python /opt/*/bin/python /opt/conda/bin/python "$HOME"/.venv/bin/python \
         "$HOME"/miniconda3/bin/python /usr/local/bin/python3; do
  [ -x "$p" ] && "$p" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("torch") is None)' \
    2>/dev/null && echo "$p"
done
exit 0
"""


def _with_torch_pythons(h: HostRun, res: SmokeResult) -> SmokeResult:
    """A run that failed on "No module named 'torch'" also lists the host's interpreters that
    have torch (issue 25): one short round trip, only on that failure."""
    if res.error is None or not res.error.startswith("No module named 'torch' for ") \
            or h.runtime != "host":
        return res
    try:
        found = h.transport.run(["sh", "-c", _FIND_TORCH], timeout=30).stdout.split()
    except TransportError:
        return res
    names = [p for p in dict.fromkeys(found) if p.startswith(("/", "~"))][:5]
    extra = (f"; interpreters with torch on {h.spec.name}: " + ", ".join(names)) if names else \
        f"; no interpreter with torch found on {h.spec.name} in /opt, conda or ~/.venv"
    head, sep, rest = res.error.partition("; ")
    return dataclasses.replace(res, error=head + extra + sep + rest)


def _start_single(
    h: HostRun, level: str, opts: SmokeOptions, timeout: float, force: bool
) -> SmokeResult | None:
    """Preflight and launch on one host; a SmokeResult when it must not (or could not) run."""
    try:
        _preflight(h)
    except TransportError as e:
        return SmokeResult(status="error", level=level, error=e.message)
    if h.error:
        return SmokeResult(status="error", level=level, error=h.error)
    if h.gpu_count is None and not opts.nproc:
        # nvidia-smi failed or hung: no world size to start (a guessed one failed phantom
        # ranks on a 1-GPU host, issue 25); GF415 names a hang.
        return SmokeResult(
            status="error", level=level, error=f"{h.spec.name}: the GPUs could not be counted ("
            + (h.facts.errors.get("nvidia_smi") or "nvidia-smi failed")
            + "); the smoke test starts no ranks it cannot place")
    if h.busy and not force:
        return SmokeResult(
            status="busy", level=level, device_count=h.gpu_count,
            error=f"{h.spec.name}: GPU compute processes already running ("
            + "; ".join(h.busy) + "); the smoke test would disturb them and measure "
            "too little: rerun with --force to test anyway",
        )  # fmt: skip
    _upload(h)
    nproc = _nproc(h, opts)
    argv = build_command(h, level=level, opts=opts, nproc=nproc, ref=_reference(h, nproc),
                    timeout=timeout, rendezvous=None)
    _launch(h, argv, timeout)
    return None


def run_multinode(
    members: Sequence[tuple[HostSpec, Transport, Facts]],
    *,
    level: str = "quick",
    timeout: float = 600.0,
    force: bool = False,
    options: SmokeOptions | None = None,
    versions: Mapping[str, Mapping[str, str | None]] | None = None,
) -> dict[str, SmokeResult]:
    """One world over every member, node ranks in their order, the store on the first host
    (the package's launcher; torchrun's c10d rendezvous where torchrun runs: smoke/command.py).

    Each host gets a SmokeResult carrying the world's checks and that host's own bandwidth.
    Before launching, torch/CUDA/NCCL versions are compared across the group: mismatched NCCL
    versions abort or hang at init (REFERENCE.md), so a mismatch is refused with status "error".
    `versions` (host name -> {"torch", "cuda", "nccl"}): what a caller already read from those
    hosts (localize, once before its search); used, and compared, instead of probing them again
    (a torch import per host per world). Hosts not in it, with an empty entry, or running the
    smoke test in a container (the image's torch, not the host's) are probed.
    """
    opts = options if options is not None else SmokeOptions.from_env(os.environ)
    started = time.monotonic()
    run_id = _new_run_id()
    hosts = [HostRun(s, t, f, run_id) for s, t, f in members]
    if not hosts:
        return {}
    known = {n: dict(v) for n, v in (versions or {}).items() if v}
    try:
        _each(hosts, lambda h: _prepare_member(h, known.get(h.spec.name)))
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
        world = expect.expect_world([(_expectation(h, nproc), expect.links_from_facts(h.facts))
                                   for h in hosts])
        for h in hosts:  # every host judges the world's sweep against the world's expectation
            h.expectation = world
        ref = dict(world.busbw_gbps) if world is not None else None
        argvs = {
            h.spec.name: build_command(h, level=level, opts=opts, nproc=nproc, ref=ref,
                                  timeout=timeout, rendezvous={**rdzv, "is_host": h is first,
                                                               "node_rank": i})
            for i, h in enumerate(hosts)
        }  # fmt: skip
        _launch_world(hosts, argvs, timeout)
    except BaseException:
        _each(hosts, lambda h: _cleanup(h, quiet=True))
        raise
    _each(hosts, _cleanup)
    elapsed = time.monotonic() - started
    return {h.spec.name: result(h, hosts, level, elapsed) for h in hosts}


# --------------------------------------------------------------------------- steps

# Sections in the probe's format (`==gpufleet== NAME rc=N`, gpufleet.probes.sections); the
# facts already hold the GPUs, processes and topology. $1: docker runtimes wanted, $2: NCCL
# settings wanted, $3: the run id.
_PREFLIGHT = r"""
d=$(mktemp -d "/tmp/gpufleet-smoke.$1.XXXXXXXX") || exit 90
printf '==gpufleet== rundir rc=0\n%s\n' "$d"
w=0; { printf 'gpufleet-write-test\n' >"$d/.w"; } 2>/dev/null && [ -s "$d/.w" ] && w=1
rm -f "$d/.w"
printf '==gpufleet== rundir_space rc=0\nwritable=%s\nfree_kib=%s\n' "$w" \
  "$(df -Pk "$d" 2>/dev/null | awk 'NR == 2 { print $4 }')"
exit 0
"""
# What a run writes in its directory besides the bundle: logs, progress and result files.
RUN_DIR_SLACK = 1 << 20

_CLEANUP = r"""
d="$1"; id="$2"; name="$3"; label="$4"
if [ -s "$d/pgid" ]; then kill -KILL -"$(cat "$d/pgid")" 2>/dev/null; fi
if [ -n "$name" ]; then
  docker rm -f "$name" >/dev/null 2>&1
  c=$(docker ps -a -q --filter "label=$label" 2>/dev/null)
  [ -n "$c" ] && docker rm -f $c >/dev/null 2>&1
  c=$(docker ps -a -q --filter "label=$label" 2>/dev/null)
  [ -n "$c" ] && printf '\n==gpufleet== leftover_containers rc=0\ncontainers %s\n' "$(echo $c)"
fi
i=0
while :; do
  left=""
  for p in /proc/[0-9]*; do
    if grep -qxzF "$id" "$p/environ" 2>/dev/null; then left="$left ${p#/proc/}"; fi
  done
  [ -z "$left" ] && break
  if [ $i -ge 25 ]; then printf '\n==gpufleet== leftover rc=0\n%s\n' "${left# }"; break; fi
  kill -KILL $left 2>/dev/null; sleep 0.2; i=$((i+1))
done
[ "$4" = kill-only ] && exit 0
cd "$d" 2>/dev/null || exit 0
for f in result.json launcher.json exit rank*.json rank*.progress; do
  [ -f "$f" ] && { printf '\n==gpufleet== %s rc=0\n' "$f"; cat "$f"; }
done
printf '\n==gpufleet== log rc=0\n'; grep -v ' NCCL INFO ' log 2>/dev/null | tail -c %d
printf '\n==gpufleet== nccl_init rc=0\n'
sed -n 's/.* NCCL INFO //p' log 2>/dev/null | grep -E "$5" | sort -u | head -n @MAX@
printf '\n==gpufleet== traces rc=0\n'; ls nccl_trace_rank_* 2>/dev/null
cd / && rm -rf "$d"
exit 0
""".replace("%d", str(LOG_TAIL_BYTES)).replace("@MAX@", str(nccl_log.MAX_LINES))


def _new_run_id() -> str:
    return "gfsmoke-" + secrets.token_hex(6)


def _sections(text: str) -> dict[str, str]:
    """The preflight's or cleanup's sections, NAME -> text as the host printed it."""
    out = {}
    for name, sec in split_sections(text).items():
        body = sec.stdout if not sec.stderr else f"{sec.stdout}\n{STDERR_MARK}\n{sec.stderr}"
        out[name] = body.strip("\n")
    return out


def _preflight(h: HostRun) -> None:
    facts = h.facts
    exp = h.spec.expect
    res = h.transport.run(["sh", "-c", _PREFLIGHT, "sh", h.run_id], timeout=60)
    sec = _sections(res.stdout)
    if res.rc != 0 or not sec.get("rundir", "").startswith("/tmp/gpufleet-smoke."):
        h.error = (f"could not create a run directory on {h.spec.name} (mktemp -d under /tmp): "
                   f"{(res.stderr or res.stdout).strip()[-300:] or f'exit {res.rc}'}")
        return
    h.run_dir = sec["rundir"].strip()
    if _no_room(h, sec.get("rundir_space", "")):
        return
    smi_error = facts.errors.get("nvidia_smi", "")
    # No GPUs listed: none there (no nvidia-smi), or unknown (nvidia-smi failed or hung;
    # asking it again would only hang again).
    unknown = not facts.gpus and smi_error and "not found" not in smi_error
    h.gpu_count = None if unknown else len(facts.gpus)
    h.gpu_names = tuple(g.name or "" for g in facts.gpus)
    h.busy = tuple(f"pid {p.pid} {p.name}" for p in facts.gpu_processes)
    if facts.topology is not None:
        h.link = _uniform_link(facts.topology)
    # Everything else the run needs is a fact the probe already read (no second probe path).
    runtimes = facts.docker.runtimes if facts.docker is not None else ()
    h.runtimes = runtimes
    h.runtime = exp.smoke_runtime or (
        "docker" if exp.pytorch_image and "nvidia" in runtimes else "host"
    )
    if h.runtime == "docker" and not exp.pytorch_image:
        h.error = (f"{h.spec.name}: gpufleet_smoke_runtime is docker but pytorch_image is not set; "
                   "set pytorch_image (and pytorch_image_digest) or gpufleet_smoke_runtime=host")
    h.nccl = facts.nccl_config


def _no_room(h: HostRun, space: str) -> bool:
    """A run directory that takes no write (a full /tmp) is the host's error, said as such:
    ENOSPC and where, not a launcher that "exited without a result" later."""
    kv = dict(line.split("=", 1) for line in space.splitlines() if "=" in line)
    free = kv.get("free_kib", "").strip()
    free_b = int(free) * 1024 if free.isdigit() else None
    need = len(bundle.build()) + RUN_DIR_SLACK
    if kv.get("writable", "1").strip() != "0" and (free_b is None or free_b >= need):
        return False
    h.error = (f"cannot upload the smoke bundle to {h.run_dir} on {h.spec.name}: no space left "
               f"on device (ENOSPC): /tmp has "
               f"{'an unknown amount' if free_b is None else fmt_bytes(free_b)} free, the smoke "
               f"needs ~{fmt_bytes(need)}")
    return True


def _expectation(h: HostRun, nproc: int) -> expect.LinkBound | None:
    if not h.gpu_count or nproc > h.gpu_count:
        return None
    return expect.expect_host(expect.links_from_facts(h.facts), nproc)


def _uniform_link(topology: Topology) -> str | None:
    """The GPU-GPU link type when every pair has the same one ("NV18"), else None."""
    kinds = topology.gpu_link_kinds()
    return next(iter(kinds)) if len(kinds) == 1 else None


def _upload(h: HostRun) -> None:
    """The host-side package, as one zip in the run dir (also for the local host: one path)."""
    h.script = f"{h.run_dir}/{bundle.NAME}"
    h.transport.put(bundle.build(), h.script, 0o644)


def _prepare_member(h: HostRun, known: dict[str, str | None] | None = None) -> None:
    try:
        _preflight(h)
        if h.error:
            return
        _upload(h)
        if known is not None and h.runtime == "host":  # in an image: asked inside it
            h.versions = dict(known)
            return
        res = h.transport.run(python_argv(h, [h.script, "--run-dir", h.run_dir, "--versions"]),
                              timeout=120)
        line = res.stdout.strip().splitlines()[-1:] or [""]
        versions = loads(line[0])  # a JSON object, or None: the host's output is data
        if versions is not None:
            h.versions = versions
        else:
            h.error = ("could not read torch/NCCL versions: "
                       + (res.stderr.strip()[-300:] or f"exit {res.rc}"))
    except TransportError as e:
        h.error = e.message


def _version_mismatch(hosts: Sequence[HostRun]) -> str | None:
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


def _nproc(h: HostRun, opts: SmokeOptions) -> int:
    if opts.nproc:
        return opts.nproc
    return h.gpu_count if h.gpu_count else CPU_RANKS


def _reference(h: HostRun, nproc: int) -> Mapping[int, float] | None:
    """Expected busbw per size from the host's own links (gpufleet.sku.bandwidth), or None."""
    h.expectation = _expectation(h, nproc)
    return dict(h.expectation.busbw_gbps) if h.expectation is not None else None


def _launch(h: HostRun, argv: Sequence[str], timeout: float) -> None:
    # The host-side `timeout` (limit + kill grace) ends the run and records that it fired; the
    # controller's timeout lies beyond it, a backstop for a host that stopped answering.
    h.launch = h.transport.run(argv, timeout=controller_timeout(timeout))


def _launch_world(hosts: Sequence[HostRun], argvs: Mapping[str, Sequence[str]],
                  timeout: float) -> None:
    """Launch every member at once; the runner's watchdog for the world: as soon as one host's
    launch ends in failure (its launcher's watchdog saw a rank die or hang there), end the run
    on every other host instead of letting their ranks wait out the collective timeout."""
    finished: list[HostRun] = []
    errors: list[BaseException] = []
    wake = threading.Event()

    def one(h: HostRun) -> None:
        try:
            _launch(h, argvs[h.spec.name], timeout)
        except BaseException as e:  # re-raised in the caller's thread
            errors.append(e)
        finally:
            finished.append(h)
            wake.set()

    threads = [threading.Thread(target=one, args=(h,), daemon=True) for h in hosts]
    for t in threads:
        t.start()
    ended = False
    while any(t.is_alive() for t in threads):
        wake.wait(0.5)
        wake.clear()
        failed = [h for h in list(finished) if h.launch is None or h.launch.rc != 0]
        if failed and not ended:
            ended = True
            rc = failed[0].launch.rc if failed[0].launch is not None else "?"
            why = f"{failed[0].spec.name}'s launch ended with exit {rc}"
            for h in hosts:
                if h not in finished:
                    h.ended_by_runner = f"the runner ended the run on {h.spec.name}: {why}"
                    _end(h)
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def _end(h: HostRun) -> None:
    """Kill what the run started on one host (its session and every marked process) now."""
    name = container_name(h) if h.runtime == "docker" else ""
    # On failure the cleanup after the launch tries again and reports what is left.
    with contextlib.suppress(TransportError, OSError):
        h.transport.run(["sh", "-c", _CLEANUP, "sh", h.run_dir, f"{MARKER}={h.run_id}", name,
                         "kill-only"], timeout=60)


def _cleanup(h: HostRun, *, quiet: bool = False) -> None:
    if not h.run_dir:
        return
    name = container_name(h) if h.runtime == "docker" else ""
    try:
        res = h.transport.run(["sh", "-c", _CLEANUP, "sh", h.run_dir, f"{MARKER}={h.run_id}",
                               name, f"{LABEL}={h.run_id}", nccl_log.KEEP], timeout=60)
    except (TransportError, OSError) as e:
        if not quiet:
            h.leftover = f"cleanup failed: {e}"
        return
    sec = _sections(res.stdout)
    h.files = sec
    left = [sec[k] for k in ("leftover_containers", "leftover") if k in sec]
    if left:
        h.leftover = f"processes of the run still alive after KILL: {left[0].strip()}"
    if res.timed_out:
        h.leftover = "cleanup command timed out; processes of the run may remain"


def _each(hosts: Sequence[HostRun], fn: Any) -> None:
    """fn(host) for every host at once (one transport per host, so threads do not share one)."""
    errors: list[BaseException] = []

    def call(h: HostRun) -> None:
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


def _all(hosts: Sequence[HostRun], level: str, error: str) -> dict[str, SmokeResult]:
    _each(hosts, lambda h: _cleanup(h, quiet=True))
    names = tuple(h.spec.name for h in hosts)
    return {h.spec.name: SmokeResult(status="error", level=level, error=error, hosts=names)
            for h in hosts}  # fmt: skip


