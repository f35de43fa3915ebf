"""gpufleet's deeper GPU checks: the rank side (stdlib + torch); registry.py lists them.

readiness  every level: TF32 defaults, cuDNN, whether torch.compile can work (cheap reads);
           full level adds what TF32 gives (fp32 matmul with and without) and a real
           torch.compile of a small model compared with eager.
hostdev_bw full, GPUs: pinned (and pageable) host<->device copies per GPU alone and all at once,
           judged against the GPU's own PCIe link read under load.
scaling    full: one transformer-block training step on rank 0 alone, on every rank at once
           without communication, and under DDP on all ranks (weak scaling).
sdc        full: deterministic GEMMs and reductions on every device, bit-exact across devices of
           the same model, against a CPU reference where the arithmetic is exact, and against
           their own first result while the loop loads the GPU for the level's sdc_seconds.

Each check records per rank; its aggregator (deep_verdict.py) on rank 0 turns them into world
checks whose data carries `problems` ({"kind", "rank", "message", "fix"}) that gpufleet's rules
map to rule ids.
Sources of every threshold: docs/smoke.md.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import statistics
import subprocess
import time

from . import progress as pg
from .deep_verdict import env_float, problem
from .dynamo import StubMissing, dynamo_stub
from .versions import fmt_cudnn

GIB = 1 << 30
COMPILE_TOL = 1e-4  # relative max error, compiled vs eager, fp32 without TF32


def _env(name, default=None):
    v = os.environ.get(name)
    return v if v not in (None, "") else default


def _test_rank(name):
    """Test-only hooks: GPUFLEET_SMOKE_TEST_<X>=RANK[:MODE] -> (rank, mode) or (None, None)."""
    v = _env(name)
    if v is None:
        return None, None
    r, _, mode = v.partition(":")
    try:
        return int(r), mode or None
    except ValueError:
        return None, None


def _sync(torch, dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def device_identity(torch, dev):
    ident = {"rank": pg.RANK, "local_rank": pg.LOCAL_RANK, "device": str(dev)}
    if dev.type == "cuda":
        p = torch.cuda.get_device_properties(dev)
        ident["name"] = p.name
        uuid = str(getattr(p, "uuid", "") or "")
        ident["uuid"] = (uuid if uuid.startswith(("GPU-", "MIG-")) else "GPU-" + uuid) \
            if uuid else None
        bus = getattr(p, "pci_bus_id", None)
        dom = getattr(p, "pci_domain_id", 0)
        devid = getattr(p, "pci_device_id", None)
        if bus is not None and devid is not None:
            ident["bus_id"] = "%08X:%02X:%02X.0" % (dom, bus, devid)
    else:
        ident["name"] = "cpu"
    return ident


# ------------------------------------------------------------------- readiness


def readiness(torch, dev, use_cuda, deep):
    out = {"tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
           "float32_matmul_precision": torch.get_float32_matmul_precision(),
           "tf32_cudnn": bool(torch.backends.cudnn.allow_tf32),
           "cudnn_available": bool(torch.backends.cudnn.is_available()),
           "cudnn_enabled": bool(torch.backends.cudnn.enabled),
           "cudnn": fmt_cudnn(torch.backends.cudnn.version())
           if torch.backends.cudnn.is_available() else None,
           "compile_api": hasattr(torch, "compile"),
           "triton": importlib.util.find_spec("triton") is not None,
           "env": {k: os.environ[k] for k in ("NVIDIA_TF32_OVERRIDE", "TORCH_COMPILE_DISABLE",
                                              "TORCHDYNAMO_DISABLE", "TORCH_ALLOW_TF32_CUBLAS_"
                                              "OVERRIDE") if k in os.environ}}
    probs = []
    rk = pg.RANK
    if use_cuda:
        out["capability"] = "%d.%d" % torch.cuda.get_device_capability(dev)
        out["bf16_supported"] = bool(torch.cuda.is_bf16_supported())
        if not out["cudnn_available"] or not out["cudnn_enabled"]:
            probs.append(problem("cudnn_unavailable", rk,
                                 "cuDNN is not available to torch %s (convolutions and RNNs fall "
                                 "back or fail)" % torch.__version__,
                                 "use a pytorch_image tag that ships cuDNN (…-cudnn9-runtime) or "
                                 "the CUDA wheel of torch, which bundles it"))
        if not out["triton"]:
            probs.append(problem("compile_unavailable", rk,
                                 "triton is not installed: torch.compile cannot build GPU kernels",
                                 "use the official torch CUDA wheel or image (they ship triton), "
                                 "or `pip install triton` matching torch %s" % torch.__version__))
        if os.environ.get("NVIDIA_TF32_OVERRIDE") == "0":
            probs.append(problem("env_disables", rk,
                                 "NVIDIA_TF32_OVERRIDE=0 disables TF32 in cuBLAS/cuDNN for every "
                                 "program on this host, whatever torch asks",
                                 "unset NVIDIA_TF32_OVERRIDE in the image or the host's "
                                 "environment"))
    for var in ("TORCH_COMPILE_DISABLE", "TORCHDYNAMO_DISABLE"):
        if os.environ.get(var, "0") not in ("", "0"):
            probs.append(problem("env_disables", rk,
                                 "%s=%s turns torch.compile into plain eager" % (var,
                                                                               os.environ[var]),
                                 "unset %s in the image or the job environment" % var))
    if deep:  # the level's readiness_compile
        if use_cuda:
            out["tf32_gain"] = tf32_gain(torch, dev)
        out["compile"] = compile_check(torch, dev, use_cuda)
        probs += out["compile"].pop("problems", [])
    out["problems"] = probs
    out["passed"] = not [p for p in probs if p["kind"] in ("cudnn_unavailable",
                                                           "compile_failed",
                                                           "compile_mismatch")]
    return out


@contextlib.contextmanager
def tf32(torch, on):
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def tf32_gain(torch, dev, n=8192, iters=4):
    g = torch.Generator(device=dev).manual_seed(11)
    a = torch.randn(n, n, device=dev, generator=g)
    b = torch.randn(n, n, device=dev, generator=g)
    res = {"n": n}
    for key, on in (("fp32_tflops", False), ("tf32_tflops", True)):
        with tf32(torch, on):
            a @ b
            torch.cuda.synchronize(dev)
            t = time.perf_counter()
            for _ in range(iters):
                a @ b
            torch.cuda.synchronize(dev)
            res[key] = 2.0 * n ** 3 * iters / (time.perf_counter() - t) / 1e12
    res["speedup"] = res["tf32_tflops"] / res["fp32_tflops"]
    return res


def _compile_fix(err):
    low = err.lower()
    if "compiler" in low or re.search(r"(?<![\w+])(cc|gcc|g\+\+|c\+\+|clang)(?![\w+])", low):
        return ("torch.compile needs a working C/C++ compiler (inductor, triton's launcher): "
                "install gcc/g++ in the image (or use a -devel pytorch_image tag) and check the "
                "CC/CXX environment variables")
    if "triton" in low or "ptxas" in low:
        return ("triton could not build kernels: use the triton that matches torch (the official "
                "wheel/image), and a driver new enough for its ptxas")
    return ("rerun with TORCH_LOGS=+dynamo,+inductor to see the failing step; pin a pytorch_image "
            "whose torch.compile works, or set TORCH_COMPILE_DISABLE=1 for jobs until fixed")


def compile_check(torch, dev, use_cuda):
    """torch.compile of a small MLP: it must compile, and match eager within COMPILE_TOL."""
    rk = pg.RANK
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(),
                                torch.nn.Linear(1024, 256), torch.nn.LayerNorm(256)).to(dev)
    x = torch.randn(64, 256, generator=torch.Generator().manual_seed(4)).to(dev)
    out = {"model": "MLP 256-1024-256 + LayerNorm, fp32, batch 64"}
    with tf32(torch, False), torch.no_grad():
        eager = model(x)
        t = time.perf_counter()
        try:
            compiled = torch.compile(model)
            got = compiled(x)
            _sync(torch, dev)
        except Exception as e:  # torch's compile errors are many kinds; the message says which
            # The first line names the cause ("InvalidCxxCompiler: No working C++ compiler
            # found ..."); the last is torch's generic "Set TORCHDYNAMO_VERBOSE=1" advice.
            head = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "")
            msg = "%s: %s" % (type(e).__name__, head[:300])
            out["passed"] = False
            out["error"] = msg
            out["problems"] = [problem("compile_failed", rk, "torch.compile failed: " + msg,
                                       _compile_fix(str(e)))]
            return out
        out["compile_s"] = time.perf_counter() - t
        test_r, mode = _test_rank("GPUFLEET_SMOKE_TEST_COMPILE")
        if test_r == rk and mode == "mismatch":
            got = got + 1e-2  # test-only: a miscompiled kernel
        scale = float(eager.abs().max()) or 1.0
        err = float((got.float() - eager.float()).abs().max()) / scale
    out["rel_err"] = err
    out["tol"] = COMPILE_TOL
    out["passed"] = err <= COMPILE_TOL
    if not out["passed"]:
        out["problems"] = [problem("compile_mismatch", rk,
                                   "torch.compile result differs from eager: relative max error "
                                   "%.2e > %.0e" % (err, COMPILE_TOL),
                                   "report it upstream with the torch/triton versions; pin a "
                                   "pytorch_image whose compiled results match, or set "
                                   "TORCH_COMPILE_DISABLE=1 for jobs until fixed")]
    return out


# ------------------------------------------------------------------- host <-> device bandwidth


def _copy_rate(torch, dev, dst, src, seconds):
    """GB/s of repeated dst.copy_(src), each copy synchronised, over at least `seconds`."""
    dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize(dev)
    n, t0 = 0, time.perf_counter()
    while True:
        dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize(dev)
        n += 1
        el = time.perf_counter() - t0
        if el >= seconds and n >= 2:
            return src.numel() * src.element_size() * n / el / 1e9


def _bw_set(torch, dev, bufs, secs):
    d, pinned, pageable = bufs
    return {"pinned_h2d": _copy_rate(torch, dev, d, pinned, secs[0]),
            "pinned_d2h": _copy_rate(torch, dev, pinned, d, secs[0]),
            "pageable_h2d": _copy_rate(torch, dev, d, pageable, secs[1]),
            "pageable_d2h": _copy_rate(torch, dev, pageable, d, secs[1])}


LINK_QUERY = ("index,uuid,pci.bus_id,pcie.link.gen.current,pcie.link.gen.max,"
              "pcie.link.width.current,pcie.link.width.max")


def _parse_links(text):
    out = {}
    for line in text.splitlines():
        c = [x.strip() for x in line.split(",")]
        if len(c) != 7:
            continue

        def num(s):
            return int(s) if s.isdigit() else None

        out[c[1]] = {"index": num(c[0]), "uuid": c[1], "bus_id": c[2],
                     "gen_current": num(c[3]), "gen_max": num(c[4]),
                     "width_current": num(c[5]), "width_max": num(c[6])}
    return out


def _numa(bus_id):
    """NUMA node of a PCI device and the NUMA nodes of this process's CPUs (Linux sysfs)."""
    res = {}
    if bus_id:
        path = "/sys/bus/pci/devices/%s/numa_node" % bus_id[-12:].lower()
        try:
            with open(path) as f:
                res["gpu_numa_node"] = int(f.read().strip())
        except (OSError, ValueError):
            pass
    try:
        cpus = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        return res
    nodes = set()
    base = "/sys/devices/system/node"
    for name in (os.listdir(base) if os.path.isdir(base) else []):
        if not name.startswith("node"):
            continue
        try:
            with open(os.path.join(base, name, "cpulist")) as f:
                spec = f.read().strip()
        except OSError:
            continue
        ids = set()
        for part in filter(None, spec.split(",")):
            a, _, b = part.partition("-")
            ids |= set(range(int(a), int(b or a) + 1))
        if ids & cpus:
            nodes.add(int(name[4:]))
    res["rank_cpu_count"] = len(cpus)
    res["rank_numa_nodes"] = sorted(nodes)
    return res


