"""gpufleet's deeper GPU checks, run by smoke_ddp.py's ranks (shipped beside it, stdlib + torch).

readiness  every level: TF32 defaults, cuDNN, whether torch.compile can work (cheap reads);
           full level adds what TF32 gives (fp32 matmul with and without) and a real
           torch.compile of a small model compared with eager.
hostdev_bw full, GPUs: pinned (and pageable) host<->device copies per GPU alone and all at once,
           judged against the GPU's own PCIe link read under load.
scaling    full: one transformer-block training step on rank 0 alone, on every rank at once
           without communication, and under DDP on all ranks (weak scaling).
sdc        full: deterministic GEMMs and reductions on every device, bit-exact across devices of
           the same model, against a CPU reference where the arithmetic is exact, and against
           their own first result while the loop loads the GPU for SDC_SECONDS.

Each check records per rank; aggregate() on rank 0 turns them into world checks whose data
carries `problems` ({"kind", "rank", "message", "fix"}) that gpufleet's rules map to rule ids.
Sources of every threshold: docs/smoke.md.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import traceback

GIB = 1 << 30
CHECKS = ("readiness", "hostdev_bw", "scaling", "sdc")
FULL_ONLY = ("hostdev_bw", "scaling", "sdc")

# PCIe per-lane, per-direction payload rate in GB/s after line coding (PCI-SIG: 2.5/5 GT/s with
# 8b/10b, 8/16/32 GT/s with 128b/130b, 64 GT/s PAM4 FLIT mode 242/256).
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.9846, 4: 1.9692, 5: 3.9385, 6: 7.5625}
# Pinned 1 GiB copies reach 55.4 H2D / 55.3 D2H GB/s on an H200's Gen5 x16 link (63.0 GB/s):
# REFERENCE.md, measured 2026-11-30. Expected = link rate x this ratio.
PINNED_CALIBRATION = 0.879
# A GPU below this fraction of its expectation is named (Gen5 x16: 47.1 GB/s; a x8 or Gen4 link
# gives ~27).
PINNED_FLOOR = 0.85
# Both H200s at once kept 0.94-1.0 of their single rates (REFERENCE.md); a host whose concurrent
# total falls below this fraction of the sum of singles is the bottleneck.
HOST_FRACTION = 0.75
# DDP weak scaling 1->2 H200 over NV18: 0.954 (REFERENCE.md); judged at 0.85 (~10 % margin).
# GPUFLEET_SMOKE_MIN_SCALING overrides it (hosts without NVLink scale worse by design).
MIN_SCALING = 0.85
# Ranks stepping alone at once: a rank this much slower than the fastest is named. CPU ranks
# share cores with everything else on the machine (a loaded 2-core CI box showed 3.5x between
# two healthy ranks), hence the wide margin there.
SLOW_RATIO = {"gpu": 1.2, "cpu": 6.0}
# Seconds the SDC loop keeps every GPU busy at full level (GPUFLEET_SMOKE_SDC_SECONDS).
SDC_SECONDS = 8.0
COMPILE_TOL = 1e-4  # relative max error, compiled vs eager, fp32 without TF32


def _env(name, default=None):
    v = os.environ.get(name)
    return v if v not in (None, "") else default


def _env_float(name, default):
    try:
        return float(_env(name, default))
    except (TypeError, ValueError):
        return default


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


def selected(level):
    """Deep checks to run: full level runs all; GPUFLEET_SMOKE_DEEP=a,b (or none) narrows."""
    want = _env("GPUFLEET_SMOKE_DEEP")
    names = CHECKS if want is None else tuple(n for n in want.split(",") if n in CHECKS)
    return [n for n in names if level == "full" or n not in FULL_ONLY]


def problem(kind, rank, message, fix, **extra):
    return {"kind": kind, "rank": rank, "message": message, "fix": fix, **extra}


def _sync(torch, dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


# --------------------------------------------------------------------------- rank side


def run(h, torch, dist, dev, use_cuda, group, level, checks, timings):  # noqa: PLR0917
    """Run the selected deep checks on this rank, recording into checks[name] and timings."""
    for name in selected(level):
        if name == "hostdev_bw" and not use_cuda:
            continue
        h.phase(name)
        t = time.perf_counter()
        try:
            if name == "readiness":
                checks[name] = readiness(h, torch, dev, use_cuda, level)
            elif name == "hostdev_bw":
                checks[name] = hostdev_bw(h, torch, dist, dev)
            elif name == "scaling":
                checks[name] = scaling(h, torch, dist, dev, use_cuda, group)
            else:
                checks[name] = sdc(h, torch, dev, use_cuda, level)
        except h.StubMissing:
            raise
        except Exception as e:  # a crashed check is a failed check, and the run goes on
            checks[name] = {"passed": False, "error": "%s: %s" % (type(e).__name__, e),
                            "traceback": traceback.format_exc()[-1500:]}
            sys.stderr.write("rank %d: check %s crashed:\n%s" % (h.RANK, name,
                                                                 checks[name]["traceback"]))
        timings[name + "_s"] = time.perf_counter() - t
    h.coll(dist.barrier)  # ranks leave together, whatever each ran


def device_identity(torch, dev, h):
    ident = {"rank": h.RANK, "local_rank": h.LOCAL_RANK, "device": str(dev)}
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


def readiness(h, torch, dev, use_cuda, level):
    out = {"tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
           "float32_matmul_precision": torch.get_float32_matmul_precision(),
           "tf32_cudnn": bool(torch.backends.cudnn.allow_tf32),
           "cudnn_available": bool(torch.backends.cudnn.is_available()),
           "cudnn_enabled": bool(torch.backends.cudnn.enabled),
           "cudnn": h.fmt_cudnn(torch.backends.cudnn.version())
           if torch.backends.cudnn.is_available() else None,
           "compile_api": hasattr(torch, "compile"),
           "triton": importlib.util.find_spec("triton") is not None,
           "env": {k: os.environ[k] for k in ("NVIDIA_TF32_OVERRIDE", "TORCH_COMPILE_DISABLE",
                                              "TORCHDYNAMO_DISABLE", "TORCH_ALLOW_TF32_CUBLAS_"
                                              "OVERRIDE") if k in os.environ}}
    probs = []
    rk = h.RANK
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
    if level == "full":
        if use_cuda:
            out["tf32_gain"] = tf32_gain(torch, dev)
        out["compile"] = compile_check(h, torch, dev, use_cuda)
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


def compile_check(h, torch, dev, use_cuda):
    """torch.compile of a small MLP: it must compile, and match eager within COMPILE_TOL."""
    rk = h.RANK
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


def hostdev_bw(h, torch, dist, dev):
    size = GIB
    bufs = (torch.empty(size, dtype=torch.uint8, device=dev),
            torch.empty(size, dtype=torch.uint8, pin_memory=True),
            torch.empty(size, dtype=torch.uint8))
    bufs[1].fill_(1)
    bufs[2].fill_(2)
    ident = device_identity(torch, dev, h)
    out = {"bytes": size, "identity": ident}
    # Each GPU alone: one local rank at a time (hosts of a multinode world go in parallel).
    turns = h.LOCAL_WORLD
    for turn in range(turns):
        h.coll(dist.barrier)
        if turn == h.LOCAL_RANK:
            out["alone"] = _bw_set(torch, dev, bufs, (0.3, 0.3))
    # All GPUs at once; local rank 0 reads every GPU's link state meanwhile (links idle down).
    h.coll(dist.barrier)
    smi = shutil.which("nvidia-smi") if h.LOCAL_RANK == 0 else None
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
    h.coll(dist.barrier)
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


def _steps(torch, dev, model, x, use_cuda, n, slow):  # noqa: PLR0917
    """Median seconds per training step (forward, backward, AdamW) over n steps after 3 warm."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    times = []
    for i in range(3 + n):
        _sync(torch, dev)
        t = time.perf_counter()
        ctx = torch.autocast("cuda", dtype=torch.bfloat16) if use_cuda else \
            contextlib.nullcontext()
        with ctx:
            loss = model(x).float().pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        _sync(torch, dev)
        dt = time.perf_counter() - t
        if slow:
            # test-only: a rank at a tenth of its speed, plus 0.2 s, so that load on a shared
            # CPU machine (which slows every rank alike) cannot hide it within SLOW_RATIO
            time.sleep(10 * dt + 0.2)
            dt = time.perf_counter() - t
        if i >= 3:
            times.append(dt)
    return statistics.median(times), times


