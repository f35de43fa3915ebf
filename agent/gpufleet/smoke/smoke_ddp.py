#!/usr/bin/env python3
"""gpufleet DDP/NCCL smoke test: one rank per GPU (or N CPU ranks), started by torchrun (multinode,
images) or by its own `--spawn N` launcher (one node, host python).

Self-contained on purpose: it is copied to the host and runs under whatever Python (>= 3.9) and
torch (>= 2.1) the host or the pinned image ships, so it imports only the stdlib and torch.

Every rank writes `rank<R>.progress` (where it is) and `rank<R>.json` (what it measured) into
--run-dir; global rank 0 gathers all ranks and writes `result.json`. The runner reads these back;
when a rank hangs the progress files say which one.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import traceback
import types

# The deeper checks ship beside this file (the runner uploads them too); import from there.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import smoke_deep

T_START = time.time()
SCHEMA = "gpufleet.smoke/v1"
MIB = 1 << 20
GIB = 1 << 30
# Sizes follow nccl-tests' `-b 1M -e 4G -f 4` so results compare with REFERENCE.md row by row.
GPU_SIZES = {
    "quick": [1 * MIB, 64 * MIB, 256 * MIB],
    "full": [1 * MIB, 4 * MIB, 16 * MIB, 64 * MIB, 256 * MIB, 1 * GIB, 4 * GIB],
}
# Bytes moved per timed batch (iterations = this / size, 5..100) and timed batches per size:
# the full level's larger batches keep harness jitter well under the 3 % it is judged on.
BATCH_BYTES = {"quick": 2 * GIB, "full": 8 * GIB}
REPS = {"quick": 3, "full": 10}
# A graph-timed batch is one replay of a graph of this many all-reduces, nccl-tests' default
# `-n 20`: batches of 100 (one graph of 100, or five replays of 20) ran 10-35 % slower per
# collective below 16 MiB (benchmarks/results/2026-11-30-nvidia-h200-x2-smoke-bwprobe.log
# and the runs beside it). Such a batch is short, so take the best of more of them.
GRAPH_OPS = 20
GRAPH_REPS = 10
# gloo on CPU measures the code path, not a fabric: keep CI fast.
CPU_SIZES = {"quick": [64 * 1024, 1 * MIB], "full": [64 * 1024, 1 * MIB, 16 * MIB]}


def _env_int(name, default):
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def _env_float(name):
    try:
        return float(os.environ.get(name, ""))
    except ValueError:
        return None


RANK = _env_int("RANK", 0)
WORLD = _env_int("WORLD_SIZE", 1)
LOCAL_RANK = _env_int("LOCAL_RANK", 0)
LOCAL_WORLD = _env_int("LOCAL_WORLD_SIZE", 1)
GROUP_RANK = _env_int("GROUP_RANK", 0)  # node rank assigned by the rendezvous


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--run-dir", required=True)
    p.add_argument("--level", choices=("quick", "full"), default="quick")
    p.add_argument("--host", default=None, help="inventory name of this host")
    p.add_argument("--pg-timeout", type=float, default=60.0, help="seconds per collective")
    p.add_argument("--cpu", action="store_true", help="force gloo on CPU")
    p.add_argument("--smi-count", type=int, default=None, help="GPUs nvidia-smi lists")
    p.add_argument("--expect-gpus", type=int, default=None, help="inventory expectation")
    p.add_argument("--sizes", default=None, help="comma-separated bytes, overrides the level")
    p.add_argument("--reference", default=None, help="JSON {bytes: busbw GB/s} to compare with")
    p.add_argument("--min-busbw", type=float, default=None, help="floor in GB/s, largest size")
    p.add_argument("--expectation", default=None,
                   help="JSON: the expectation model's evidence (links, raw bound, ratios)")
    p.add_argument("--ref-fraction", type=float, default=0.8,
                   help="sizes >= 64 MiB must reach this fraction of --reference")
    p.add_argument("--bw-method", choices=("auto", "graph", "loop"), default="auto")
    p.add_argument("--t0", type=float, default=None, help="launch time (epoch s) for wall time")
    p.add_argument("--deadline-in", type=float, default=None,
                   help="exit hard after this many seconds, whatever the rank is doing")
    p.add_argument("--versions", action="store_true",
                   help="print this runtime's torch/CUDA/NCCL versions as JSON and exit")
    # Test-only: make one rank stop before a collective, to prove hang handling.
    p.add_argument("--spawn", type=int, default=None, metavar="N",
                   help="single-node launcher: start N local ranks (instead of torchrun)")
    p.add_argument("--test-hang-rank", type=int, default=None)
    p.add_argument("--test-hang-phase", default="allreduce_exact")
    return p.parse_args(argv)


ARGS = None
_seq = 0  # collectives entered by this rank (through coll())
_phase = "start"


def _write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, sort_keys=True)
    os.replace(tmp, path)


def progress(state, phase=None):
    """Record where this rank is; `state` is "out" (working) or "in" (inside collective _seq)."""
    global _phase
    if phase is not None:
        _phase = phase
    _write_json(
        os.path.join(ARGS.run_dir, "rank%d.progress" % RANK),
        {"rank": RANK, "phase": _phase, "seq": _seq, "state": state, "t": time.time(),
         "pid": os.getpid(), "host": ARGS.host},
    )


def enter():
    """Mark that this rank enters its next collective (or a step that runs collectives)."""
    global _seq
    _seq += 1
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
    if ARGS.test_hang_rank == RANK and ARGS.test_hang_phase == name:
        sys.stderr.write("rank %d: test hang in phase %s\n" % (RANK, name))
        sys.stderr.flush()
        while True:
            time.sleep(3600)


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


def fmt_cudnn(v):
    if not v:
        return None
    # cuDNN >= 9 encodes major*10000 + minor*100 + patch; 8.x used major*1000 + minor*100 + patch.
    if v >= 90000:
        return "%d.%d.%d" % (v // 10000, v // 100 % 100, v % 100)
    return "%d.%d.%d" % (v // 1000, v // 100 % 10, v % 100)


def fmt_nccl(v):
    if v is None:
        return None
    if isinstance(v, tuple):
        return ".".join(str(x) for x in v[:3])
    # ncclGetVersion: major*10000 + minor*100 + patch from 2.9, major*1000 + ... before.
    if v >= 20900:
        return "%d.%d.%d" % (v // 10000, v // 100 % 100, v % 100)
    return "%d.%d.%d" % (v // 1000, v // 100 % 10, v % 100)


def smi_count():
    if ARGS.smi_count is not None:
        return ARGS.smi_count if ARGS.smi_count >= 0 else None  # -1: the runner could not read it
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return 0
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=30,
                             check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


# --------------------------------------------------------------------------- checks


def check_matmul(torch, dev, use_cuda, level):
    """Per-device matmul against a higher-precision reference, plus its throughput."""
    if use_cuda:
        n, dtype, ref_dtype, tol, iters = 8192, torch.bfloat16, torch.float32, 1e-2, 10
    else:
        n, dtype, ref_dtype, tol, iters = (256 if level == "quick" else 512), torch.float32, \
            torch.float64, 1e-4, 5
    g = torch.Generator(device=dev).manual_seed(1234 + RANK)
    a = torch.randn(n, n, device=dev, dtype=dtype, generator=g)
    b = torch.randn(n, n, device=dev, dtype=dtype, generator=g)
    c = a @ b
    ref = a.to(ref_dtype) @ b.to(ref_dtype)
    rel_err = float(torch.linalg.norm(c.to(ref_dtype) - ref) / torch.linalg.norm(ref))
    for _ in range(2):
        a @ b
    if use_cuda:
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(iters):
            a @ b
        e1.record()
        e1.synchronize()
        secs = e0.elapsed_time(e1) / 1e3
    else:
        t = time.perf_counter()
        for _ in range(iters):
            a @ b
        secs = time.perf_counter() - t
    tflops = 2.0 * n ** 3 * iters / secs / 1e12
    ok = math.isfinite(rel_err) and rel_err < tol
    return {"passed": ok, "n": n, "dtype": str(dtype).replace("torch.", ""),
            "rel_err": rel_err, "tol": tol, "tflops": tflops}


def check_allreduce_exact(torch, dist, dev, group):
    n = 1 << 20
    base = torch.arange(n, dtype=torch.int32, device=dev) % 1000
    t = base * (RANK + 1) + RANK
    coll(dist.all_reduce, t, group=group)
    w = dist.get_world_size(group)
    expect = base * (w * (w + 1) // 2) + w * (w - 1) // 2
    bad = int((t != expect).sum())
    return {"passed": bad == 0, "elements": n, "dtype": "int32", "mismatched": bad}


def _flat_params(torch, model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _same_as_rank0(torch, dist, flat, group):
    # DDP groups here always span the world, so global rank 0 is the group's first rank.
    ref = flat.clone()
    coll(dist.broadcast, ref, src=0, group=group)
    return bool(torch.equal(ref, flat))


class StubMissing(AttributeError):
    """The dynamo stub lacks something this torch needs: rerun with the real module."""


@contextlib.contextmanager
def dynamo_stub(torch):
    """Answer torch._dynamo's "are we compiling?" questions without importing it.

    DDP's constructor, its forward and torch.optim ask torch._dynamo whether a compiler is
    active; importing it took ~5 s of the quick run on an H200 host (measured 2026-11-30), half
    the budget. We never compile. Anything else asked of the stub raises StubMissing, and the
    caller reruns the check with the real module (same answer, only slower).
    """
    if "torch._dynamo" in sys.modules or os.environ.get("GPUFLEET_SMOKE_REAL_DYNAMO"):
        yield False
        return

    class Stub(types.ModuleType):
        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            raise StubMissing("%s.%s" % (self.__name__, name))

    stub, utils = Stub("torch._dynamo"), Stub("torch._dynamo.utils")
    utils.get_optimize_ddp_mode = lambda: "ddp_optimizer"
    stub.utils = utils
    stub.graph_break = lambda *a, **k: None
    stub.is_compiling = lambda: False
    stub.disable = lambda fn=None, recursive=True, **k: fn if fn is not None else (lambda f: f)
    sys.modules["torch._dynamo"], sys.modules["torch._dynamo.utils"] = stub, utils
    had = "_dynamo" in torch.__dict__
    old = torch.__dict__.get("_dynamo")
    torch._dynamo = stub
    try:
        yield True
    finally:
        for k in ("torch._dynamo", "torch._dynamo.utils"):
            if sys.modules.get(k) in (stub, utils):
                del sys.modules[k]
        if had:
            torch._dynamo = old
        elif torch.__dict__.get("_dynamo") is stub:
            del torch._dynamo


def make_model(torch, dev, use_cuda):
    d = 1024 if use_cuda else 64
    torch.manual_seed(0)  # DDP broadcasts rank 0's weights anyway; same seed keeps it honest
    model = torch.nn.Sequential(
        torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d)
    ).to(dev)
    return model, d


def check_ddp(torch, dist, dev, use_cuda, group, level):  # noqa: PLR0917
    from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: PLC0415

    model, d = make_model(torch, dev, use_cuda)
    before = _flat_params(torch, model).clone()
    ddp = DDP(model, device_ids=[dev.index] if use_cuda else None, process_group=group)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator(device=dev).manual_seed(100 + RANK)  # different data per rank
    steps = 5 if level == "quick" else 20
    losses = []
    for _ in range(steps):
        x = torch.randn(64, d, device=dev, generator=g)
        loss = torch.nn.functional.mse_loss(ddp(x), x)
        opt.zero_grad(set_to_none=True)
        enter()  # backward runs the gradient all-reduce
        loss.backward()
        opt.step()
        leave()
        losses.append(float(loss.detach()))
    flat = _flat_params(torch, model)
    identical = _same_as_rank0(torch, dist, flat, group)
    changed = not torch.equal(before, flat)
    finite = all(math.isfinite(v) for v in losses)
    return {"passed": identical and changed and finite, "steps": steps, "params": flat.numel(),
            "identical_to_rank0": identical, "params_changed": changed,
            "loss_first": losses[0], "loss_last": losses[-1]}, ddp


def check_amp(torch, dist, dev, ddp, group):
    """One bf16-autocast step and one fp16 step with GradScaler, on the DDP model."""
    model = ddp.module
    d = model[0].in_features
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    g = torch.Generator(device=dev).manual_seed(200 + RANK)
    out = {}
    x = torch.randn(64, d, device=dev, generator=g)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = torch.nn.functional.mse_loss(ddp(x).float(), x)
    enter()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    leave()
    out["bf16_loss"] = float(loss.detach())
    try:
        scaler = torch.amp.GradScaler("cuda")
    except (AttributeError, TypeError):  # torch < 2.3
        scaler = torch.cuda.amp.GradScaler()
    with torch.autocast("cuda", dtype=torch.float16):
        loss = torch.nn.functional.mse_loss(ddp(x).float(), x)
    enter()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    leave()
    out["fp16_loss"] = float(loss.detach())
    out["fp16_scale"] = float(scaler.get_scale())
    flat = _flat_params(torch, model)
    out["params_finite"] = bool(torch.isfinite(flat).all())
    out["identical_to_rank0"] = _same_as_rank0(torch, dist, flat, group)
    out["passed"] = (math.isfinite(out["bf16_loss"]) and math.isfinite(out["fp16_loss"])
                     and out["fp16_scale"] > 0 and out["params_finite"]
                     and out["identical_to_rank0"])
    return out


def _time_gpu(torch, dist, dev, group, run, iters, reps):  # noqa: PLR0917
    """Best of `reps` timed batches (after one warm batch), seconds per collective."""
    best = None
    for rep in range(1 + reps):
        coll(dist.all_reduce, torch.zeros(1, device=dev), group=group)  # align the ranks
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        enter()
        e0.record()
        run()
        e1.record()
        e1.synchronize()
        leave()
        secs = e0.elapsed_time(e1) / 1e3 / iters
        if rep:
            best = secs if best is None else min(best, secs)
    return best


def _time_cpu(dist, group, t, iters):
    best = None
    for _ in range(2):
        coll(dist.barrier, group=group)
        enter()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t, group=group)
        secs = (time.perf_counter() - t0) / iters
        leave()
        best = secs if best is None else min(best, secs)
    return best


def busbw_sweep(torch, dist, dev, use_cuda, group, sizes, method):  # noqa: PLR0917
    """All-reduce bus bandwidth per size with nccl-tests' formula busbw = S/t * 2(n-1)/n.

    Small messages must measure the collective, not Python launch overhead (about 40 us per
    dist.all_reduce): on GPUs the timed batch replays a CUDA graph of up to GRAPH_OPS
    all-reduces, timed with CUDA events. From 4 MiB a collective outlasts its launch, and a plain
    back-to-back launch loop (one synchronisation per batch) beat the graphs by 1-7 %, so "auto"
    times graphs at every size and the loop from 4 MiB, and keeps the faster (both are
    recorded). Capturing first also matters: the loop on a buffer NCCL registered during
    capture ran ~3 % faster at 64 MiB than on a fresh one. The slowest rank's time counts.
    """
    n = dist.get_world_size(group)
    factor = 2.0 * (n - 1) / n
    res = {}
    graph_ok = method in ("auto", "graph")
    for size in sizes:
        t = torch.zeros(size // 4, dtype=torch.float32, device=dev)
        # Enough back-to-back iterations that one timed batch lasts well past launch jitter.
        budget, most, least = (BATCH_BYTES[ARGS.level], 100, 5) if use_cuda else (8 * MIB, 20, 3)
        iters = max(least, min(most, budget // size))
        coll(dist.all_reduce, t, group=group)  # warm-up (and NCCL connection setup)
        times = {}
        if not use_cuda:
            times["loop"] = _time_cpu(dist, group, t, iters)
        else:
            if graph_ok and method in ("auto", "graph"):
                graph = None
                ops = min(iters, GRAPH_OPS)
                try:
                    graph = torch.cuda.CUDAGraph()
                    torch.cuda.synchronize()
                    with torch.cuda.graph(graph):
                        for _ in range(ops):
                            dist.all_reduce(t, group=group)
                except Exception as e:  # capture unsupported here: fall back, and say so
                    graph_ok = False
                    sys.stderr.write("rank %d: CUDA graph capture failed (%s); timing a launch "
                                     "loop instead\n" % (RANK, e))
                    torch.cuda.synchronize()
                    coll(dist.barrier, group=group)
                else:
                    times["graph"] = _time_gpu(torch, dist, dev, group, graph.replay, ops,
                                               GRAPH_REPS)
                del graph
            if not times or method == "loop" or (method == "auto" and size >= 4 * MIB):
                def loop(t=t, iters=iters):
                    for _ in range(iters):
                        dist.all_reduce(t, group=group)

                times["loop"] = _time_gpu(torch, dist, dev, group, loop, iters,
                                          REPS[ARGS.level])
        names = sorted(times)
        worst = torch.tensor([times[k] for k in names], dtype=torch.float64)
        coll(dist.all_reduce, worst, op=dist.ReduceOp.MAX, group=_cpu_group(group))
        times = {k: float(worst[i]) for i, k in enumerate(names)}
        used = min(times, key=lambda k: times[k])
        secs = times[used]
        res[size] = {"algbw_gbps": size / secs / 1e9, "busbw_gbps": size / secs / 1e9 * factor,
                     "time_us": secs * 1e6, "method": used,
                     "iters": min(iters, GRAPH_OPS) if used == "graph" else iters,
                     "busbw_by_method": {k: size / v / 1e9 * factor for k, v in times.items()}}
        del t
    if use_cuda:
        torch.cuda.empty_cache()
    methods = sorted({v["method"] for v in res.values()})
    return res, "+".join(methods)


_CPU_GROUPS = {}


def _cpu_group(group):
    return _CPU_GROUPS.get(id(group))


def busbw_verdict(res, reference, min_busbw, fraction):
    sizes = sorted(res)
    out = {"sizes": {str(s): res[s] for s in sizes}}
    problems = []
    if reference:
        out["reference_fraction_required"] = fraction
        for s in sizes:
            ref = reference.get(s)
            if ref:
                pct = 100.0 * res[s]["busbw_gbps"] / ref
                res[s]["reference_gbps"] = ref
                res[s]["pct_of_reference"] = pct
                if s >= 64 * MIB and pct < 100.0 * fraction:
                    problems.append("%s: %.1f GB/s is %.0f%% of the reference %.1f GB/s"
                                    % (human(s), res[s]["busbw_gbps"], pct, ref))
    if min_busbw is not None and sizes:
        top = res[sizes[-1]]["busbw_gbps"]
        out["min_busbw_gbps"] = min_busbw
        if top < min_busbw:
            problems.append("%s: %.1f GB/s is below the floor of %.1f GB/s"
                            % (human(sizes[-1]), top, min_busbw))
    if reference and not any(s >= 64 * MIB for s in sizes):
        # A missing measurement is a failure, never a pass (cluster-readiness ADR-021).
        problems.append("no measurement at 64 MiB or more to judge against the expectation")
    basis = "reference" if reference else ("floor" if min_busbw is not None else None)
    out["basis"] = basis
    if problems:
        detail = "bus bandwidth too low: " + "; ".join(problems)
    else:
        detail = ", ".join("%s %.1f GB/s" % (human(s), res[s]["busbw_gbps"]) for s in sizes)
        if basis is None:
            detail += " (no reference or floor for this machine: recorded, not judged)"
    return not problems, detail, out


def human(size):
    if size >= GIB and size % GIB == 0:
        return "%d GiB" % (size // GIB)
    if size >= MIB and size % MIB == 0:
        return "%d MiB" % (size // MIB)
    return "%d KiB" % (size // 1024)


# --------------------------------------------------------------------------- main


def run_rank(torch, dist, timings):
    use_cuda = torch.cuda.is_available() and not ARGS.cpu
    torch_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    dev = torch.device("cpu")
    if use_cuda and torch_count > LOCAL_RANK:
        torch.cuda.set_device(LOCAL_RANK)
        dev = torch.device("cuda", LOCAL_RANK)
    try:
        nccl = fmt_nccl(torch.cuda.nccl.version()) if torch.cuda.is_available() else None
    except (AttributeError, RuntimeError):
        nccl = None
    info = {
        "rank": RANK, "local_rank": LOCAL_RANK, "host": ARGS.host or socket.gethostname(),
        "group_rank": GROUP_RANK, "local_world_size": LOCAL_WORLD,
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "cudnn": fmt_cudnn(torch.backends.cudnn.version()) if use_cuda else None,
        "nccl": nccl, "python": sys.version.split()[0],
        "device": str(dev), "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda"
        else None,
        "torch_device_count": torch_count, "smi_count": smi_count(),
        "expect_gpus": ARGS.expect_gpus,
    }
    checks = {}
    timeout = datetime.timedelta(seconds=ARGS.pg_timeout)

    phase("init")
    t = time.perf_counter()
    # gloo world group = control plane (results, agreement); NCCL only where every rank has a GPU.
    dist.init_process_group("gloo", timeout=timeout)
    timings["init_gloo_s"] = time.perf_counter() - t
    gathered = gather_json(torch, dist, info)
    all_gpu = all(i["device"].startswith("cuda") for i in gathered)
    backend = "nccl" if all_gpu else "gloo"
    group = None
    if all_gpu:
        t = time.perf_counter()
        group = coll(dist.new_group, backend="nccl", timeout=timeout)
        coll(dist.all_reduce, torch.ones(1, device=dev), group=group)  # communicator init
        torch.cuda.synchronize()
        timings["init_nccl_s"] = time.perf_counter() - t
    _CPU_GROUPS[id(group)] = None
    info["backend"] = backend

    phase("matmul")
    t = time.perf_counter()
    if dev.type == "cuda" or not use_cuda:
        checks["matmul"] = check_matmul(torch, dev, dev.type == "cuda", ARGS.level)
    else:
        checks["matmul"] = {"passed": False, "error": "no GPU for local rank %d" % LOCAL_RANK}
    timings["matmul_s"] = time.perf_counter() - t

    phase("allreduce_exact")
    t = time.perf_counter()
    checks["allreduce_exact"] = check_allreduce_exact(torch, dist, dev if all_gpu else
                                                      torch.device("cpu"), group)
    timings["allreduce_exact_s"] = time.perf_counter() - t

    run_dev = dev if all_gpu else torch.device("cpu")
    for attempt in ("stub", "real"):
        try:
            with dynamo_stub(torch) if attempt == "stub" else contextlib.nullcontext(False) as s:
                phase("ddp")
                t = time.perf_counter()
                checks["ddp"], ddp = check_ddp(torch, dist, run_dev, all_gpu, group, ARGS.level)
                checks["ddp"]["dynamo_stub"] = s
                timings["ddp_s"] = time.perf_counter() - t
                if all_gpu:
                    phase("amp")
                    t = time.perf_counter()
                    checks["amp"] = check_amp(torch, dist, dev, ddp, group)
                    timings["amp_s"] = time.perf_counter() - t
                del ddp
            break
        except StubMissing as e:  # same code on every rank: all of them land here together
            sys.stderr.write("rank %d: dynamo stub lacks %s; rerunning DDP with torch._dynamo\n"
                             % (RANK, e))

    bw = {}
    if WORLD > 1:
        phase("busbw")
        t = time.perf_counter()
        if ARGS.sizes:
            sizes = [int(s) for s in ARGS.sizes.split(",") if s]
        else:
            sizes = (GPU_SIZES if all_gpu else CPU_SIZES)[ARGS.level]
        bw["world"], method = busbw_sweep(torch, dist, run_dev, all_gpu, group, sizes,
                                          ARGS.bw_method)
        bw["method"] = method
        timings["busbw_s"] = time.perf_counter() - t
        nnodes = len({i["host"] for i in gathered})
        if nnodes > 1:
            # Per-host bandwidth: one subgroup per host; every rank must create every group.
            hosts = sorted({i["host"] for i in gathered})
            mine = None
            for h in hosts:
                ranks = [i["rank"] for i in gathered if i["host"] == h]
                pg = coll(dist.new_group, ranks=ranks, backend=backend, timeout=timeout)
                cpg = coll(dist.new_group, ranks=ranks, backend="gloo", timeout=timeout)
                if h == info["host"]:
                    mine, mine_cpu, nlocal = pg, cpg, len(ranks)
            _CPU_GROUPS[id(mine)] = mine_cpu
            if nlocal > 1:
                phase("busbw_local")
                t = time.perf_counter()
                bw["local"], _ = busbw_sweep(torch, dist, run_dev, all_gpu, mine, sizes,
                                             ARGS.bw_method)
                timings["busbw_local_s"] = time.perf_counter() - t
    smoke_deep.run(sys.modules[__name__], torch, dist, run_dev, all_gpu, group, ARGS.level,
                   checks, timings)
    return info, checks, bw, gathered


def aggregate(ranks, bw_world, timings):
    """Rank 0: turn every rank's measurements into world checks."""
    checks = []

    def add(name, passed, detail, data):
        checks.append({"name": name, "passed": bool(passed), "detail": detail, "data": data})

    keys = ("torch", "cuda", "cudnn", "nccl")
    per_rank = {str(r["rank"]): {k: r["info"][k] for k in keys} for r in ranks}
    distinct = {k: sorted({str(r["info"][k]) for r in ranks}) for k in keys}
    differ = [k for k in keys if len(distinct[k]) > 1]
    r0 = ranks[0]["info"]
    add("versions", not differ,
        ("ranks disagree on " + ", ".join("%s (%s)" % (k, " vs ".join(distinct[k]))
                                          for k in differ)) if differ else
        "torch %s, CUDA %s, cuDNN %s, NCCL %s on all %d ranks"
        % (r0["torch"], r0["cuda"], r0["cudnn"], r0["nccl"], len(ranks)),
        {"per_rank": per_rank})

    problems = []
    per_host = {}
    for r in ranks:
        i = r["info"]
        per_host.setdefault(i["host"], {"torch": i["torch_device_count"],
                                        "nvidia_smi": i["smi_count"],
                                        "expected": i["expect_gpus"],
                                        "ranks": i["local_world_size"]})
    for host, h in sorted(per_host.items()):
        if h["nvidia_smi"] is None:
            problems.append("%s: nvidia-smi could not be read" % host)
        elif h["torch"] != h["nvidia_smi"]:
            problems.append("%s: torch sees %d GPU(s), nvidia-smi lists %d"
                            % (host, h["torch"], h["nvidia_smi"]))
        if h["expected"] is not None and h["nvidia_smi"] != h["expected"]:
            problems.append("%s: inventory expects %d GPU(s), nvidia-smi lists %s"
                            % (host, h["expected"], h["nvidia_smi"]))
        if h["nvidia_smi"] and h["ranks"] > h["torch"]:
            problems.append("%s: %d ranks but only %d GPU(s) visible to torch"
                            % (host, h["ranks"], h["torch"]))
    add("device_count", not problems, "; ".join(problems) or ", ".join(
        "%s: %d GPU(s)" % (host, h["torch"]) for host, h in sorted(per_host.items())),
        {"per_host": per_host})

    for name in ("matmul", "allreduce_exact", "ddp", "amp"):
        got = [(r["rank"], r["checks"].get(name)) for r in ranks]
        if all(c is None for _, c in got):
            continue
        bad = [rk for rk, c in got if not (c and c.get("passed"))]
        data = {"per_rank": {str(rk): c for rk, c in got}}
        if name == "matmul":
            tf = [c.get("tflops") for _, c in got if c and c.get("tflops")]
            detail = ("%s %dx%d on every rank, %.1f-%.1f TFLOP/s"
                      % (got[0][1].get("dtype"), got[0][1].get("n"), got[0][1].get("n"),
                         min(tf), max(tf))) if tf and not bad else ""
        elif name == "allreduce_exact":
            detail = "int32 sum exact on all %d ranks" % len(got) if not bad else ""
        elif name == "ddp":
            c0 = got[0][1] or {}
            detail = ("%s steps, %s parameters bit-identical on all ranks"
                      % (c0.get("steps"), c0.get("params"))) if not bad else ""
        else:
            detail = "bf16 autocast and fp16 GradScaler steps finite and identical" \
                if not bad else ""
        if bad:
            detail = "failed on rank(s) %s: %s" % (
                ", ".join(str(b) for b in bad),
                "; ".join("%d: %s" % (rk, json.dumps(c, sort_keys=True)[:300])
                          for rk, c in got if rk in bad))
        add(name, not bad, detail, data)
    for name, passed, detail, data in smoke_deep.aggregate(ranks):
        add(name, passed, detail, data)

    busbw = {}
    if bw_world is None:
        add("busbw", True, "no bandwidth measured: world size %d (one rank)" % len(ranks),
            {"measured": False})
    else:
        ref = json.loads(ARGS.reference) if ARGS.reference else None
        ref = {int(k): float(v) for k, v in ref.items()} if ref else None
        if not all(r["info"]["device"].startswith("cuda") for r in ranks):
            ref = None  # the reference is for NCCL on these GPUs, not a gloo fallback
        res = bw_world["world"]
        ok, detail, data = busbw_verdict(res, ref, ARGS.min_busbw, ARGS.ref_fraction)
        if ref and ARGS.expectation:
            data["basis"] = "expectation"
            data["expectation"] = json.loads(ARGS.expectation)
            top = max(s for s in res if s in ref) if any(s in ref for s in res) else None
            if top is not None:
                data["largest"] = {"bytes": top, "measured_gbps": res[top]["busbw_gbps"],
                                   "expected_gbps": ref[top],
                                   "ratio": res[top]["busbw_gbps"] / ref[top]}
                detail += " (%.0f%% of the %.1f GB/s expected at %s from %s)" % (
                    100.0 * res[top]["busbw_gbps"] / ref[top], ref[top], human(top),
                    data["expectation"].get("basis"))
        data["measured"] = True
        data["method"] = bw_world.get("method")
        data["world_size"] = len(ranks)
        local = {r["info"]["host"]: {str(s): v["busbw_gbps"] for s, v in r["bw"]["local"].items()}
                 for r in ranks if r.get("bw", {}).get("local") and r["info"]["local_rank"] == 0}
        if local:
            data["per_host_busbw_gbps"] = local
        add("busbw", ok, detail, data)
        busbw = {str(s): v["busbw_gbps"] for s, v in res.items()}
    return checks, busbw