def hostdev_bw(torch, dist, dev):
    size = GIB
    bufs = (torch.empty(size, dtype=torch.uint8, device=dev),
            torch.empty(size, dtype=torch.uint8, pin_memory=True),
            torch.empty(size, dtype=torch.uint8))
    bufs[1].fill_(1)
    bufs[2].fill_(2)
    ident = device_identity(torch, dev)
    out = {"bytes": size, "identity": ident}
    # Each GPU alone: one local rank at a time (hosts of a multinode world go in parallel).
    turns = pg.LOCAL_WORLD
    for turn in range(turns):
        pg.coll(dist.barrier)
        if turn == pg.LOCAL_RANK:
            out["alone"] = _bw_set(torch, dev, bufs, (0.3, 0.3))
    # All GPUs at once; local rank 0 reads every GPU's link state meanwhile (links idle down).
    pg.coll(dist.barrier)
    smi = shutil.which("nvidia-smi") if pg.LOCAL_RANK == 0 else None
    proc = None
    if smi:
        try:
            proc = subprocess.Popen([smi, "--query-gpu=" + LINK_QUERY,
                                     "--format=csv,noheader,nounits"], stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, text=True)
        except OSError:
            proc = None
    t0 = time.perf_counter()
    together = {"pinned_h2d": _copy_rate(torch, dev, bufs[0], bufs[1], 1.0)}
    if proc is not None:
        under_load = proc.poll() is not None
        try:
            text, _ = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            text = ""
        out["links"] = _parse_links(text)
        for link in out["links"].values():
            link["read_under_load"] = under_load  # False: idle links may show a lower Gen
        out["links_read_s"] = time.perf_counter() - t0
    together["pinned_d2h"] = _copy_rate(torch, dev, bufs[1], bufs[0], 0.6)
    pg.coll(dist.barrier)
    together["pageable_h2d"] = _copy_rate(torch, dev, bufs[0], bufs[2], 0.3)
    together["pageable_d2h"] = _copy_rate(torch, dev, bufs[2], bufs[0], 0.3)
    out["together"] = together
    out["numa"] = _numa(ident.get("bus_id"))
    del bufs
    torch.cuda.empty_cache()
    out["passed"] = True  # judged on rank 0, where every GPU's numbers meet
    return out