def scaling(h, torch, dist, dev, use_cuda, group):  # noqa: PLR0917
    model, shape = _blocks(torch, dev, not use_cuda)
    g = torch.Generator().manual_seed(7 + h.RANK)
    x = torch.randn(shape["batch"], shape["seq"], shape["d_model"], generator=g).to(dev)
    slow_rank, _ = _test_rank("GPUFLEET_SMOKE_TEST_SLOW")
    slow = slow_rank == h.RANK
    n = 10
    out = {"model": shape, "steps": n, "world_size": h.WORLD,
           "identity": device_identity(torch, dev, h)}
    state = {k: v.clone() for k, v in model.state_dict().items()}
    threads = torch.get_num_threads()
    if not use_cuda:
        torch.set_num_threads(1)  # CPU ranks share the cores: without this they thrash
    try:
        _scaling_phases(h, torch, dist, dev, use_cuda, group, model, x, state, slow, out)
    finally:
        torch.set_num_threads(threads)
    del model
    if use_cuda:
        torch.cuda.empty_cache()
    out["passed"] = True  # judged on rank 0
    return out


def _scaling_phases(h, torch, dist, dev, use_cuda, group, model, x, state, slow, out):  # noqa: PLR0917
    from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: PLC0415

    n = out["steps"]
    h.coll(dist.barrier)
    if h.RANK == 0:  # 1 GPU: rank 0 alone, everyone else idle
        out["single_s"], _ = _steps(torch, dev, model, x, use_cuda, n, False)
    h.coll(dist.barrier)
    model.load_state_dict(state)
    # Every rank at once, no communication: a slow GPU (or a starved CPU) shows here.
    out["independent_s"], out["independent_steps_s"] = _steps(torch, dev, model, x, use_cuda, n,
                                                               slow)
    h.coll(dist.barrier)
    if h.WORLD > 1:
        model.load_state_dict(state)
        for attempt in ("stub", "real"):
            try:
                with h.dynamo_stub(torch) if attempt == "stub" else contextlib.nullcontext():
                    ddp = DDP(model, device_ids=[dev.index] if use_cuda else None,
                              process_group=group)
                    h.enter()  # each step's backward runs the gradient all-reduce
                    out["ddp_s"], out["ddp_steps_s"] = _steps(torch, dev, ddp, x, use_cuda, n,
                                                              slow)
                    h.leave()
                    del ddp
                break
            except h.StubMissing:
                h.leave()


