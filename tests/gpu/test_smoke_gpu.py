"""The smoke test on a real GPU machine (device machine only: `pytest -m gpu tests/gpu`).

Collects the machine's facts (gpufleet.probes.collect), then runs gpufleet.smoke.runner.run_smoke
over the local transport with the machine's python3, one rank per GPU. benchmarks/smoke_device.py
records the same runs with timings for results/.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from gpufleet.model import Expectations, HostSpec
from gpufleet.probes import collect
from gpufleet.smoke.runner import run_smoke
from gpufleet.transport.local import LocalTransport

pytestmark = pytest.mark.gpu


def _smi_count() -> int:
    assert shutil.which("nvidia-smi"), "the gpu tests need nvidia-smi"
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=True).stdout
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


@pytest.mark.parametrize("level", ["quick", "full"])
def test_smoke_passes_on_every_gpu(level: str) -> None:
    gpus = _smi_count()
    spec = HostSpec(name="local", address="localhost", connection="local",
                    expect=Expectations(smoke_python=sys.executable, gpu_count=gpus))
    facts = collect(LocalTransport(spec), spec)  # the runner judges with the host's facts
    assert len(facts.gpus) == gpus, facts.errors
    res = run_smoke(spec, LocalTransport(spec), facts, level=level, timeout=300)
    failed = [(c.name, c.detail) for c in res.checks if not c.passed]
    assert res.status == "pass", (res.error, failed, res.log_tail)
    assert res.backend == "nccl" and res.world_size == gpus == res.device_count
    assert all(r.nccl and r.cuda and r.device and r.device.startswith("cuda") for r in res.ranks)
    busbw = next(c for c in res.checks if c.name == "busbw")
    if gpus == 1:
        assert busbw.data["measured"] is False and "no bandwidth measured" in busbw.detail
    else:
        assert res.busbw_gbps and min(res.busbw_gbps.values()) > 0
    assert set(res.matmul_tflops) == set(range(gpus))