# ------------------------------------------------------------------- DDP scaling


def _blocks(torch, dev, cpu):
    d, heads, layers, batch, seq = (64, 4, 2, 4, 32) if cpu else (2048, 16, 4, 8, 1024)
    torch.manual_seed(1)
    model = torch.nn.Sequential(*[
        torch.nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True,
                                         norm_first=True) for _ in range(layers)]).to(dev)
    shape = {"d_model": d, "heads": heads, "blocks": layers, "batch": batch, "seq": seq}
    return model, shape


def _steps(torch, dev, model, x, use_cuda, n, slow, cpu_times=None):  # noqa: PLR0917
    """Median seconds per training step (forward, backward, AdamW) over n steps after 3 warm.

    cpu_times, if given, receives each step's CPU time of this thread: on CPU ranks (one torch
    thread, autograd runs CPU work on the calling thread) that is what the rank needed, whatever
    else the machine was doing; wall time there measures the machine's load as much.
    """
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    times = []
    for i in range(3 + n):
        _sync(torch, dev)
        t, c = time.perf_counter(), time.thread_time()
        ctx = torch.autocast("cuda", dtype=torch.bfloat16) if use_cuda else \
            contextlib.nullcontext()
        with ctx:
            loss = model(x).float().pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        _sync(torch, dev)
        dt = time.perf_counter() - t
        if slow:  # test-only: this rank at about a tenth of its speed
            if use_cuda:
                time.sleep(10 * dt)
            else:  # burn CPU, as a slow core would
                end = time.thread_time() + 10 * (time.thread_time() - c) + 0.02
                while time.thread_time() < end:
                    pass
            dt = time.perf_counter() - t
        if i >= 3:
            times.append(dt)
            if cpu_times is not None:
                cpu_times.append(time.thread_time() - c)
    return statistics.median(times), times


