"""The argv that starts a smoke run on one host: setsid, the wrapper, timeout, launcher."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from gpufleet.smoke import levels
from gpufleet.smoke.hostrun import LABEL, MARKER, HostRun, SmokeOptions

# How long the host-side `timeout` waits after its TERM before it sends KILL (torchrun TERMs its
# workers meanwhile). The run on a host that still answers ends by host_limit(t) + KILL_GRACE_S.
KILL_GRACE_S = 45
# The controller's own timeout lies beyond that by this margin (the wrapper writing its exit
# record, a slow link, a loaded host): it is only the backstop for a host that stopped
# answering, so the host-side deadline always fires first where the host can say so.
CONTROLLER_MARGIN_S = 30


def host_limit(timeout: float) -> int:
    """The host-side `timeout` limit (s) for a run given `timeout`: room for the launch."""
    return math.ceil(timeout) + 10


def controller_timeout(timeout: float) -> float:
    """The controller's transport timeout for the launch: the host-side limit, its kill
    grace and a margin. Firing means the host did not end the run itself."""
    return float(host_limit(timeout) + KILL_GRACE_S + CONTROLLER_MARGIN_S)


# The wrapper records the session (pgid), the launch time, and how the launch ended: exit
# status, start and end (epoch s) and the host-side deadline, so that the runner knows whether
# `timeout` really fired (ended at or after the deadline) instead of guessing from 124/137.
WRAPPER = ('d="$1"; lim="$2"; shift 2; echo $$ > "$d/pgid"; '
           'GPUFLEET_SMOKE_T0=$(date +%s.%N 2>/dev/null); export GPUFLEET_SMOKE_T0; '
           's=$(date +%s); "$@" > "$d/log" 2>&1 < /dev/null; rc=$?; '
           'echo "rc=$rc start=$s end=$(date +%s) limit=$lim" > "$d/exit"; exit $rc')


def image_ref(h: HostRun) -> str:
    exp = h.spec.expect
    img = exp.pytorch_image or ""
    return f"{img}@{exp.pytorch_image_digest}" if exp.pytorch_image_digest else img


def python_argv(h: HostRun, args: Sequence[str]) -> list[str]:
    """argv running `python args` in the host's smoke runtime (for the version probe)."""
    if h.runtime == "docker":
        return ["docker", "run", "--rm", "--network=host", "--label", f"{LABEL}={h.run_id}",
                "-v", f"{h.run_dir}:{h.run_dir}", image_ref(h), "python3", *args]
    return [h.spec.expect.smoke_python, *args]


def build_command(
    h: HostRun,
    *,
    level: str,
    opts: SmokeOptions,
    nproc: int,
    ref: Mapping[int, float] | None,
    timeout: float,
    rendezvous: Mapping[str, Any] | None,
) -> list[str]:
    """The full argv: setsid → sh (records pgid, redirects to log) → timeout → env → launcher.

    h.script is the shipped package (smoke/bundle.py); the level's row of smoke/levels.py goes
    to it, and to its watchdog, as one JSON argument.
    """
    exp = h.spec.expect
    h.nproc = nproc
    spec = json.dumps(levels.get(level).host_spec(), sort_keys=True, separators=(",", ":"))
    script_args = _script_args(h, spec, opts, ref, timeout)
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
        if torch_at_least(h.versions.get("torch"), (2, 2)):  # pytorch#88922; surely in 2.2
            trun.append(f"--local_addr={exp.smoke_address or h.spec.address}")
    # NCCL's init log names the transport of every connection (smoke/nccl_paths.py reads it);
    # the inventory's own NCCL_DEBUG wins.
    env = {MARKER: h.run_id, "PYTHONUNBUFFERED": "1", "NCCL_DEBUG": "INFO",
           "NCCL_DEBUG_SUBSYS": "INIT,NET", **opts.env}
    iface = exp.smoke_interface or (
        "lo" if rendezvous is not None and h.spec.address.startswith("127.") else None
    )
    if iface:
        env.update(GLOO_SOCKET_IFNAME=iface, NCCL_SOCKET_IFNAME=iface)
    # torchrun (images, or on request) runs under the package's watchdog (remote/launch.py).
    watch = [h.script, "watch", "--run-dir", h.run_dir, f"--level-spec={spec}",
             "--nproc", str(nproc), "--"]
    if h.runtime == "docker":
        name = container_name(h)
        inner = [
            "docker", "run", "--rm", "--name", name, "--label", f"{LABEL}={h.run_id}",
            *gpu_args(h), "--ipc=host", "--network=host",
            "-v", f"{h.run_dir}:{h.run_dir}",
            *(a for k, v in env.items() for a in ("-e", f"{k}={v}")), "-e", "GPUFLEET_SMOKE_T0",
            image_ref(h), "python3", *watch, "torchrun", *trun, *script_args,
        ]  # fmt: skip
        envs = [f"{MARKER}={h.run_id}"]
    elif opts.launcher != "torchrun":
        # The script's own launcher starts the ranks: torchrun would first spend 3-4 s importing
        # torch in its launcher process (benchmarks/results, 2026-11-30), on every host of a
        # world, then run its c10d rendezvous. A world's node ranks are the controller's order
        # of its members and global rank 0's process hosts the store, torchrun's static
        # rendezvous (--node-rank --master-addr --master-port).
        inner = [exp.smoke_python, h.script, "--spawn", str(nproc)]
        if rendezvous is not None:
            addr, _, port = str(rendezvous["endpoint"]).rpartition(":")
            inner += ["--nnodes", str(rendezvous["nnodes"]),
                      "--node-rank", str(rendezvous["node_rank"]),
                      "--master-addr", addr, "--master-port", port]
        inner += script_args[1:]
        envs = [f"{k}={v}" for k, v in env.items()]
    else:
        inner = [exp.smoke_python, *watch, exp.smoke_python, "-m", "torch.distributed.run",
                 *trun, *script_args]
        envs = [f"{k}={v}" for k, v in env.items()]
    # timeout's -k leaves torchrun time to TERM its workers before KILL; the workers also carry
    # their own deadline (--deadline-in), and the controller's cleanup kills by marker anyway.
    limit = host_limit(timeout)
    wrapper, reaper = WRAPPER, []
    if h.runtime == "docker":
        # Killing the docker client (Ctrl-C kills the run's process group, and the controller
        # may not get to run the cleanup) leaves its container running: a reaper in a session
        # of its own waits for this session's leader to end, then removes the container.
        wrapper = ('n="$1"; shift; (setsid sh -c \'while kill -0 "$1" 2>/dev/null; do sleep 1; '
                   'done; docker rm -f "$2" >/dev/null 2>&1\' sh "$$" "$n" '
                   '</dev/null >/dev/null 2>&1 &); ' + WRAPPER)
        reaper = [container_name(h)]
    return ["setsid", "-w", "sh", "-c", wrapper, "sh", *reaper, h.run_dir, str(limit),
            "timeout", "-k", str(KILL_GRACE_S), str(limit), "env", *envs, *inner]  # fmt: skip


