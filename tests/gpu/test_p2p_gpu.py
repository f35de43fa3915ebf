"""The copy matrix's measurement on a real GPU (device machine only: `pytest -m gpu tests/gpu`).

Only one GPU is lent, so the pair copy runs cuda:0 -> cuda:0: the same driver call on the same
copy engine path as a peer read (cuMemcpyDtoDAsync on the reading GPU's stream), which on one
device is a device-local copy. Its bytes must then be counted as the membw check counts its
own device-local copy (once, as nvbandwidth's device_local_copy: 2080.9 GB/s on an H200), so
the two agree; counting read + write would double it. Hosts of 2+ GPUs also run the matrix.

Each measurement runs in a python of its own: a CUDA context in the pytest process would make
it a GPU compute process, and test_smoke_gpu.py (same session, after this module) would then
find the GPU busy and refuse, as the smoke test must on a host where something else computes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.gpu
TOLERANCE = 0.10  # same path, different buffer (512 MiB vs 1 GiB) and repeats

PAIR_COPY = """
import json, torch
from gpufleet.smoke.remote import membw, p2p
from gpufleet.smoke.remote.checks import Ctx
assert torch.cuda.is_available(), "the gpu tests need CUDA"
dev = torch.device("cuda", 0)
src = torch.ones(p2p.BYTES, dtype=torch.uint8, device=dev)
dst = torch.empty_like(src)
got = p2p.read_copy(torch, p2p.driver(), dst, src)
moved = torch.equal(dst[:4096], src[:4096]) and bool(dst[-1] == 1)
del src, dst
hbm = membw.rank_membw(Ctx(torch, None, dev, True, True, None, {}))
print(json.dumps({"got": got, "hbm_gbps": hbm["gbps"], "moved": moved, "samples": p2p.SAMPLES}))
"""

ONE_GPU_AND_MATRIX = """
import json, time, torch
from gpufleet.smoke.remote import p2p
from gpufleet.smoke.remote import progress as pg
from gpufleet.smoke.remote.checks import Ctx
n = torch.cuda.device_count()
c = Ctx(torch, None, torch.device("cuda", 0), True, True, None, {})
t = time.perf_counter()
rec = p2p.rank_p2p(c) if pg.WORLD == 1 and pg.LOCAL_WORLD == 1 else None
took = time.perf_counter() - t
m = p2p.matrix(torch, list(range(n))) if n >= 2 else None
print(json.dumps({"n": n, "rec": rec, "took": took, "matrix": m}))
"""


def _run(script: str) -> dict[str, Any]:
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    out: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    return out


def test_the_pair_copy_counts_bytes_as_the_hbm_measurement_on_one_gpu() -> None:
    r = _run(PAIR_COPY)
    got, hbm = r["got"], r["hbm_gbps"]
    assert r["moved"], "the copy moved bytes"
    ratio = got["gbps"] / hbm
    print(f"pair copy cuda:0->cuda:0 {got['gbps']:.1f} GB/s (samples {got['samples_gbps']}), "
          f"membw {hbm:.1f} GB/s, ratio {ratio:.3f}")
    assert abs(ratio - 1) <= TOLERANCE, (got, hbm)
    assert len(got["samples_gbps"]) == r["samples"]


def test_one_gpu_costs_nothing_and_several_measure_every_ordered_pair() -> None:
    r = _run(ONE_GPU_AND_MATRIX)
    rec, n, m = r["rec"], r["n"], r["matrix"]
    assert rec is not None and rec["skipped"] == "one GPU in this host's world", rec
    assert r["took"] < 0.05, f"a one-GPU world must not wait or copy: {r['took']:.3f} s"
    if n >= 2:
        assert "error" not in m, m
        assert {(p["src"], p["dst"]) for p in m["pairs"]} == {
            (a, b) for a in range(n) for b in range(n) if a != b}
        assert all(p.get("gbps", 0) > 0 for p in m["pairs"]), m["pairs"]
        print(f"{n} GPUs: {len(m['pairs'])} pairs in {m['seconds']:.1f} s, min "
              f"{min(p['gbps'] for p in m['pairs']):.1f} GB/s")