def scaling(torch, dist, dev, use_cuda, group):
    model, shape = _blocks(torch, dev, not use_cuda)
    g = torch.Generator().manual_seed(7 + pg.RANK)
    x = torch.randn(shape["batch"], shape["seq"], shape["d_model"], generator=g).to(dev)
    slow_rank, _ = _test_rank("GPUFLEET_SMOKE_TEST_SLOW")
    slow = slow_rank == pg.RANK
    n = 10
    out = {"model": shape, "steps": n, "world_size": pg.WORLD,
           "identity": device_identity(torch, dev)}
    state = {k: v.clone() for k, v in model.state_dict().items()}
    threads = torch.get_num_threads()
    if not use_cuda:
        torch.set_num_threads(1)  # CPU ranks share the cores: without this they thrash
    try:
        _scaling_phases(torch, dist, dev, use_cuda, group, model, x, state, slow, out)
    finally:
        torch.set_num_threads(threads)
    del model
    if use_cuda:
        torch.cuda.empty_cache()
    out["passed"] = True  # judged on rank 0
    return out


def _scaling_phases(torch, dist, dev, use_cuda, group, model, x, state, slow, out):  # noqa: PLR0917
    from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: PLC0415

    n = out["steps"]
    pg.coll(dist.barrier)
    if pg.RANK == 0:  # 1 GPU: rank 0 alone, everyone else idle
        out["single_s"], _ = _steps(torch, dev, model, x, use_cuda, n, False)
    pg.coll(dist.barrier)
    model.load_state_dict(state)
    # Every rank at once, no communication: a slow GPU (or a starved CPU) shows here.
    cpu = [] if not use_cuda else None
    out["independent_s"], out["independent_steps_s"] = _steps(torch, dev, model, x, use_cuda, n,
                                                               slow, cpu)
    if cpu:
        out["independent_cpu_s"] = statistics.median(cpu)
    pg.coll(dist.barrier)
    if pg.WORLD > 1:
        model.load_state_dict(state)
        for attempt in ("stub", "real"):
            try:
                with dynamo_stub(torch) if attempt == "stub" else contextlib.nullcontext():
                    ddp = DDP(model, device_ids=[dev.index] if use_cuda else None,
                              process_group=group)
                    pg.enter()  # each step's backward runs the gradient all-reduce
                    out["ddp_s"], out["ddp_steps_s"] = _steps(torch, dev, ddp, x, use_cuda, n,
                                                              slow)
                    pg.leave()
                    del ddp
                break
            except StubMissing:
                pg.leave()