def torch_version():
    try:
        import importlib.metadata as md  # noqa: PLC0415

        parts = md.version("torch").split("+")[0].split(".")[:2]
        return tuple(int(x) for x in parts)
    except Exception:  # unknown: assume a current torch
        return (99, 0)


def print_versions():
    import torch  # noqa: PLC0415

    try:
        nccl = fmt_nccl(torch.cuda.nccl.version())
    except (AttributeError, RuntimeError):
        nccl = None
    print(json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda, "nccl": nccl,
                      "python": sys.version.split()[0]}))
    return 0


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


def spawn(n, argv):
    """Single-node launcher with its watchdog: smoke_launch.py beside this file (stdlib only).

    Loaded by path, so that this script still imports nothing outside the stdlib and torch.
    """
    import importlib.util  # noqa: PLC0415

    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location("gpufleet_smoke_launch",
                                                  os.path.join(here, "smoke_launch.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.spawn(n, os.path.abspath(__file__), argv, ARGS.run_dir, ARGS.level)


def start_heartbeat(interval=1.0):
    """Touch rank<R>.beat every second from a thread: the launcher's watchdog reads its age.

    A stopped or frozen process stops beating; one merely waiting in a collective does not
    (torch releases the GIL while it waits), so the two are told apart.
    """
    path = os.path.join(ARGS.run_dir, "rank%d.beat" % RANK)

    def beat():
        while True:
            try:
                with open(path, "a"):
                    os.utime(path, None)
            except OSError:
                pass
            time.sleep(interval)

    threading.Thread(target=beat, name="gpufleet-heartbeat", daemon=True).start()


def _without_spawn(argv):
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--spawn":
            skip = True
        elif not a.startswith("--spawn="):
            out.append(a)
    return out


def main(argv=None):
    global ARGS
    argv = list(argv if argv is not None else sys.argv[1:])
    ARGS = parse_args(argv)
    if ARGS.spawn:
        return spawn(ARGS.spawn, _without_spawn(argv))
    if ARGS.versions:
        return print_versions()
    if ARGS.deadline_in:
        arm_deadline(ARGS.deadline_in)
    start_heartbeat()
    # Hang safety, set before torch reads them: NCCL errors tear the process down instead of
    # hanging, and the flight recorder dumps its ring buffer on timeout (torch >= 2.3 has it).
    os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    os.environ.setdefault("TORCH_NCCL_DUMP_ON_TIMEOUT", "1")
    trace = os.path.join(ARGS.run_dir, "nccl_trace_rank_")
    if torch_version() >= (2, 7):  # the flight recorder's variables were renamed TORCH_FR_*
        os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")
        os.environ.setdefault("TORCH_FR_DUMP_TEMP_FILE", trace)
    else:
        os.environ.setdefault("TORCH_NCCL_TRACE_BUFFER_SIZE", "2000")
        os.environ.setdefault("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", trace)
    timings = {}
    t = time.perf_counter()
    progress("out", "import")
    import torch  # noqa: PLC0415  (timed, and after the NCCL environment is set)
    import torch.distributed as dist  # noqa: PLC0415

    timings["import_torch_s"] = time.perf_counter() - t
    rank_file = os.path.join(ARGS.run_dir, "rank%d.json" % RANK)
    try:
        info, checks, bw, _ = run_rank(torch, dist, timings)
        mine = {"rank": RANK, "info": info, "checks": checks, "bw": bw}
        _write_json(rank_file, {"rank": RANK, "ok": True, "host": info["host"],
                                "timings_s": timings, **mine})
        phase("gather")
        everyone = gather_json(torch, dist, mine)
        if RANK == 0:
            everyone.sort(key=lambda r: r["rank"])
            world_checks, busbw = aggregate(everyone, bw if bw else None, timings)
            t0 = ARGS.t0 or _env_float("GPUFLEET_SMOKE_T0")
            if t0:
                # launch (the runner's wrapper) -> this rank's first line -> verdict written
                timings["launch_to_script_s"] = T_START - t0
                timings["launch_to_verdict_s"] = time.time() - t0
            result = {
                "schema": SCHEMA, "level": ARGS.level, "backend": info["backend"],
                "status": "pass" if all(c["passed"] for c in world_checks) else "fail",
                "world_size": WORLD,
                "hosts": sorted({r["info"]["host"] for r in everyone}),
                "ranks": [r["info"] for r in everyone],
                "checks": world_checks, "busbw_gbps": busbw,
                "matmul_tflops": {str(r["rank"]): r["checks"]["matmul"].get("tflops")
                                  for r in everyone},
                "timings_s": timings,
            }
            _write_json(os.path.join(ARGS.run_dir, "result.json"), result)
        phase("shutdown")
        # Without a barrier before destroy_process_group ~40 % of gloo runs aborted at exit.
        coll(dist.barrier)
        dist.destroy_process_group()
        progress("done")
        # The verdict is on disk and the groups are gone: skip interpreter and CUDA teardown
        # (about a second per rank) so torchrun, and the runner, see the end sooner.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    except BaseException as e:
        _write_json(rank_file, {"rank": RANK, "ok": False, "phase": _phase, "seq": _seq,
                                "error": "%s: %s" % (type(e).__name__, e),
                                "traceback": traceback.format_exc()[-4000:]})
        progress("error")
        raise


if __name__ == "__main__":
    sys.exit(main())
