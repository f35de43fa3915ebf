"""One busbw breach, one finding: the controller builds the package's arguments (runner,
smoke/command.py), the host-side package records the values (smoke/remote/world.py, busbw.py,
run here for real on rank records), the controller's rules judge them once
(GF501 the inventory floor, rules/perf.py; GF504 the links' expectation, rules/links.py).

The review's case (../shared/reviews/architecture-2026-12-02.md §2.8): 343.7 GB/s at 4 GiB
against a floor of 350 gave GF501 and a GF504 ("95 % of ..."), or GF501 and a GF601 without
an expectation. Measurements: REFERENCE.md's 2xH200 NV18 nccl-tests table (sku/bandwidth.py
MEASURED), the P2P-off point 26.8 GB/s at 64 MiB (REFERENCE.md, second day).
"""

from __future__ import annotations

from typing import Any

from test_rules_builders import NOW, facts, fleet

from gpufleet.model import Expectations, HostSpec, SmokeCheck
from gpufleet.probes.nccl import parse as parse_nccl
from gpufleet.rules import evaluate
from gpufleet.smoke import command, runner
from gpufleet.smoke.hostrun import HostRun, SmokeOptions
from gpufleet.smoke.remote import ddp, world
from gpufleet.transport.local import LocalTransport

MIB, GIB = 1 << 20, 1 << 30
H200X2 = {64 * MIB: 267.8, 256 * MIB: 298.3, 1 * GIB: 330.3, 4 * GIB: 343.7}


def _rank(rank: int) -> dict[str, Any]:
    info = {"rank": rank, "local_rank": rank, "host": "gpu02", "torch": "2.11.0+cu130",
            "cuda": "13.0", "cudnn": "9.19.0", "nccl": "2.28.9", "device": f"cuda:{rank}",
            "torch_device_count": 2, "smi_count": 2, "expect_gpus": None,
            "local_world_size": 2}
    return {"rank": rank, "info": info, "checks": {}, "bw": {}}


def _argv(*, expectation: bool, floor: float | None) -> list[str]:
    """The package's arguments as the controller builds them (runner, command.py) for gpu02."""
    spec = HostSpec(name="gpu02", address="10.0.0.2", expect=Expectations(min_busbw_gbps=floor))
    h = HostRun(spec, LocalTransport(spec), facts(), "gfsmoke-x", run_dir="/nonexistent",
                script="/nonexistent/pkg.zip")
    h.gpu_names, h.gpu_count = ("NVIDIA H200",) * 2, 2
    ref = runner._reference(h, 2) if expectation else None
    if expectation:
        assert ref is not None and h.expectation is not None
    return command._script_args(h, "{}", SmokeOptions(), ref, 60.0)[1:]


def _errors(measured: dict[int, float], *, expectation: bool, floor: float | None,
            nccl: str | None = None, world_of: tuple[str, ...] = ("gpu02",)) -> list[str]:
    """gpu02's error findings after the real host-side busbw check on `measured`."""
    argv = _argv(expectation=expectation, floor=floor)
    bw_world = {"world": {s: {"busbw_gbps": v} for s, v in measured.items()}, "method": "graph"}
    checks, busbw = world.aggregate([_rank(0), _rank(1)], bw_world, ddp.parse_args(argv))
    c = next(c for c in checks if c["name"] == "busbw")
    check = SmokeCheck(c["name"], c["passed"], c["detail"], c["data"])
    run = {"checks": (check,), "busbw_gbps": {int(k): v for k, v in busbw.items()},
           "hosts": world_of}
    hosts: dict[str, dict[str, Any]] = {n: {"smoke": run} for n in world_of}
    if nccl is not None:  # on gpu02 only, the last host of a world
        hosts["gpu02"]["facts"] = {"nccl_config": parse_nccl(nccl)}
    r = fleet(hosts, expectations={"min_busbw_gbps": floor})
    return sorted(f"{f.rule} {f.message}" for f in evaluate(r, now=NOW)
                  if "gpu02" in f.hosts and f.severity == "error")


def test_a_floor_breach_with_the_expectation_is_one_gf501() -> None:
    # 343.7 reaches 100 % of what the links should give: only the inventory floor is breached.
    assert _errors(H200X2, expectation=True, floor=350.0) == [
        "GF501 gpu02: busbw 343.7 GB/s at 4 GiB < floor 350 GB/s"]


def test_a_floor_breach_without_the_expectation_is_one_gf501() -> None:
    assert _errors(H200X2, expectation=False, floor=350.0) == [
        "GF501 gpu02: busbw 343.7 GB/s at 4 GiB < floor 350 GB/s"]


def test_an_expectation_breach_is_one_gf504() -> None:
    # P2P off: 26.8 GB/s at 64 MiB is 10 % of 267.8 (the fraction is 0.8).
    errors = _errors({64 * MIB: 26.8}, expectation=True, floor=None)
    assert [e.split()[0] for e in errors] == ["GF504"], errors
    assert "26.8 GB/s at 64 MiB is 10% of the 267.8 GB/s its links should give" in errors[0]


def test_healthy_values_give_no_error() -> None:
    assert _errors(H200X2, expectation=True, floor=300.0) == []


def test_the_expectation_breach_names_the_nccl_setting_from_the_facts() -> None:
    # The probe's nccl section as tests/unit/test_rules.py's GF701 case prints it.
    errors = _errors({64 * MIB: 26.8}, expectation=True, floor=None,
                     nccl="@@file /etc/nccl.conf\nNCCL_P2P_DISABLE=1\n@@home /root\n@@env\n")
    assert [e.split()[0] for e in errors] == ["GF504"], errors
    assert "likely cause: NCCL_P2P_DISABLE=1 in /etc/nccl.conf on gpu02" in errors[0]


def test_a_world_names_the_setting_of_any_of_its_hosts() -> None:
    # A two-host world whose second host has P2P off in its config: GF504 names it (the world's
    # verdict once named only settings the host-side run saw; the rule read only the first host).
    errors = _errors({64 * MIB: 26.8}, expectation=True, floor=None, world_of=("gpu01", "gpu02"),
                     nccl="@@file /etc/nccl.conf\nNCCL_P2P_DISABLE=1\n@@home /root\n@@env\n")
    assert [e.split()[:2] for e in errors] == [["GF504", "gpu01+gpu02:"]], errors
    assert "likely cause: NCCL_P2P_DISABLE=1 in /etc/nccl.conf on gpu02" in errors[0]