# ------------------------------------------------------------------- silent data corruption


def _digest(torch, t, weights):
    """Two exact int64 sums over t's bits: any single changed bit changes them."""
    v = t.contiguous().view(-1)
    v = v.view(torch.int16 if v.element_size() == 2 else torch.int32).to(torch.int64)
    lo, hi = v & 0xFFFF, (v >> 16) & 0xFFFF
    w = weights[: v.numel()]
    return torch.stack([v.sum(), (lo * w).sum() + (hi * w.flip(0)).sum()])


def _sdc_ops(torch, dev, use_cuda):
    """name -> (fn returning a tensor, exact on CPU?, flops per call)."""
    n_bf16 = 8192 if use_cuda else 128
    n_int = 2048 if use_cuda else 96
    n_red = (16 << 20) if use_cuda else (1 << 16)
    gen = torch.Generator().manual_seed(4242)  # CPU generator: same inputs on every device
    a16 = torch.randn(n_bf16, n_bf16, generator=gen).to(torch.bfloat16)
    b16 = torch.randn(n_bf16, n_bf16, generator=gen).to(torch.bfloat16)
    # Integers in [-8, 8]: every product and partial sum (< 2^24) is exact in fp32, TF32 and
    # bf16 inputs, in any summation order, so the CPU's result is the only right answer.
    ai = torch.randint(-8, 9, (n_int, n_int), generator=gen).float()
    bi = torch.randint(-8, 9, (n_int, n_int), generator=gen).float()
    red = torch.randn(n_red, generator=gen)
    ired = torch.randint(-(1 << 30), 1 << 30, (n_red,), generator=gen, dtype=torch.int32)
    dev_t = [x.to(dev) for x in (a16, b16, ai, bi, red, ired)]
    da16, db16, dai, dbi, dred, dired = dev_t
    ops = {
        "gemm_bf16": (lambda: da16 @ db16, False, 2.0 * n_bf16 ** 3,
                      "bf16 GEMM %d^3 (tensor cores)" % n_bf16),
        "gemm_fp32_exact": (lambda: dai @ dbi, True, 2.0 * n_int ** 3,
                            "fp32 GEMM %d^3 of integers (exact)" % n_int),
        "sum_fp32": (lambda: dred.sum(dim=0, keepdim=True), False, n_red,
                     "fp32 sum of %d values" % n_red),
        "sum_int": (lambda: dired.to(torch.int64).sum(dim=0, keepdim=True), True, n_red,
                    "int64 sum of %d int32 values (exact)" % n_red),
    }
    cpu_ref = {"gemm_fp32_exact": lambda: ai @ bi,
               "sum_int": lambda: ired.to(torch.int64).sum(dim=0, keepdim=True)}
    return ops, cpu_ref, n_bf16 * n_bf16, max(n_int * n_int, 1)


