"""The checks every level runs before the bandwidth sweep: what each rank measures, and how rank 0
turns every rank's record into one world check (the aggregate half of a registry entry)."""

from __future__ import annotations

import json
import math
import time

from . import progress as pg


class Ctx:
    """What a rank check gets: torch, the groups, this rank's device, the level's host fields."""

    def __init__(self, torch, dist, dev, use_cuda, all_gpu, group, spec):  # noqa: PLR0917
        self.torch, self.dist, self.group, self.spec = torch, dist, group, spec
        self.dev = dev  # this rank's device (its GPU, or the CPU)
        self.use_cuda = use_cuda  # torch sees CUDA and --cpu was not given
        self.all_gpu = all_gpu  # every rank has a GPU: NCCL; else the world runs gloo on CPU
        self.run_dev = dev if all_gpu else torch.device("cpu")  # where collectives run
        self.stub = False  # the dynamo stub is active (dynamo.py), for checks that record it
        self.ddp = None  # the ddp check's model, which amp trains on


def timed(torch, use_cuda, reps, step):
    """Seconds for `reps` calls of step(): CUDA events on a GPU (the kernels' time, not the
    launches'), wall time on CPU."""
    if use_cuda:
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(reps):
            step()
        e1.record()
        e1.synchronize()
        return e0.elapsed_time(e1) / 1e3
    t = time.perf_counter()
    for _ in range(reps):
        step()
    return time.perf_counter() - t


def check_matmul(torch, dev, use_cuda, cpu_n):
    """Per-device matmul against a higher-precision reference, plus its throughput."""
    if use_cuda:
        n, dtype, ref_dtype, tol, iters = 8192, torch.bfloat16, torch.float32, 1e-2, 10
    else:
        n, dtype, ref_dtype, tol, iters = cpu_n, torch.float32, torch.float64, 1e-4, 5
    g = torch.Generator(device=dev).manual_seed(1234 + pg.RANK)
    a = torch.randn(n, n, device=dev, dtype=dtype, generator=g)
    b = torch.randn(n, n, device=dev, dtype=dtype, generator=g)
    c = a @ b
    ref = a.to(ref_dtype) @ b.to(ref_dtype)
    rel_err = float(torch.linalg.norm(c.to(ref_dtype) - ref) / torch.linalg.norm(ref))
    for _ in range(2):
        a @ b
    if use_cuda:
        torch.cuda.synchronize()
    secs = timed(torch, use_cuda, iters, lambda: a @ b)
    tflops = 2.0 * n ** 3 * iters / secs / 1e12
    ok = math.isfinite(rel_err) and rel_err < tol
    return {"passed": ok, "n": n, "dtype": str(dtype).replace("torch.", ""),
            "rel_err": rel_err, "tol": tol, "tflops": tflops}


