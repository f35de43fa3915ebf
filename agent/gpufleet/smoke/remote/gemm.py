"""GEMM TFLOP/s per dtype per GPU (full level), with an nvidia-smi sample taken under the load.

Dtypes: bf16, fp16, tf32 (fp32 inputs with TF32 allowed), fp32 (TF32 off), fp8 e4m3 through
torch._scaled_mm where the GPU has FP8 tensor cores (compute capability >= 8.9). Each runs an
8192^3 product (as the quick matmul check and REFERENCE.md's plain-torch anchors) for at least
SECONDS after two warm-ups, timed with CUDA events. Not judged here: the controller compares each
number with the SKU catalog (gpufleet/sku). CPU ranks record nothing (gloo CI runs).
"""

from __future__ import annotations

from . import progress as pg
from . import sample
from .checks import timed
from .deep import device_identity

N = 8192
SECONDS = 0.15  # per dtype: ~100 bf16 products on an H200; 5 dtypes ~1.5 s of the full level
DTYPES = ("bf16", "fp16", "tf32", "fp32", "fp8")


def _operands(torch, dev, dtype):
    g = torch.Generator(device=dev).manual_seed(4321 + pg.RANK)
    base = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(dtype, torch.float32)
    a = torch.randn(N, N, device=dev, dtype=base, generator=g)
    b = torch.randn(N, N, device=dev, dtype=base, generator=g)
    if dtype == "fp8":
        return _fp8(torch, dev, a, b)
    return lambda: a @ b


def _fp8(torch, dev, a, b):
    one = torch.tensor(1.0, device=dev)
    a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn).t()  # mat2 column-major
    return lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def _rate(torch, step):
    step()
    step()
    torch.cuda.synchronize()
    probe = timed(torch, True, 3, step)
    reps = max(3, int(SECONDS / max(probe / 3, 1e-6)))
    secs = timed(torch, True, reps, step)
    return 2.0 * N ** 3 * reps / secs / 1e12, reps, secs


def rank_gemm(c):
    torch, dev = c.torch, c.dev
    if dev.type != "cuda":
        return {"passed": True, "skipped": "cpu rank"}
    ident = device_identity(torch, dev)
    cap = torch.cuda.get_device_capability(dev)
    out = {"passed": True, "n": N, "identity": ident, "tflops": {}, "errors": {}}
    prev = torch.backends.cuda.matmul.allow_tf32
    smp = None
    try:
        for dtype in DTYPES:
            if dtype == "fp8" and (cap < (8, 9) or not hasattr(torch, "float8_e4m3fn")):
                out["errors"][dtype] = "no FP8 tensor cores (compute capability %d.%d)" % cap
                continue
            torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
            try:
                step = _operands(torch, dev, dtype)
                if dtype == "bf16":  # the longest, most power-hungry load: sample under it
                    smp = sample.start()
                out["tflops"][dtype], out.setdefault("reps", {})[dtype], _ = _rate(torch, step)
            except Exception as e:  # a dtype the build lacks is data, not a crash
                out["errors"][dtype] = "%s: %s" % (type(e).__name__, str(e)[:200])
            finally:
                step = None
                torch.cuda.empty_cache()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev
    out["sample"] = sample.finish(smp, ident.get("uuid"))
    return out


def agg_gemm(ranks):
    per_rank = {str(r["rank"]): r["checks"].get("gemm") for r in ranks}
    rows = {rk: c["tflops"] for rk, c in per_rank.items() if c and c.get("tflops")}
    data = {"per_rank": per_rank, "judged_by": "controller (gpufleet.sku)"}
    if not rows:
        return True, "no GEMM measured (CPU ranks)", data
    dtypes = [d for d in DTYPES if any(d in t for t in rows.values())]
    detail = ", ".join("%s %.1f" % (d, min(t[d] for t in rows.values() if d in t))
                       for d in dtypes)
    return True, "GEMM %d^3 TFLOP/s (min over %d GPU(s)): %s" % (N, len(rows), detail), data