def sdc(torch, dev, use_cuda, seconds):
    ops, cpu_ref, most, n_exact = _sdc_ops(torch, dev, use_cuda)
    weights = (torch.arange(most, dtype=torch.int64, device=dev) % 8191) + 1
    bad_rank, mode = _test_rank("GPUFLEET_SMOKE_TEST_CORRUPT")
    corrupt = bad_rank == pg.RANK

    def result(name, it):
        t = ops[name][0]()
        if corrupt and (mode != "intermittent" or it > 0):
            # test-only: one flipped low bit in one element, as a failing GPU would
            flat = t.view(-1).view(torch.int16 if t.element_size() == 2 else
                                   torch.int32 if t.element_size() == 4 else torch.int64)
            flat[flat.numel() // 3] ^= 1
        return t

    with tf32(torch, False):
        first = {k: _digest(torch, result(k, 0), weights) for k in ops}
        changed = {k: torch.zeros((), dtype=torch.int64, device=dev) for k in ops}
        seconds = env_float("GPUFLEET_SMOKE_SDC_SECONDS", seconds) if use_cuda else 0.0
        its, flops = 1, 0.0
        _sync(torch, dev)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds or its < 2:
            for k in ops:
                d = _digest(torch, result(k, its), weights)
                changed[k] += (d != first[k]).any().to(torch.int64)
                flops += ops[k][2]
            its += 1
            if its % 8 == 0:
                _sync(torch, dev)  # keep the launch queue short, and the clock honest
        _sync(torch, dev)
        secs = time.perf_counter() - t0
    out = {"identity": device_identity(torch, dev), "iterations": its, "seconds": secs,
           "tflops": flops / secs / 1e12 if secs > 0 else None,
           "ops": {k: {"what": ops[k][3], "digest": [int(x) for x in first[k].tolist()],
                       "changed_runs": int(changed[k])} for k in ops}}
    if pg.RANK == 0:
        cw = (torch.arange(2 * n_exact, dtype=torch.int64) % 8191) + 1
        out["cpu_reference"] = {k: [int(x) for x in _digest(torch, fn(), cw).tolist()]
                                for k, fn in cpu_ref.items()}
    out["passed"] = True  # judged on rank 0
    return out




# ------------------------------------------------------------------- registry halves (rank side)


def rank_readiness(c):
    return readiness(c.torch, c.run_dev, c.all_gpu, c.spec["readiness_compile"])


def rank_hostdev_bw(c):
    return hostdev_bw(c.torch, c.dist, c.run_dev)


def rank_scaling(c):
    return scaling(c.torch, c.dist, c.run_dev, c.all_gpu, c.group)


def rank_sdc(c):
    return sdc(c.torch, c.run_dev, c.all_gpu, c.spec["sdc_seconds"])