# ------------------------------------------------------------------- silent data corruption


def _digest(torch, t, weights):
    """Two exact int64 sums over t's bits: any single changed bit changes them."""
    v = t.contiguous().view(-1)
    v = v.view(torch.int16 if v.element_size() == 2 else torch.int32).to(torch.int64)
    lo, hi = v & 0xFFFF, (v >> 16) & 0xFFFF
    w = weights[: v.numel()]
    return torch.stack([v.sum(), (lo * w).sum() + (hi * w.flip(0)).sum()])


def _sdc_ops(torch, dev, use_cuda, level):
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


def sdc(h, torch, dev, use_cuda, level):
    ops, cpu_ref, most, n_exact = _sdc_ops(torch, dev, use_cuda, level)
    weights = (torch.arange(most, dtype=torch.int64, device=dev) % 8191) + 1
    bad_rank, mode = _test_rank("GPUFLEET_SMOKE_TEST_CORRUPT")
    corrupt = bad_rank == h.RANK

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
        seconds = _env_float("GPUFLEET_SMOKE_SDC_SECONDS", SDC_SECONDS) if level == "full" \
            and use_cuda else 0.0
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
    out = {"identity": device_identity(torch, dev, h), "iterations": its, "seconds": secs,
           "tflops": flops / secs / 1e12 if secs > 0 else None,
           "ops": {k: {"what": ops[k][3], "digest": [int(x) for x in first[k].tolist()],
                       "changed_runs": int(changed[k])} for k in ops}}
    if h.RANK == 0:
        cw = (torch.arange(2 * n_exact, dtype=torch.int64) % 8191) + 1
        out["cpu_reference"] = {k: [int(x) for x in _digest(torch, fn(), cw).tolist()]
                                for k, fn in cpu_ref.items()}
    out["passed"] = True  # judged on rank 0
    return out


