"""The copy matrix's measurement on a real GPU (device machine only: `pytest -m gpu tests/gpu`).

Only one GPU is lent, so the pair copy runs cuda:0 -> cuda:0: the same driver call on the same
copy engine path as a peer read (cuMemcpyDtoDAsync on the reading GPU's stream), which on one
device is a device-local copy. Its bytes must then be counted as the membw check counts its
own device-local copy (once, as nvbandwidth's device_local_copy: 2080.9 GB/s on an H200), so
the two agree; counting read + write would double it. Hosts of 2+ GPUs also run the matrix.
"""

from __future__ import annotations

import time

import pytest

from gpufleet.smoke.remote import membw, p2p
from gpufleet.smoke.remote import progress as pg
from gpufleet.smoke.remote.checks import Ctx

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu
TOLERANCE = 0.10  # same path, different buffer (512 MiB vs 1 GiB) and repeats


def test_the_pair_copy_counts_bytes_as_the_hbm_measurement_on_one_gpu() -> None:
    assert torch.cuda.is_available(), "the gpu tests need CUDA"
    dev = torch.device("cuda", 0)
    src = torch.ones(p2p.BYTES, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    got = p2p.read_copy(torch, p2p.driver(), dst, src)
    assert torch.equal(dst[:4096], src[:4096]) and bool(dst[-1] == 1), "the copy moved bytes"
    del src, dst
    hbm = membw.rank_membw(Ctx(torch, None, dev, True, True, None, {}))
    ratio = got["gbps"] / hbm["gbps"]
    print(f"pair copy cuda:0->cuda:0 {got['gbps']:.1f} GB/s (samples {got['samples_gbps']}), "
          f"membw {hbm['gbps']:.1f} GB/s, ratio {ratio:.3f}")
    assert abs(ratio - 1) <= TOLERANCE, (got, hbm["gbps"])
    assert len(got["samples_gbps"]) == p2p.SAMPLES


def test_one_gpu_costs_nothing_and_several_measure_every_ordered_pair() -> None:
    n = torch.cuda.device_count()
    c = Ctx(torch, None, torch.device("cuda", 0), True, True, None, {})
    t = time.perf_counter()
    rec = p2p.rank_p2p(c) if pg.WORLD == 1 and pg.LOCAL_WORLD == 1 else None
    took = time.perf_counter() - t
    assert rec is not None and rec["skipped"] == "one GPU in this host's world", rec
    assert took < 0.05, f"a one-GPU world must not wait or copy: {took:.3f} s"
    if n >= 2:
        m = p2p.matrix(torch, list(range(n)))
        assert "error" not in m, m
        assert {(p["src"], p["dst"]) for p in m["pairs"]} == {
            (a, b) for a in range(n) for b in range(n) if a != b}
        assert all(p.get("gbps", 0) > 0 for p in m["pairs"]), m["pairs"]
        print(f"{n} GPUs: {len(m['pairs'])} pairs in {m['seconds']:.1f} s, min "
              f"{min(p['gbps'] for p in m['pairs']):.1f} GB/s")