def check_allreduce_exact(torch, dist, dev, group):
    n = 1 << 20
    base = torch.arange(n, dtype=torch.int32, device=dev) % 1000
    t = base * (pg.RANK + 1) + pg.RANK
    pg.coll(dist.all_reduce, t, group=group)
    w = dist.get_world_size(group)
    expect = base * (w * (w + 1) // 2) + w * (w - 1) // 2
    bad = int((t != expect).sum())
    return {"passed": bad == 0, "elements": n, "dtype": "int32", "mismatched": bad}


def _flat_params(torch, model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _same_as_rank0(torch, dist, flat, group):
    # DDP groups here always span the world, so global rank 0 is the group's first rank.
    ref = flat.clone()
    pg.coll(dist.broadcast, ref, src=0, group=group)
    return bool(torch.equal(ref, flat))


def make_model(torch, dev, use_cuda):
    d = 1024 if use_cuda else 64
    torch.manual_seed(0)  # DDP broadcasts rank 0's weights anyway; same seed keeps it honest
    model = torch.nn.Sequential(
        torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d)
    ).to(dev)
    return model, d


def check_ddp(torch, dist, dev, use_cuda, group, steps):  # noqa: PLR0917
    from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: PLC0415

    model, d = make_model(torch, dev, use_cuda)
    before = _flat_params(torch, model).clone()
    ddp = DDP(model, device_ids=[dev.index] if use_cuda else None, process_group=group)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator(device=dev).manual_seed(100 + pg.RANK)  # different data per rank
    losses = []
    for _ in range(steps):
        x = torch.randn(64, d, device=dev, generator=g)
        loss = torch.nn.functional.mse_loss(ddp(x), x)
        opt.zero_grad(set_to_none=True)
        pg.enter()  # backward runs the gradient all-reduce
        loss.backward()
        opt.step()
        pg.leave()
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
    g = torch.Generator(device=dev).manual_seed(200 + pg.RANK)
    out = {}
    x = torch.randn(64, d, device=dev, generator=g)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = torch.nn.functional.mse_loss(ddp(x).float(), x)
    pg.enter()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    pg.leave()
    out["bf16_loss"] = float(loss.detach())
    try:
        scaler = torch.amp.GradScaler("cuda")
    except (AttributeError, TypeError):  # torch < 2.3
        scaler = torch.cuda.amp.GradScaler()
    with torch.autocast("cuda", dtype=torch.float16):
        loss = torch.nn.functional.mse_loss(ddp(x).float(), x)
    pg.enter()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    pg.leave()
    out["fp16_loss"] = float(loss.detach())
    out["fp16_scale"] = float(scaler.get_scale())
    flat = _flat_params(torch, model)
    out["params_finite"] = bool(torch.isfinite(flat).all())
    out["identical_to_rank0"] = _same_as_rank0(torch, dist, flat, group)
    out["passed"] = (math.isfinite(out["bf16_loss"]) and math.isfinite(out["fp16_loss"])
                     and out["fp16_scale"] > 0 and out["params_finite"]
                     and out["identical_to_rank0"])
    return out


# ------------------------------------------------------------------- registry halves


def rank_matmul(c):
    if c.dev.type == "cuda" or not c.use_cuda:
        return check_matmul(c.torch, c.dev, c.dev.type == "cuda", c.spec["matmul_cpu_n"])
    return {"passed": False, "error": "no GPU for local rank %d" % pg.LOCAL_RANK}


def rank_allreduce_exact(c):
    return check_allreduce_exact(c.torch, c.dist, c.run_dev, c.group)


def rank_ddp(c):
    out, c.ddp = check_ddp(c.torch, c.dist, c.run_dev, c.all_gpu, c.group, c.spec["ddp_steps"])
    out["dynamo_stub"] = c.stub
    return out


def rank_amp(c):
    return check_amp(c.torch, c.dist, c.dev, c.ddp, c.group)


def on_gpus(c):
    """Applies only where every rank has a GPU (the world runs NCCL)."""
    return c.all_gpu


def _per_rank(ranks, name):
    """[(rank, its record or None)], the ranks that failed, and the per-rank data."""
    got = [(r["rank"], r["checks"].get(name)) for r in ranks]
    bad = [rk for rk, c in got if not (c and c.get("passed"))]
    return got, bad, {"per_rank": {str(rk): c for rk, c in got}}


def _judged(got, bad, data, detail):
    """(passed, detail, data): `detail` when every rank passed, else the failing ranks' records."""
    if bad:
        detail = "failed on rank(s) %s: %s" % (
            ", ".join(str(b) for b in bad),
            "; ".join("%d: %s" % (rk, json.dumps(c, sort_keys=True)[:300])
                      for rk, c in got if rk in bad))
    return not bad, detail, data


def agg_matmul(ranks):
    got, bad, data = _per_rank(ranks, "matmul")
    tf = [c.get("tflops") for _, c in got if c and c.get("tflops")]
    detail = ("%s %dx%d on every rank, %.1f-%.1f TFLOP/s"
              % (got[0][1].get("dtype"), got[0][1].get("n"), got[0][1].get("n"),
                 min(tf), max(tf))) if tf and not bad else ""
    return _judged(got, bad, data, detail)


def agg_allreduce_exact(ranks):
    got, bad, data = _per_rank(ranks, "allreduce_exact")
    return _judged(got, bad, data, "int32 sum exact on all %d ranks" % len(got))


def agg_ddp(ranks):
    got, bad, data = _per_rank(ranks, "ddp")
    c0 = got[0][1] or {}
    return _judged(got, bad, data, "%s steps, %s parameters bit-identical on all ranks"
                   % (c0.get("steps"), c0.get("params")))


def agg_amp(ranks):
    got, bad, data = _per_rank(ranks, "amp")
    return _judged(got, bad, data,
                   "bf16 autocast and fp16 GradScaler steps finite and identical")