# --------------------------------------------------------------------------- rank 0: verdicts


def _who(ident):
    if not ident:
        return "?"
    if ident.get("device", "").startswith("cuda"):
        idx = ident["device"].split(":")[-1]
        extra = ", ".join(x for x in (ident.get("bus_id"), ident.get("uuid")) if x)
        return "GPU%s of rank %s (%s%s)" % (idx, ident["rank"], ident.get("name"),
                                            ", " + extra if extra else "")
    return "rank %s (cpu)" % ident.get("rank")


def _link_text(link):
    if not link or link.get("width_max") is None:
        return "link state unknown"
    return "PCIe Gen%s x%s (max Gen%s x%s)" % (link.get("gen_current"), link.get("width_current"),
                                              link.get("gen_max"), link.get("width_max"))


def _expected(link):
    if not link or not link.get("gen_max") or not link.get("width_max"):
        return None
    lane = PCIE_LANE_GBPS.get(link["gen_max"])
    return lane * link["width_max"] * PINNED_CALIBRATION if lane else None


def agg_hostdev(ranks):
    rows = [(r, r["checks"]["hostdev_bw"]) for r in ranks if r["checks"].get("hostdev_bw")]
    links = {}  # host -> every GPU's link state, as local rank 0 read it under load
    for r, c in rows:
        for link in (c.get("links") or {}).values():
            links.setdefault(r["info"]["host"], []).append(link)
    per_gpu, probs = {}, []
    hosts = {}
    for r, c in rows:
        if "error" in c:
            probs.append(problem("check_error", r["rank"], c["error"], "read the traceback"))
            continue
        ident = dict(c["identity"], host=r["info"]["host"])
        link = _match_link(links.get(ident["host"], []), ident)
        exp = _expected(link)
        row = {"who": _who(ident), "host": ident["host"], "alone": c["alone"],
               "together": c["together"], "link": link, "expected_pinned_gbps": exp,
               "numa": c.get("numa")}
        per_gpu[str(r["rank"])] = row
        hosts.setdefault(ident["host"], []).append((r["rank"], row))
    for host, members in sorted(hosts.items()):
        med = statistics.median(min(m["alone"]["pinned_h2d"], m["alone"]["pinned_d2h"])
                                for _, m in members)
        for rank, m in members:
            worst_dir = min(("pinned_h2d", "pinned_d2h"), key=lambda k: m["alone"][k])
            got = m["alone"][worst_dir]
            exp = m["expected_pinned_gbps"]
            if exp is not None and got < PINNED_FLOOR * exp:
                link = m["link"]
                degraded = (link.get("gen_current") or 0) < link["gen_max"] or \
                    (link.get("width_current") or 0) < link["width_max"]
                why = ("the link runs below its maximum: reseat the GPU/riser, check BIOS PCIe "
                       "settings and `nvidia-smi -q -d PCIE`" if degraded else
                       "the link itself is at its maximum: look for other traffic on it (GPU "
                       "processes, `nvidia-smi dmon -s t`), IOMMU/ACS settings and the CPU "
                       "socket the copy runs on")
                probs.append(problem(
                    "gpu_slow", rank,
                    "%s on %s: pinned %s %.1f GB/s alone, below %.0f %% of the %.1f GB/s "
                    "expected from its %s" % (m["who"], host, worst_dir[7:].upper(), got,
                                              100 * PINNED_FLOOR, exp, _link_text(link)),
                    why, host=host, gbps=got, expected_gbps=exp, link=link))
            elif exp is None and len(members) > 1 and got < 0.8 * med:
                probs.append(problem(
                    "gpu_slow", rank,
                    "%s on %s: pinned %s %.1f GB/s alone, below 80 %% of its peers' median "
                    "%.1f GB/s (%s)" % (m["who"], host, worst_dir[7:].upper(), got, med,
                                        _link_text(m["link"])),
                    "compare `nvidia-smi -q -d PCIE` of the GPUs; reseat the slow one",
                    host=host, gbps=got, peers_median_gbps=med))
        if len(members) > 1:
            for key in ("pinned_h2d", "pinned_d2h"):
                single = sum(m["alone"][key] for _, m in members)
                together = sum(m["together"][key] for _, m in members)
                if together < HOST_FRACTION * single:
                    numa = {m["who"]: m.get("numa") for _, m in members}
                    probs.append(problem(
                        "host_bound", None,
                        "%s: %d GPUs copying at once reach %.1f GB/s %s in total, %.0f %% of the "
                        "%.1f GB/s their single copies sum to: the host (PCIe root complex/"
                        "switch, NUMA placement, memory bandwidth) limits concurrent copies"
                        % (host, len(members), together, key[7:].upper(),
                           100 * together / single, single),
                        "check which root port/switch each GPU hangs off (`nvidia-smi topo -m`, "
                        "`lspci -tv`), bind each rank to its GPU's NUMA node (numactl, "
                        "torchrun's --local_ranks_filter / srun --cpu-bind), and the BIOS "
                        "memory/PCIe settings", host=host, numa=numa, single_sum_gbps=single,
                        together_gbps=together))
    detail = "; ".join(p["message"] for p in probs) or ", ".join(
        "%s %.1f/%.1f GB/s alone, %.1f/%.1f together (pinned H2D/D2H; pageable %.1f/%.1f)"
        % (v["who"].split(" (")[0], v["alone"]["pinned_h2d"], v["alone"]["pinned_d2h"],
           v["together"]["pinned_h2d"], v["together"]["pinned_d2h"],
           v["alone"]["pageable_h2d"], v["alone"]["pageable_d2h"])
        for _, v in sorted(per_gpu.items(), key=lambda kv: int(kv[0])))
    return not probs, detail, {"per_gpu": per_gpu, "problems": probs,
                               "calibration": PINNED_CALIBRATION, "floor": PINNED_FLOOR,
                               "host_fraction": HOST_FRACTION}