def _script_args(h: HostRun, spec: str, opts: SmokeOptions, ref: Mapping[int, float] | None,
                 timeout: float) -> list[str]:
    """The package's own arguments (after the zip's path): run dir, level row, expectations."""
    exp = h.spec.expect
    pg_timeout = opts.pg_timeout or max(10.0, min(120.0, timeout / 4))
    script_args = [
        # --opt=value: a host named "-gpu1" stays a value, never an option.
        h.script, "--run-dir", h.run_dir, f"--level-spec={spec}", f"--host={h.spec.name}",
        "--pg-timeout", f"{pg_timeout:g}", "--deadline-in", f"{timeout + 15:g}",
    ]  # fmt: skip
    # -1: nvidia-smi could not be read; the script then reports that instead of asking again.
    script_args += ["--smi-count", str(-1 if h.gpu_count is None else h.gpu_count)]
    if exp.gpu_count is not None:
        script_args += ["--expect-gpus", str(exp.gpu_count)]
    # Recorded beside the measurements, judged on the controller (GF504; the floor GF501).
    if ref:
        script_args += ["--reference", json.dumps({str(k): v for k, v in ref.items()})]
    if h.expectation is not None:
        script_args += ["--expectation", json.dumps(h.expectation.evidence(), sort_keys=True)]
    if opts.sizes:
        script_args += ["--sizes", ",".join(str(s) for s in opts.sizes)]
    if opts.bw_method != "auto":
        script_args += ["--bw-method", opts.bw_method]
    if opts.test_hang_rank is not None:
        script_args += ["--test-hang-rank", str(opts.test_hang_rank),
                        "--test-hang-phase", opts.test_hang_phase]
    return script_args


def gpu_args(h: HostRun) -> list[str]:
    """GPUs into the container only where the host has them (CPU hosts: none, gloo). Unlimited
    locked memory is for NCCL's pinned buffers; raising the hard limit needs CAP_SYS_RESOURCE,
    which a CPU host's engine may lack and gloo does not need."""
    if not h.gpu_count:
        return []
    nvidia = ["--runtime=nvidia"] if "nvidia" in h.runtimes else []
    return ["--gpus", "all", *nvidia, "--ulimit", "memlock=-1"]


def torch_at_least(version: str | None, want: tuple[int, int]) -> bool:
    """True for "2.11.0+cu130" >= (2, 2); True when unknown (assume a current torch)."""
    m = re.match(r"(\d+)\.(\d+)", version or "")
    return m is None or (int(m.group(1)), int(m.group(2))) >= want


def container_name(h: HostRun) -> str:
    return f"{h.run_id}-{''.join(c if c.isalnum() else '-' for c in h.spec.name)}"


