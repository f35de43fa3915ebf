"""GPU<->GPU copy matrix (full level, hosts of 2+ GPUs): every ordered pair, as nvbandwidth's
device_to_device_memcpy_read_ce measures it (NVIDIA/nvbandwidth@66746a3, read there):

- which copy engine: the READING GPU's. testcases_ce.cpp DeviceToDeviceReadCE::run allocates a
  buffer on the row GPU and one on the column (peer) GPU, enables the row GPU's peer access to
  the peer, and copies peer -> row with PREFER_DST_CONTEXT (memcpy.cpp NodeHelperSingle::
  dispatchMemcpy): the copy is issued in the destination's context, so its CE pulls the bytes.
  torch's own `dst.copy_(src)` issues a cross-device copy on the SOURCE device's stream
  (pytorch aten/src/ATen/native/cuda/Copy.cu copy_device_to_device), i.e. the write direction,
  so the timed copies here go through the CUDA driver's cuMemcpyDtoDAsync on a stream of the
  reading GPU (ctypes on libcuda.so.1, which every CUDA-capable torch already loaded); torch
  still allocates, enables peer access (a 1-element copy reader -> peer: at::cuda::
  get_p2p_access(reader, peer)) and times (CUDA events on that stream).
- buffer size and repeats: 512 MiB (common.h defaultBufferSize), per sample 4 warm-up copies
  then 16 timed ones (WARMUP_COUNT, defaultLoopCount), 3 samples, the median
  (defaultAverageLoopCount; PerformanceStatistic's median unless --useMean).
- bandwidth: bytes x 16 / the events' elapsed time, bytes counted once (memcpy.cpp
  doMemcpyCore: size * loopCount * 1e6 / microseconds; GB = 1e9 bytes).
Cost on N GPUs: N x (N-1) pairs x 3 x 20 copies of 512 MiB, one pair at a time with every
other rank waiting (estimated from the rates, not measured: 6.5 s on 8 x A100 at 276 GB/s,
2.4 s on 8 x B200 at 750); capped at BUDGET_S, the pairs left out say so. A host of one GPU
measures nothing and waits for nobody.
Local rank 0 of each host measures its host (the other local ranks' GPUs: cuda:0..LOCAL_WORLD-1)
between two world barriers, so no other check loads a GPU meanwhile. Judged on the controller
(gpufleet/sku, GF544), not here.
"""

from __future__ import annotations

import ctypes
import statistics
import time

from . import progress as pg

BYTES = 512 << 20
WARMUP = 4
LOOPS = 16
SAMPLES = 3
BUDGET_S = 25.0  # under the watchdog's stall limit and the collectives' timeout
METHOD = ("nvbandwidth device_to_device_memcpy_read_ce: the reading GPU's copy engine, "
          "512 MiB, 3 x (4 warm-up + 16 timed) copies, median; bytes counted once")


class DriverError(RuntimeError):
    pass


def driver():
    """libcuda's three calls the copy needs, typed (OSError/AttributeError when absent)."""
    lib = ctypes.CDLL("libcuda.so.1")
    vp = ctypes.c_void_p
    lib.cuMemcpyDtoDAsync_v2.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, vp]
    lib.cuStreamGetCtx.argtypes = [vp, ctypes.POINTER(vp)]
    lib.cuCtxPushCurrent_v2.argtypes = [vp]
    lib.cuCtxPopCurrent_v2.argtypes = [ctypes.POINTER(vp)]
    return lib


def _ok(rc, what):
    if rc != 0:
        raise DriverError("%s failed: CUresult %d" % (what, rc))


def _issue(drv, dst, src, count, stream):
    """`count` copies src -> dst enqueued in the stream's own context (so on its GPU's CE)."""
    ctx = ctypes.c_void_p()
    handle = ctypes.c_void_p(stream.cuda_stream)
    _ok(drv.cuStreamGetCtx(handle, ctypes.byref(ctx)), "cuStreamGetCtx")
    _ok(drv.cuCtxPushCurrent_v2(ctx), "cuCtxPushCurrent")
    try:
        n = dst.numel() * dst.element_size()
        for _ in range(count):
            _ok(drv.cuMemcpyDtoDAsync_v2(dst.data_ptr(), src.data_ptr(), n, handle),
                "cuMemcpyDtoDAsync")
    finally:
        _ok(drv.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p())), "cuCtxPopCurrent")