def _match_link(links, ident):
    """This GPU's row of nvidia-smi's link query: by UUID, else by PCI bus id."""
    for lk in links:
        if ident.get("uuid") and lk.get("uuid", "").lower() == ident["uuid"].lower():
            return lk
    for lk in links:
        if ident.get("bus_id") and lk.get("bus_id", "")[-12:].lower() == \
                ident["bus_id"][-12:].lower():
            return lk
    return None


def agg_scaling(ranks):
    rows = [(r, r["checks"]["scaling"]) for r in ranks if r["checks"].get("scaling")]
    errs = [problem("check_error", r["rank"], c["error"], "read the traceback")
            for r, c in rows if "error" in c]
    if errs or not rows:
        return False, "; ".join(p["message"] for p in errs), {"problems": errs}
    cpu = not ranks[0]["info"]["device"].startswith("cuda")
    first = rows[0][1]
    single = first.get("single_s")
    per_rank = {str(r["rank"]): {"who": _who(c["identity"]), "host": r["info"]["host"],
                                 "independent_s": c["independent_s"], "ddp_s": c.get("ddp_s")}
                for r, c in rows}
    probs = []

    def step(c):
        # CPU ranks share cores with the rest of the machine: their best step is what they can
        # do, their median is what the load let them do. GPUs: the median.
        return min(c.get("independent_steps_s") or [c["independent_s"]]) if cpu \
            else c["independent_s"]

    fastest = min(step(c) for _, c in rows)
    ratio = SLOW_RATIO["cpu" if cpu else "gpu"]
    what = "best" if cpu else "median"
    for r, c in rows:
        if len(rows) > 1 and step(c) > ratio * fastest:
            probs.append(problem(
                "slow_rank", r["rank"],
                "%s on %s: %.1f ms per step alone (%s of %d) vs %.1f ms on the fastest rank "
                "(%.2fx, limit %.2fx)" % (_who(c["identity"]), r["info"]["host"],
                                          1e3 * step(c), what, first["steps"], 1e3 * fastest,
                                          step(c) / fastest, ratio),
                "check that GPU's clocks, throttling and other processes (`nvidia-smi -q -d "
                "PERFORMANCE,CLOCK`, `nvidia-smi --query-compute-apps=pid,name "
                "--format=csv`), and the CPU cores its rank may use",
                host=r["info"]["host"], step_s=step(c), fastest_s=fastest))
    data = {"per_rank": per_rank, "single_s": single, "model": first["model"],
            "steps": first["steps"], "world_size": len(rows), "problems": probs,
            "slow_ratio": ratio}
    eff = None
    if len(rows) > 1:
        t_n = max(c["ddp_s"] for _, c in rows)
        eff = single / t_n
        minimum = _env_float("GPUFLEET_SMOKE_MIN_SCALING", MIN_SCALING)
        data.update(ddp_s=t_n, efficiency=eff, threshold=None if cpu else minimum)
        if not cpu and eff < minimum:
            probs.append(problem(
                "low_scaling", None,
                "DDP weak-scaling efficiency 1->%d ranks %.3f < %.2f: %.1f ms per step on one "
                "GPU, %.1f ms on all %d (throughput %.2fx of %dx)"
                % (len(rows), eff, minimum, 1e3 * single, 1e3 * t_n, len(rows),
                   len(rows) * eff, len(rows)),
                "a slow rank (above) or the interconnect: check `nvidia-smi topo -m` and "
                "`nvidia-smi nvlink -s`, NCCL_P2P_DISABLE/NCCL_SHM_DISABLE in the environment, "
                "and each rank's CPU binding", efficiency=eff, threshold=minimum))
    if probs:
        detail = "; ".join(p["message"] for p in probs)
    elif eff is None:
        detail = "one rank: %.1f ms per step, nothing to scale to" % (1e3 * single)
    else:
        detail = "weak-scaling efficiency 1->%d %.3f (%.1f -> %.1f ms per step)%s" % (
            len(rows), eff, 1e3 * single, 1e3 * data["ddp_s"],
            " (CPU ranks: recorded, not judged)" if cpu else "")
    return not probs, detail, data


