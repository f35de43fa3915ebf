"""Builders for rule and report tests: a healthy fleet shaped like the real 2xH200 capture.

The numbers (driver 580.159.04, CUDA 13.0, NV18, 18 links at 26.562 GB/s, VBIOS 96.00.A5.00.1A,
busbw 343.7 GB/s at 4 GiB, NCCL 2.28.9, torch 2.11.0+cu130) come from
tests/fixtures/h200x2-2026-11-30 and REFERENCE.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

from gpufleet.model import (
    DockerInfo,
    DriverInfo,
    Expectations,
    FabricInfo,
    Facts,
    Gpu,
    GpuNvLinks,
    HostResult,
    HostSpec,
    ImageInfo,
    NvLink,
    OsInfo,
    RankInfo,
    Report,
    SmokeCheck,
    SmokeResult,
    Topology,
)

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
DIGEST = "sha256:" + "ab" * 32
IMAGE = "registry.example/nvidia/pytorch:25.10-py3-cuda13.0"
HOSTS = ("gpu01", "gpu02", "gpu03", "gpu04")
BUSBW = {1 << 20: 66.6, 64 << 20: 267.8, 1 << 30: 330.3, 4 << 30: 343.7}


def gpu(index: int, **kw: Any) -> Gpu:
    base = Gpu(
        index=index, name="NVIDIA H200", uuid=f"GPU-{index:08d}-0000-0000-0000-000000000000",
        bus_id=f"00000000:00:0{6 + index}.0", serial=f"16539241705{index}", memory_total_mib=143771,
        vbios="96.00.A5.00.1A", persistence_mode=True, mig_mode="Disabled", ecc_mode="Enabled",
        ecc_uncorrected_volatile=0, ecc_uncorrected_aggregate=0, retired_pages_pending=None,
        remapped_rows_pending=False, remapped_rows_failed=False, pcie_gen_current=5,
        pcie_gen_max=5, pcie_width_current=16, pcie_width_max=16, compute_cap="9.0",
        throttle_reasons=("gpu_idle",), throttle_mask="0x0000000000000001",
    )
    return dataclasses.replace(base, **kw)


def facts(**kw: Any) -> Facts:
    base = Facts(
        collected_at="2026-11-30T11:59:00Z",
        os=OsInfo(id="ubuntu", version_id="24.04", pretty_name="Ubuntu 24.04.3 LTS",
                  kernel="6.8.0-88-generic", arch="x86_64"),
        driver=DriverInfo(version="580.159.04", kernel_module_version="580.159.04",
                          kernel_module_flavor="open", cuda_version="13.0"),
        gpus=(gpu(0), gpu(1)),
        topology=Topology(
            devices=("GPU0", "GPU1"),
            links={"GPU0": {"GPU0": "X", "GPU1": "NV18"}, "GPU1": {"GPU0": "NV18", "GPU1": "X"}},
            cpu_affinity={"GPU0": "0-31", "GPU1": "0-31"}, numa_affinity={"GPU0": "0", "GPU1": "0"},
        ),
        nvlink=tuple(
            GpuNvLinks(i, tuple(NvLink(k, True, 26.562) for k in range(18))) for i in range(2)
        ),
        fabric=FabricInfo(gpu_states={0: "Completed", 1: "Completed"},
                          gpu_status={0: "Success", 1: "Success"}, manager_running=None),
        toolkit_version="1.19.1",
        docker=DockerInfo(server_version="28.5.1", runtimes=("nvidia", "runc"),
                          default_runtime="runc"),
        image=ImageInfo(ref=IMAGE, digests=(f"registry.example/nvidia/pytorch@{DIGEST}",)),
        nccl_system_version="2.28.9",
        probe_duration_s=1.2,
    )
    return dataclasses.replace(base, **kw)


def smoke(host: str, **kw: Any) -> SmokeResult:
    base = SmokeResult(
        status="pass", level="quick", backend="nccl", world_size=2, device_count=2,
        ranks=tuple(RankInfo(rank=r, host=host, local_rank=r, torch="2.11.0+cu130", cuda="13.0",
                             cudnn="91900", nccl="2.28.9", device=f"cuda:{r}",
                             device_name="NVIDIA H200") for r in range(2)),
        checks=tuple(SmokeCheck(n, True) for n in
                     ("versions", "device_count", "matmul", "allreduce_exact", "ddp", "amp",
                      "busbw")),
        busbw_gbps=dict(BUSBW), matmul_tflops={0: 702.0, 1: 698.0},
        timings_s={"init": 1.1, "total": 18.0}, hosts=(host,),
    )
    return dataclasses.replace(base, **kw)


def expect(**kw: Any) -> Expectations:
    return Expectations(**{
        "driver_version": "580.159.04", "toolkit_version": "1.19.1", "pytorch_image": IMAGE,
        "pytorch_image_digest": DIGEST, "gpu_count": 2, "container_engine": "docker",
        "kernel_modules": "open", "min_busbw_gbps": 300.0, **kw})


HostMut = Callable[[HostResult], HostResult]


def fleet(
    changes: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    hosts: tuple[str, ...] = HOSTS,
    expectations: Mapping[str, Any] | None = None,
    with_expect: bool = True,
    groups: tuple[str, ...] = ("gpu",),
    smoke_on: bool = True,
) -> Report:
    """A healthy fleet; `changes[host]` may hold "facts" / "smoke" / "status" / "error" /
    "expect" replacements (dicts of fields, or whole objects)."""
    changes = changes or {}
    results: dict[str, HostResult] = {}
    specs: dict[str, HostSpec] = {}
    for name in hosts:
        ch = dict(changes.get(name, {}))
        f = ch.pop("facts", {})
        s = ch.pop("smoke", {})
        e = ch.pop("expect", {})
        host_facts = f if isinstance(f, Facts) or f is None else facts(**f)
        host_smoke = s if isinstance(s, SmokeResult) or s is None else (
            smoke(name, **s) if smoke_on else None)
        results[name] = HostResult(name=name, status=ch.pop("status", "ok"),
                                   error=ch.pop("error", None), facts=host_facts,
                                   smoke=host_smoke, duration_s=20.0)
        exp = expect(**{**(expectations or {}), **e}) if with_expect else Expectations(**e)
        specs[name] = HostSpec(name=name, address=f"10.0.0.{len(specs) + 1}",
                               groups=ch.pop("groups", groups), expect=exp)
        assert not ch, f"unknown change keys {ch}"
    return Report(hosts=results, specs=specs, generated_at="2026-11-30T12:00:00Z", level="quick")


def test_builders_are_healthy_and_distinct() -> None:
    r = fleet()
    assert set(r.hosts) == set(HOSTS)
    assert all(h.facts is not None and h.facts.gpu_count == 2 for h in r.hosts.values())