def read_copy(torch, drv, dst, src, *, samples=SAMPLES, deadline=None):
    """GB/s of src -> dst issued on dst's GPU, counted as nvbandwidth counts it; also the
    same-device copy when both tensors live on one GPU (tests/gpu checks that against membw).
    Past `deadline` (perf_counter) no further sample starts: a crawling link costs one."""
    dev = dst.device
    with torch.cuda.device(dev):
        stream = torch.cuda.Stream(device=dev)
        rates, secs = [], []
        for _ in range(samples):
            if rates and deadline is not None and time.perf_counter() > deadline:
                break
            e0 = torch.cuda.Event(enable_timing=True)
            e1 = torch.cuda.Event(enable_timing=True)
            _issue(drv, dst, src, WARMUP, stream)
            e0.record(stream)
            _issue(drv, dst, src, LOOPS, stream)
            e1.record(stream)
            e1.synchronize()
            s = e0.elapsed_time(e1) / 1e3
            secs.append(s)
            rates.append(dst.numel() * dst.element_size() * LOOPS / s / 1e9 if s > 0 else 0.0)
    return {"gbps": statistics.median(rates), "samples_gbps": rates, "seconds": sum(secs)}


def _uuid(torch, d):
    u = str(getattr(torch.cuda.get_device_properties(d), "uuid", "") or "")
    return (u if u.startswith(("GPU-", "MIG-")) else "GPU-" + u) if u else None


def matrix(torch, devices, nbytes=BYTES, budget_s=BUDGET_S):
    """Every ordered pair (src, dst) of `devices` (torch indices), one at a time."""
    out = {"method": METHOD, "bytes": nbytes, "devices": {str(d): _uuid(torch, d)
                                                          for d in devices}, "pairs": []}
    try:
        drv = driver()
    except (OSError, AttributeError) as e:
        out["error"] = "cannot load the CUDA driver API (libcuda.so.1): %s" % e
        return out
    bufs = {d: torch.empty(nbytes, dtype=torch.uint8, device="cuda:%d" % d) for d in devices}
    for d, b in bufs.items():
        b.fill_(d + 1)
        torch.cuda.synchronize(d)  # the timed copies run on streams of their own
    t0 = time.perf_counter()
    try:
        for dst in devices:
            for src in devices:
                if src == dst:
                    continue
                row = {"src": src, "dst": dst,
                       "peer_access": bool(torch.cuda.can_device_access_peer(dst, src))}
                out["pairs"].append(row)
                if time.perf_counter() - t0 > budget_s:
                    row["error"] = "not measured: the matrix's %g s budget ran out" % budget_s
                    continue
                try:
                    bufs[src][:1].copy_(bufs[dst][:1])  # torch enables dst's access to src
                    torch.cuda.synchronize(dst)
                    row.update(read_copy(torch, drv, bufs[dst], bufs[src],
                                         deadline=t0 + budget_s))
                except (RuntimeError, DriverError) as e:
                    row["error"] = "%s: %s" % (type(e).__name__, str(e)[:200])
    finally:
        del bufs
        torch.cuda.empty_cache()
    out["seconds"] = time.perf_counter() - t0
    return out


def rank_p2p(c):
    torch, dist = c.torch, c.dist
    n = pg.LOCAL_WORLD if torch.cuda.device_count() >= pg.LOCAL_WORLD else 0
    if pg.WORLD > 1:
        pg.coll(dist.barrier)  # every rank, whatever its host: the same barriers everywhere
    out = {"passed": True, "rank": pg.RANK, "local_rank": pg.LOCAL_RANK}
    if pg.LOCAL_RANK == 0 and n >= 2:
        try:
            out.update(matrix(torch, list(range(n))))
        except Exception as e:  # the others wait at the next barrier: meet them there anyway
            out.update(passed=False, error="%s: %s" % (type(e).__name__, str(e)[:300]))
    else:
        out["skipped"] = ("measured by local rank 0" if n >= 2 else
                          "one GPU in this host's world" if pg.LOCAL_WORLD < 2 else
                          "torch sees fewer GPUs than this host's ranks")
    if pg.WORLD > 1:
        pg.coll(dist.barrier)
    return out


def agg_p2p(ranks):
    per_rank = {str(r["rank"]): r["checks"].get("p2p") for r in ranks}
    hosts = {rk: c for rk, c in per_rank.items() if c and "pairs" in c}
    data = {"per_rank": per_rank, "judged_by": "controller (gpufleet.sku, GF544)",
            "method": METHOD}
    rates = [p["gbps"] for c in hosts.values() for p in c["pairs"] if p.get("gbps")]
    missing = sum(1 for c in hosts.values() for p in c["pairs"] if not p.get("gbps"))
    crashed = sorted(rk for rk, c in per_rank.items() if c and c.get("error") and
                     "pairs" not in c)
    if crashed:
        return False, "the copy matrix crashed on rank(s) %s: %s" % (
            ", ".join(crashed), per_rank[crashed[0]]["error"]), data
    if not hosts:
        return True, "no GPU<->GPU copies (one GPU per host)", data
    detail = "GPU<->GPU copy (CE read) over %d pair(s)" % len(rates)
    if rates:
        detail += ": min %.1f GB/s, median %.1f GB/s" % (min(rates), statistics.median(rates))
    if missing:
        detail += "; %d pair(s) not measured" % missing
    return True, detail + " (judged by the controller)", data