def agg_sdc(ranks):
    rows = [(r, r["checks"]["sdc"]) for r in ranks if r["checks"].get("sdc")]
    errs = [problem("check_error", r["rank"], c["error"], "read the traceback")
            for r, c in rows if "error" in c]
    if errs or not rows:
        return False, "; ".join(p["message"] for p in errs), {"problems": errs}
    ref = next((c.get("cpu_reference") for _, c in rows if c.get("cpu_reference")), {})
    bad = {}  # rank -> reasons

    def blame(rank, why):
        bad.setdefault(rank, []).append(why)

    ops = sorted(rows[0][1]["ops"])
    what = {op: rows[0][1]["ops"][op]["what"] for op in ops}
    # First what needs no peers: a device against itself (repeats) and against exact arithmetic.
    for op in ops:
        for r, c in rows:
            o = c["ops"][op]
            if o["changed_runs"]:
                blame(r["rank"], "%s changed in %d of %d repeats on the same device"
                      % (what[op], o["changed_runs"], c["iterations"] - 1))
            if op in ref and o["digest"] != ref[op]:
                blame(r["rank"], "%s differs from the CPU reference" % what[op])
    exact_bad = set(bad)
    # Then bit-exact agreement among devices of the same model, where no exact answer exists.
    models = {}
    for r, c in rows:
        models.setdefault(c["identity"].get("name"), []).append((r, c))
    for op in (o for o in ops if o not in ref):
        for members in models.values():
            votes = {}
            for r, c in members:
                votes.setdefault(tuple(c["ops"][op]["digest"]), []).append(r["rank"])
            if len(votes) < 2:
                continue
            top = max(len(v) for v in votes.values())
            winners = [d for d, v in votes.items() if len(v) == top]
            everyone = sorted(rk for v in votes.values() for rk in v)
            if len(winners) == 1:
                for d, v in votes.items():
                    if d != winners[0]:
                        for rk in v:
                            blame(rk, "%s differs from %d other device(s) of the same model"
                                  % (what[op], top))
                continue
            # No majority (two devices): the ones that failed an exact check are to blame.
            suspects = [rk for rk in everyone if rk in exact_bad]
            for rk in suspects or everyone:
                blame(rk, "%s disagrees between ranks %s (no majority%s)"
                      % (what[op], ", ".join(map(str, everyone)),
                         "; this one failed the exact checks" if suspects else ""))
    probs = []
    by_rank = {r["rank"]: (r, c) for r, c in rows}
    for rk, why in sorted(bad.items()):
        r, c = by_rank[rk]
        probs.append(problem(
            "sdc", rk, "%s on %s computed wrong results: %s" % (_who(c["identity"]),
                                                                r["info"]["host"],
                                                                "; ".join(why)),
            "drain the host and run `dcgmi diag -r 3` (or -r 4) on that GPU; RMA it if the "
            "mismatch repeats", host=r["info"]["host"], identity=c["identity"]))
    secs = max(c["seconds"] for _, c in rows)
    iters = min(c["iterations"] for _, c in rows)
    data = {"problems": probs, "ops": what,
            "per_rank": {str(r["rank"]): {"who": _who(c["identity"]), "iterations": c["iterations"],
                                          "seconds": c["seconds"], "tflops": c["tflops"],
                                          "digests": {op: c["ops"][op]["digest"] for op in ops}}
                         for r, c in rows},
            "cpu_reference": ref}
    detail = "; ".join(p["message"] for p in probs) or (
        "%d ops bit-identical on %d device(s) and repeats, exact ops equal to the CPU "
        "reference (%d iterations, %.1f s)" % (len(ops), len(rows), iters, secs))
    return not probs, detail, data


