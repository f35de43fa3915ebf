"""The host-side package's pure parts: version formats, the bandwidth verdict, the world
aggregation (smoke/remote/: versions.py, busbw.py, world.py).

The package runs on hosts under torchrun; these tests import its modules (torch is imported
only inside ddp.main), and the real runs are in test_smoke_runner.py and tests/fleet.
"""

from __future__ import annotations

import ast
from pathlib import Path

from gpufleet.smoke.remote import busbw, ddp, versions, world

MIB = 1 << 20
REF = {1 * MIB: 66.6, 64 * MIB: 267.8, 256 * MIB: 298.3}


def test_package_imports_only_stdlib_torch_and_itself() -> None:
    """Every module shipped to the host: the stdlib, torch, and its siblings (relative)."""
    import sys  # noqa: PLC0415

    for path in Path(ddp.__file__).parent.glob("*.py"):
        roots = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                roots |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                roots.add(node.module.split(".")[0])
        assert roots - set(sys.stdlib_module_names) - {"__future__"} <= {"torch"}, path.name


def test_nccl_and_cudnn_version_codes() -> None:
    assert versions.fmt_nccl((2, 28, 9)) == "2.28.9"
    assert versions.fmt_nccl(22809) == "2.28.9"  # NCCL >= 2.9: major*10000 + minor*100 + patch
    assert versions.fmt_nccl(2708) == "2.7.8"  # before: major*1000 + minor*100 + patch
    assert versions.fmt_cudnn(91900) == "9.19.0"
    assert versions.fmt_cudnn(8902) == "8.9.2"
    assert versions.fmt_cudnn(None) is None


def _bw(**gbps: float) -> dict[int, dict[str, float]]:
    sizes = {"m1": 1 * MIB, "m64": 64 * MIB, "m256": 256 * MIB}
    return {sizes[k]: {"busbw_gbps": v} for k, v in gbps.items()}


def test_busbw_records_the_share_of_the_reference() -> None:
    ok, detail, data = busbw.busbw_verdict(_bw(m1=59.2, m64=261.6, m256=292.6), REF)
    assert ok, detail
    assert data["basis"] == "reference"
    assert round(data["sizes"][str(64 * MIB)]["pct_of_reference"], 1) == 97.7


def test_busbw_without_p2p_is_recorded_not_judged_on_the_host() -> None:
    # The NCCL_P2P_DISABLE=1 run on the 2xH200 machine (benchmarks/results): 10 % of the
    # reference. The host records it; the controller's GF504 judges it (test_busbw_one_judge).
    ok, detail, data = busbw.busbw_verdict(_bw(m1=15.8, m64=26.7, m256=27.2), REF)
    assert ok and detail == "1 MiB 15.8 GB/s, 64 MiB 26.7 GB/s, 256 MiB 27.2 GB/s"
    assert round(data["sizes"][str(64 * MIB)]["pct_of_reference"]) == 10
    ok, detail, data = busbw.busbw_verdict(_bw(m1=50.0, m256=290.0), None)
    assert ok and data["basis"] is None and "reference_gbps" not in data["sizes"][str(256 * MIB)]


def _rank(rank: int, *, torch_count: int = 2, smi: int | None = 2, nccl: str = "2.28.9",
          local_world: int = 2) -> dict:
    info = {"rank": rank, "local_rank": rank, "host": "h", "torch": "2.11.0+cu130",
            "cuda": "13.0", "cudnn": "9.19.0", "nccl": nccl, "device": f"cuda:{rank}",
            "torch_device_count": torch_count, "smi_count": smi, "expect_gpus": None,
            "local_world_size": local_world}
    checks = {"matmul": {"passed": True, "n": 8192, "dtype": "bfloat16", "tflops": 800.0},
              "allreduce_exact": {"passed": True}, "ddp": {"passed": True, "steps": 5,
                                                           "params": 10}}
    return {"rank": rank, "info": info, "checks": checks, "bw": {}}


def _checks(ranks: list[dict]) -> dict[str, dict]:
    checks, _ = world.aggregate(ranks, None, ddp.parse_args(["--run-dir", "/nonexistent"]))
    return {c["name"]: c for c in checks}


def test_world_of_one_says_no_bandwidth_was_measured() -> None:
    c = _checks([_rank(0, torch_count=1, smi=1, local_world=1)])
    assert c["busbw"]["passed"] and c["busbw"]["data"]["measured"] is False
    assert "no bandwidth measured: world size 1" in c["busbw"]["detail"]
    assert all(v["passed"] for v in c.values())


def test_device_count_fails_when_torch_sees_fewer_gpus_than_nvidia_smi() -> None:
    # CUDA_VISIBLE_DEVICES=0 on the 2-GPU machine: torch 1, nvidia-smi 2, two ranks.
    c = _checks([_rank(0, torch_count=1), _rank(1, torch_count=1)])
    assert not c["device_count"]["passed"]
    assert "h: torch sees 1 GPU(s), nvidia-smi lists 2" in c["device_count"]["detail"]
    assert "h: 2 ranks but only 1 GPU(s) visible to torch" in c["device_count"]["detail"]


def test_unreadable_nvidia_smi_fails_the_device_count() -> None:
    c = _checks([_rank(0, smi=None), _rank(1, smi=None)])
    assert "h: nvidia-smi could not be read" in c["device_count"]["detail"]


def test_ranks_with_different_nccl_fail_versions() -> None:
    c = _checks([_rank(0), _rank(1, nccl="2.27.3")])
    assert not c["versions"]["passed"]
    assert c["versions"]["detail"] == "ranks disagree on nccl (2.27.3 vs 2.28.9)"


def test_a_failed_rank_is_named() -> None:
    bad = _rank(1)
    bad["checks"]["ddp"] = {"passed": False, "identical_to_rank0": False}
    c = _checks([_rank(0), bad])
    assert not c["ddp"]["passed"]
    assert c["ddp"]["detail"].startswith("failed on rank(s) 1: ")


def test_host_side_thresholds_equal_their_controller_homes() -> None:
    """The package shipped to hosts imports only the stdlib, so a few numbers live twice; they
    must not drift (issue 36.1: one home per threshold; the controller's copy is the source)."""
    from gpufleet import sku  # noqa: PLC0415
    from gpufleet.sku import bandwidth  # noqa: PLC0415
    from gpufleet.smoke.remote import deep_verdict  # noqa: PLC0415

    cat = sku.load()
    assert dict(bandwidth.PCIE_LANE_GBPS) == deep_verdict.PCIE_LANE_GBPS
    assert cat.efficiency["hopper"]["pinned_gbps"].value == deep_verdict.PINNED_CALIBRATION
    assert cat.floors["pinned"].value == deep_verdict.PINNED_FLOOR