def agg_readiness(ranks):
    rows = [(r, r["checks"]["readiness"]) for r in ranks if r["checks"].get("readiness")]
    probs, seen = [], set()
    for r, c in rows:
        if "error" in c:
            probs.append(problem("check_error", r["rank"], c["error"], "read the traceback"))
        for p in c.get("problems", []):
            key = (p["kind"], p["message"])
            if key not in seen:  # the same image on every rank says the same thing once
                seen.add(key)
                probs.append(dict(p, host=r["info"]["host"]))
    c0 = rows[0][1] if rows else {}
    failing = [p for p in probs if p["kind"] in ("cudnn_unavailable", "compile_failed",
                                                 "compile_mismatch", "check_error")]
    parts = ["TF32 matmul %s by default (precision %s)"
             % ("on" if c0.get("tf32_matmul") else "off", c0.get("float32_matmul_precision"))]
    gain = c0.get("tf32_gain")
    if gain:
        parts.append("fp32 %.1f TFLOP/s, %.1f with TF32 (%.1fx)"
                     % (gain["fp32_tflops"], gain["tf32_tflops"], gain["speedup"]))
    if c0.get("cudnn"):
        parts.append("cuDNN %s" % c0["cudnn"])
    comp = [c.get("compile") for _, c in rows if c.get("compile")]
    if comp and all(x.get("passed") for x in comp):
        parts.append("torch.compile ok on %d rank(s), %.1f-%.1f s cold, rel err <= %.1e"
                     % (len(comp), min(x["compile_s"] for x in comp),
                        max(x["compile_s"] for x in comp), max(x["rel_err"] for x in comp)))
    detail = "; ".join(p["message"] for p in failing) or ", ".join(parts)
    if probs and not failing:
        detail += "; " + "; ".join(p["message"] for p in probs)
    per_rank = {str(r["rank"]): {k: v for k, v in c.items() if k != "problems"} for r, c in rows}
    return not failing, detail, {"per_rank": per_rank, "problems": probs,
                                 "tf32_matmul_default": c0.get("tf32_matmul"),
                                 "tf32_gain": gain}


AGGREGATORS = (("readiness", agg_readiness), ("hostdev_bw", agg_hostdev),
               ("scaling", agg_scaling), ("sdc", agg_sdc))


def aggregate(ranks):
    """World checks (name, passed, detail, data) for every deep check some rank ran."""
    out = []
    for name, fn in AGGREGATORS:
        if not any(r["checks"].get(name) for r in ranks):
            continue
        try:
            out.append((name, *fn(ranks)))
        except Exception as e:  # a verdict bug must not cost the whole result
            out.append((name, False, "could not judge %s: %s: %s" % (name, type(e).__name__, e),
                        {"problems": [], "traceback": traceback.format_exc()[-1500:]}))
    return out


if __name__ == "__main__":  # pragma: no cover - a helper module, not a program
    sys.stderr.write("smoke_deep.py is imported by smoke_ddp.py\n")
    print(json.dumps({"checks": CHECKS}))
    sys.exit(2)
