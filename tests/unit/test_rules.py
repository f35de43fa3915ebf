"""Every rule fires on its fault and stays silent on the healthy fleet."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

import pytest
from test_rules_builders import BUSBW, DIGEST, NOW, facts, fleet, gpu, smoke

from gpufleet.model import (
    SEVERITY_ORDER,
    ContainerInfo,
    DockerInfo,
    DriverInfo,
    FabricInfo,
    GdrSupport,
    GpuNvLinks,
    GpuRecovery,
    IbLink,
    IbPort,
    ImageInfo,
    KernelsInfo,
    NcclConnection,
    NvLink,
    OsInfo,
    PciFunction,
    RankInfo,
    Report,
    SmokeCheck,
    SmokeResult,
    TempDir,
    TransportRecord,
    XidEvent,
)
from gpufleet.probes.gpus import THROTTLE_BITS, decode_throttle_mask
from gpufleet.rules import RULES, evaluate, reference
from gpufleet.rules.escalation import RULES as ESCALATION_RULES
from gpufleet.rules.fabric_delta import RULES as DELTA_RULES
from gpufleet.rules.history import RULES as DRIFT_RULES
from gpufleet.rules.lkg import RULES as LKG_RULES
from gpufleet.rules.one_cause import RULES as FOLD_RULES
from gpufleet.rules.slurm import RULES as SLURM_RULES

HISTORY_RULES = DRIFT_RULES + LKG_RULES  # judged against the run store (--save DIR)

DRV_OTHER = DriverInfo(version="580.95.05", kernel_module_version="580.95.05",
                       kernel_module_flavor="open", cuda_version="13.0")


def _driver(version: str, cuda: str = "13.0", kmod: str | None = None) -> DriverInfo:
    return DriverInfo(version=version, kernel_module_version=kmod or version,
                      kernel_module_flavor="open", cuda_version=cuda)


def _down(state: str) -> dict[str, object]:
    return {"status": state, "error": f"simulated {state}", "facts": None, "smoke": None}


def _multinode(n1: str, n2: str) -> SmokeResult:
    ranks = (RankInfo(0, "gpu01", 0, "2.11.0+cu130", "13.0", None, n1),
             RankInfo(1, "gpu02", 0, "2.11.0+cu130", "13.0", None, n2))
    return SmokeResult(status="pass", backend="nccl", world_size=2, ranks=ranks,
                       checks=(SmokeCheck("allreduce_exact", True),), hosts=("gpu01", "gpu02"))


def _deep(check: str, kind: str) -> Report:
    problem = {"kind": kind, "rank": 1, "host": "gpu02", "message": f"simulated {kind}",
               "fix": "the fix the script chose"}
    return fleet({"gpu02": {"smoke": {"status": "fail", "checks": (
        SmokeCheck(check, False, f"simulated {kind}", {"problems": [problem]}),)}}})
def _ws(name: str, **kw: object) -> ContainerInfo:
    base = ContainerInfo(id=name * 64, name=f"gpufleet-ws-{name}", image_digest=DIGEST,
                         image=f"registry.example/nvidia/pytorch@{DIGEST}", workspace=name,
                         user="alice", uid=1000, memory_bytes=1 << 34, jupyter_status=403,
                         jupyter_uids=(1000,), ssh_password_auth=False)  # fmt: skip
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


# rule -> (report where it fires, host it must name)
# /tmp on a host full to the last byte (the fleet's full1: a 64 KiB tmpfs), the probe in /dev/shm
FULL_TMP = TempDir(path="/tmp", free_bytes=0, writable=False, fallback="/dev/shm")

CASES: dict[str, tuple[Callable[[], Report], str]] = {
    "GF001": (lambda: fleet({"gpu02": _down("unreachable")}), "gpu02"),
    "GF002": (lambda: fleet({"gpu02": _down("auth_failed")}), "gpu02"),
    "GF003": (lambda: fleet({"gpu02": _down("hostkey_mismatch")}), "gpu02"),
    "GF008": (lambda: fleet({"gpu02": _down("hostkey_unknown")}), "gpu02"),
    "GF004": (lambda: fleet({"gpu02": _down("timeout")}), "gpu02"),
    "GF005": (lambda: fleet({"gpu02": {"status": "busy", "smoke": None}}), "gpu02"),
    "GF006": (lambda: fleet({"gpu02": _down("error")}), "gpu02"),
    "GF007": (lambda: fleet({"gpu02": {"facts": {"kernels": KernelsInfo(
        ("6.8.0-45-generic", "6.8.0-100-generic"), False)}}}), "gpu02"),
    "GF010": (lambda: fleet({"gpu02": {"facts": {"errors": {"docker": "docker: not found"}}}}),
              "gpu02"),
    "GF011": (lambda: fleet({"gpu02": {"facts": {"tmpdir": FULL_TMP}}}), "gpu02"),
    "GF101": (lambda: fleet({"gpu02": {"facts": {"driver": DRV_OTHER}}}), "gpu02"),
    "GF102": (lambda: fleet({"gpu02": {"facts": {"driver": _driver("570.195.03", "12.8")}}},
                            expectations={"driver_version": None, "driver_branch": "580"}),
              "gpu02"),
    "GF103": (lambda: fleet({"gpu02": {"facts": {"driver": dataclasses.replace(
        DRV_OTHER, version="580.159.04", kernel_module_version="580.159.04",
        kernel_module_flavor="proprietary")}}}), "gpu02"),
    "GF104": (lambda: fleet({"gpu02": {"facts": {"toolkit_version": "1.20.0"}}}), "gpu02"),
    "GF105": (lambda: fleet({"gpu02": {"facts": {"image": ImageInfo(
        ref="x", digests=("registry.example/nvidia/pytorch@sha256:" + "cd" * 32,))}}}), "gpu02"),
    "GF106": (lambda: fleet({"gpu02": {"facts": {"gpus": (gpu(0),)},
                                       "smoke": {"device_count": 1}}}), "gpu02"),
    "GF107": (lambda: fleet({"gpu02": {"facts": {"docker": None}}}), "gpu02"),
    "GF201": (lambda: fleet({"gpu02": {"facts": {"driver": DRV_OTHER}}}, with_expect=False),
              "gpu02"),
    "GF202": (lambda: fleet({"gpu02": {"facts": {"driver": _driver("580.159.04", "12.9")}}},
                            with_expect=False), "gpu02"),
    "GF203": (lambda: fleet({"gpu02": {"facts": {"os": OsInfo(kernel="6.8.0-90-generic")}}}),
              "gpu02"),
    "GF204": (lambda: fleet({"gpu02": {"facts": {"toolkit_version": "1.20.0"}}},
                            with_expect=False), "gpu02"),
    "GF205": (lambda: fleet({"gpu02": {"facts": {"docker": dataclasses.replace(
        facts().docker, server_version="27.5.1")}}}), "gpu02"),  # type: ignore[type-var]
    "GF206": (lambda: fleet({"gpu02": {"facts": {"image": ImageInfo(
        ref="x", digests=("r@sha256:" + "cd" * 32,))}}}, with_expect=False), "gpu02"),
    "GF207": (lambda: fleet({"gpu02": {"facts": {"nccl_system_version": "2.27.3"}}}), "gpu02"),
    "GF208": (lambda: fleet({"gpu02": {"facts": {"gpus": (gpu(0, vbios="96.00.99.00.01"),
                                                          gpu(1))}}}), "gpu02"),
    "GF209": (lambda: fleet({"gpu02": {"facts": {"gpus": (gpu(0),)},
                                       "smoke": {"device_count": 1}}}, with_expect=False),
              "gpu02"),
    "GF301": (lambda: fleet({"gpu02": {"facts": {"driver": _driver("570.195.03", "12.8")},
                                       "smoke": None}}), "gpu02"),
    "GF302": (lambda: fleet({"gpu02": {"facts": {"driver": _driver("535.274.02", "12.2")},
                                       "smoke": None}},
                            expectations={"pytorch_image": "pytorch:2.5-cu121"}), "gpu02"),
    "GF303": (lambda: fleet({"gpu02": {"facts": {"toolkit_version": "1.17.4"}}}), "gpu02"),
    "GF307": (lambda: fleet({"gpu02": {"facts": {"driver": _driver("580.126.09")}}}), "gpu02"),
    "GF308": (lambda: fleet({"gpu02": {"facts": {"docker": DockerInfo(
        server_version="28.2.2", runc_commit="v1.1.11-0-g4bccb38c")}}}), "gpu02"),
    "GF309": (lambda: fleet({"gpu02": {"facts": {"docker": DockerInfo(
        server_version="27.0.3", authz_plugins=("opa-docker-authz",))}}}), "gpu02"),
    "GF310": (lambda: fleet({"gpu02": {"facts": {"image": ImageInfo(
        ref="pytorch/pytorch:2.11.0-cuda13.0-cudnn9-runtime",
        env=("CUDA_VERSION=12.8.1",))}}}), "gpu02"),
    "GF304": (lambda: fleet({"gpu02": {"facts": {"driver": _driver(
        "580.159.04", kmod="580.95.05")}}}), "gpu02"),
    "GF305": (lambda: fleet({"gpu01": {"smoke": _multinode("2.28.9", "2.28.3")},
                             "gpu02": {"smoke": _multinode("2.28.9", "2.28.3")}},
                            hosts=("gpu01", "gpu02")), "gpu01"),
    "GF306": (lambda: fleet({"gpu02": {"facts": {"nccl_system_version": "2.27.3"}}}), "gpu02"),
    "GF401": (lambda: fleet({"gpu02": {"smoke": {"device_count": 1}}}), "gpu02"),
    "GF402": (lambda: fleet({"gpu02": {"facts": {"gpus": (
        gpu(0), gpu(1, ecc_uncorrected_volatile=4, ecc_uncorrected_aggregate=4))}}}), "gpu02"),
    "GF403": (lambda: fleet({"gpu02": {"facts": {"gpus": (
        gpu(0), gpu(1, remapped_rows_pending=True))}}}), "gpu02"),
    "GF404": (lambda: fleet({"gpu02": {"facts": {"gpus": (
        gpu(0), gpu(1, remapped_rows_failed=True))}}}), "gpu02"),
    "GF405": (lambda: fleet({"gpu02": {"facts": {"xid_events": (XidEvent(
        79, "[ 1234.5]", "0000:00:07.0", "GPU has fallen off the bus."),)}}}), "gpu02"),
    "GF420": (lambda: fleet({"gpu02": {"facts": {"gpu_recovery": (
        GpuRecovery("00000000:00:07.0", "gpu_reset", "Reset"),)}}}), "gpu02"),
    "GF421": (lambda: fleet({"gpu02": {"facts": {"pci_gpus": (
        PciFunction("0000:00:06.0", "0x030200"), PciFunction("0000:00:07.0", "0x030200"),
        PciFunction("0000:00:08.0", "0x030200"))}}}), "gpu02"),
    "GF406": (lambda: fleet({"gpu02": {"facts": {"xid_events": (XidEvent(
        13, "2026-11-30T11:00:00+00:00", "0000:00:07.0", "Graphics Exception"),)}}}), "gpu02"),
    "GF407": (lambda: fleet({"gpu02": {"facts": {"gpus": (
        gpu(0), gpu(1, pcie_width_current=8))}}}), "gpu02"),
    "GF408": (lambda: fleet({"gpu02": {"facts": {"nvlink": (GpuNvLinks(0, tuple(
        NvLink(k, k != 3, 26.562) for k in range(18))),)}}}), "gpu02"),
    "GF409": (lambda: fleet({"gpu02": {"facts": {"gpus": (
        gpu(0, persistence_mode=False), gpu(1))}}}), "gpu02"),
    "GF410": (lambda: fleet({"gpu02": {"facts": {"gpus": (
        gpu(0, mig_mode="Enabled"), gpu(1))}}}), "gpu02"),
    "GF414": (lambda: fleet({"gpu02": {"facts": {"gpus": (
        gpu(0), gpu(1, ecc_mode="Disabled"))}}}), "gpu02"),
    "GF411": (lambda: fleet({"gpu02": {"facts": {"gpus": (
        gpu(0, throttle_reasons=decode_throttle_mask("0x0000000000000048"),
            throttle_mask="0x0000000000000048"), gpu(1))}}}), "gpu02"),
    "GF412": (lambda: fleet({"gpu02": {"facts": {"fabric": FabricInfo(
        gpu_states={0: "In Progress", 1: "Completed"}, gpu_status={0: "N/A", 1: "Success"},
        manager_running=False, nvswitch_count=4)}}}), "gpu02"),
    "GF501": (lambda: fleet({"gpu02": {"smoke": {"busbw_gbps": {**BUSBW, 4 << 30: 250.0}}}}),
              "gpu02"),
    "GF502": (lambda: fleet({"gpu02": {"smoke": {"busbw_gbps": {**BUSBW, 4 << 30: 280.0}}}},
                            expectations={"min_busbw_gbps": None}), "gpu02"),
    "GF503": (lambda: fleet({"gpu02": {"smoke": {"matmul_tflops": {0: 480.0, 1: 699.0}}}}),
              "gpu02"),
    "GF601": (lambda: fleet({"gpu02": {"smoke": {"status": "fail", "checks": (
        SmokeCheck("ddp", False, "parameters differ on rank 1", {"max_abs_diff": 0.5}),)}}}),
              "gpu02"),
    "GF602": (lambda: fleet({"gpu02": {"smoke": {"status": "error", "checks": (),
                                                 "error": "ImportError: no torch"}}}), "gpu02"),
    "GF603": (lambda: fleet({"gpu02": {"smoke": {"status": "timeout", "hung_ranks": (1,)}}}),
              "gpu02"),
    # Deeper checks (smoke_deep.py): the script's problem kinds, one rule each.
    "GF530": (lambda: _deep("hostdev_bw", "gpu_slow"), "gpu02"),
    "GF531": (lambda: _deep("hostdev_bw", "host_bound"), "gpu02"),
    "GF532": (lambda: _deep("scaling", "low_scaling"), "gpu02"),
    "GF533": (lambda: _deep("scaling", "slow_rank"), "gpu02"),
    "GF534": (lambda: fleet({"gpu02": {"smoke": {"checks": (SmokeCheck(
        "readiness", True, "", {"tf32_matmul_default": False, "problems": []}),)}}}), "gpu02"),
    "GF604": (lambda: _deep("sdc", "sdc"), "gpu02"),
    "GF605": (lambda: _deep("readiness", "cudnn_unavailable"), "gpu02"),
    "GF606": (lambda: _deep("readiness", "compile_failed"), "gpu02"),
    "GF607": (lambda: _deep("readiness", "compile_mismatch"), "gpu02"),
    "GF608": (lambda: _deep("readiness", "compile_unavailable"), "gpu02"),
    "GF609": (lambda: _deep("readiness", "env_disables"), "gpu02"),
    **{rule: (lambda c=change, x=extra: fleet({"gpu02": {"facts": {"containers": (
        _ws("a", **c), *x)}}}, expectations={"workspaces": {"a": DIGEST}}), "gpu02")
       for rule, change, extra in (
           ("GF801", {"image_digest": "sha256:" + "0" * 64}, ()),
           ("GF802", {"gpus": ("0",)}, (_ws("b", gpus=("0",)),)),
           ("GF803", {"gpus": ("1",)}, (ContainerInfo(id="f" * 64, name="job", gpus=("1",)),)),
           ("GF804", {"jupyter_status": 200}, ()),
           ("GF805", {"ssh_password_auth": True}, ()),
           ("GF806", {"memory_bytes": 0}, ()),
           ("GF807", {"user": "root", "uid": 0}, ()),
           ("GF809", {"check_error": "check exited 126"}, ()),
           ("GF810", {"gpus": (), "gpu_env": "all", "runtime": "nvidia"}, ()),
       )},
    "GF808": (lambda: fleet({"gpu02": {"facts": {"containers": ()}}},
                            expectations={"workspaces": {"a": DIGEST}}), "gpu02"),
}



def _nccl(text: str) -> dict[str, object]:
    """Facts with the NCCL configuration the probe's nccl section would print."""
    from gpufleet.probes.nccl import parse  # noqa: PLC0415

    return {"facts": {"nccl_config": parse(text)}}


def _slow_link() -> dict[str, object]:
    links = tuple(NvLink(k, True, 13.281 if k == 5 else 26.562) for k in range(18))
    return {"facts": {"nvlink": (GpuNvLinks(0, tuple(NvLink(k, True, 26.562)
                                                      for k in range(18))),
                                 GpuNvLinks(1, links))}}


_BUSBW_LOW = SmokeCheck("busbw", False, "bus bandwidth too low", {
    "basis": "expectation", "largest": {"bytes": 64 << 20, "measured_gbps": 26.8,
                                        "expected_gbps": 267.8, "ratio": 0.1},
    "expectation": {"basis": "nvlink", "raw_gbps": 478.1}})
CASES.update({
    "GF413": (lambda: fleet({"gpu02": _slow_link()}), "gpu02"),
    "GF504": (lambda: fleet({"gpu02": {"smoke": {"status": "fail", "checks": (_BUSBW_LOW,)}}}),
              "gpu02"),
    "GF701": (lambda: fleet({"gpu02": _nccl("@@file /etc/nccl.conf\nNCCL_P2P_DISABLE=1\n"
                                            "@@home /root\n@@env\n")}), "gpu02"),
    "GF702": (lambda: fleet({"gpu02": _nccl("@@home /root\n@@env\nNCCL_IB_DISABLE=1\n")}),
              "gpu02"),
    "GF703": (lambda: fleet({"gpu02": _nccl("@@file /root/.nccl.conf\nNCCL_ALGO=Ring\n"
                                            "@@home /root\n@@env\n")}), "gpu02"),
    "GF704": (lambda: fleet({"gpu02": _nccl("@@absent /etc/nccl.conf\n@@absent /x.conf\n"
                                            "@@home /root\n@@env\nNCCL_CONF_FILE=/x.conf\n")}),
              "gpu02"),
})

# The fabric (rules/fabric.py); its counter deltas fire in tests/unit/test_fabric_rules.py.
_UP = IbLink("mlx5_0", "1", state="ACTIVE", phys_state="LinkUp", link_layer="InfiniBand")
_KEYS = {h: {"facts": {"ib_links": (dataclasses.replace(_UP, pkeys=("0x8001", "0xffff")),)}}
         for h in ("gpu01", "gpu03", "gpu04")}
_SOCKETS = TransportRecord("nccl init log", "Socket", (NcclConnection(1, 2, "NET/Socket", 1),))
CASES.update({
    "GF450": (lambda: fleet({"gpu02": {"facts": {"ib_links": (dataclasses.replace(
        _UP, state="DOWN", phys_state="Polling"),)}}}), "gpu02"),
    "GF451": (lambda: fleet({"gpu02": {"facts": {
        "ib_links": (_UP, dataclasses.replace(_UP, device="mlx5_1")),
        "ib_ports": (IbPort("mlx5_0", "1", "400 Gb/sec (4X NDR)", 400.0),
                     IbPort("mlx5_1", "1", "200 Gb/sec (4X HDR)", 200.0))}}}), "gpu02"),
    "GF452": (lambda: fleet({**_KEYS, "gpu02": {"facts": {"ib_links": (dataclasses.replace(
        _UP, pkeys=("0x8002", "0xffff")),)}}}), "gpu02"),
    "GF620": (lambda: fleet({h: {"facts": {"ib_links": (_UP,)},
                                 "smoke": {"hosts": ("gpu01", "gpu02"), "transport": _SOCKETS}}
                             for h in ("gpu01", "gpu02")}), "gpu02"),
    "GF621": (lambda: fleet({"gpu02": {"smoke": {"transport": TransportRecord(
        "nccl init log", None, (NcclConnection(0, 1, "SHM/direct/direct", 24),))}}}), "gpu02"),
})


# GPUDirect RDMA (rules/fabric_gdr.py); the probe-level cases are tests/unit/test_fabric_gdr.py.
_INBOX = GdrSupport(modules={"ib_core": ""})
_PEERMEM = GdrSupport(modules={"ib_core": "", "nvidia_peermem": "580.159.04"},
                      memory_peers={"nv_mem": "580.159.04"})
_GDR_ROW = {"hca": "mlx5_0/1", "gpu": 0, "numa": 0, "rate_gbit": 400.0, "host": "gpu02",
            "floor_gbit": 360.0, "basis": "published GDR floor for H200, at most 0.9 x the port"}
_PLAIN_IB = TransportRecord("nccl init log", "IB", (NcclConnection(1, 2, "NET/IB", 1, 0, False),))
CASES.update({
    "GF461": (lambda: fleet({"gpu02": {"facts": {"ib_links": (dataclasses.replace(
        _UP, ber="3E-7", raw_ber="4E-5"),)}}}), "gpu02"),
    "GF462": (lambda: fleet({"gpu02": {"facts": {"ib_links": (dataclasses.replace(
        _UP, ber="5E-11"),)}}}), "gpu02"),
    "GF460": (lambda: fleet({"gpu02": {"facts": {
        "ib_links": (_UP,), "gdr": _INBOX, "os": OsInfo(kernel="5.4.0-216-generic")}}}),
        "gpu02"),
    "GF622": (lambda: fleet({"gpu02": {"smoke": {"status": "fail", "checks": (SmokeCheck(
        "gdr", False, "", {"hcas": [{**_GDR_ROW, "gbps": 201.1, "error": None}]}),)}}}),
        "gpu02"),
    "GF623": (lambda: fleet({h: {"facts": {"ib_links": (_UP,), "gdr": _PEERMEM},
                                 "smoke": {"hosts": ("gpu01", "gpu02"), "transport": _PLAIN_IB}}
                             for h in ("gpu01", "gpu02")}), "gpu02"),
    "GF624": (lambda: fleet({"gpu02": {"smoke": {"status": "fail", "checks": (SmokeCheck(
        "gdr", False, "", {"hcas": [{**_GDR_ROW, "gbps": None,
                                     "error": "ib_write_bw did not finish in 32 s"}]}),)}}}),
        "gpu02"),
})


_UUID0 = "GPU-00000000-0000-0000-0000-000000000000"
_MEMBW_LOW = SmokeCheck("membw", True, "", {"per_rank": {"0": {
    "gbps": 900.0, "counted": "one side", "uuid": _UUID0}}})
_GEMM_COTENANT = SmokeCheck("gemm", True, "", {"per_rank": {"0": {
    "identity": {"uuid": _UUID0}, "tflops": {"bf16": 790.0},
    "sample": {"gpu": None, "apps": [{"gpu_uuid": _UUID0, "pid": "777", "process_name": "python3",
                                      "used_memory": "120000"}]}}}})
_P2P_SLOW = SmokeCheck("p2p", True, "", {"per_rank": {"0": {"devices": {}, "pairs": [
    {"src": 0, "dst": 1, "gbps": 120.0, "peer_access": True},
    {"src": 1, "dst": 0, "gbps": 400.0, "peer_access": True}]}}})  # tests/unit/test_p2p_matrix.py
# GF540-GF543: the SKU catalog (rules/perf.py; tests/unit/test_sku.py has the cause cases).
CASES.update({
    "GF540": (lambda: fleet({"gpu02": {"smoke": {"matmul_tflops": {0: 321.7, 1: 790.0}}}}),
              "gpu02"),
    "GF541": (lambda: fleet({"gpu02": {"smoke": {"checks": (_MEMBW_LOW,)}}}), "gpu02"),
    "GF542": (lambda: fleet({"gpu02": {"facts": {"gpus": (gpu(0, name="NVIDIA X9000"),)}}}),
              "gpu02"),
    "GF543": (lambda: fleet({"gpu02": {"smoke": {"checks": (_GEMM_COTENANT,)}}}), "gpu02"),
    "GF544": (lambda: fleet({"gpu02": {"smoke": {"checks": (_P2P_SLOW,)}}}), "gpu02"),
    "GF545": (lambda: fleet({"gpu02": {"facts": {"ib_ports": (
        IbPort("mlx5_0", "1", "400 Gb/sec (4X NDR)", 400.0),
        IbPort("mlx5_1", "1", "100 Gb/sec (4X EDR)", 100.0))}}}), "gpu02"),
    "GF415": (lambda: fleet({"gpu02": {"facts": {"gpus": (), "errors": {
        "nvidia_smi": "nvidia-smi hung (no answer in 10 s)"}}}}), "gpu02"),
})


def test_every_rule_has_a_firing_case() -> None:
    # History rules fire against saved runs: tests/unit/test_history.py, tests/unit/test_lkg.py.
    # GF9xx record what node-check did in Slurm (tests/unit/test_slurm_plan.py fires them).
    # GF43x escalate over the run store (tests/unit/test_escalation.py fires them); GF455-GF459
    # compare counters with the store's last run (tests/unit/test_fabric_rules.py). GF549 folds
    # findings in the judge's last step (tests/unit/test_one_cause.py).
    assert set(CASES) == (set(RULES) - set(HISTORY_RULES) - set(SLURM_RULES)
                          - set(ESCALATION_RULES) - set(DELTA_RULES) - set(FOLD_RULES))


@pytest.mark.parametrize("rule", sorted(set(RULES) - set(HISTORY_RULES) - set(SLURM_RULES)
                                         - set(ESCALATION_RULES) - set(DELTA_RULES)
                                         - set(FOLD_RULES)))
def test_rule_fires(rule: str) -> None:
    build, host = CASES[rule]
    found = [f for f in evaluate(build(), now=NOW) if f.rule == rule]
    assert found, f"{rule} did not fire"
    assert any(host in f.hosts for f in found), [f.hosts for f in found]
    for f in found:
        assert f.message and f.remediation and "?" not in re.sub(r"\?\)", "", f.remediation), f


@pytest.mark.parametrize("with_expect", [True, False])
@pytest.mark.parametrize("rule", sorted(RULES))
def test_rule_silent_on_healthy_fleet(rule: str, with_expect: bool) -> None:
    found = [f for f in evaluate(fleet(with_expect=with_expect), now=NOW) if f.rule == rule]
    assert found == []


def test_healthy_fleet_without_smoke_or_peers_is_silent() -> None:
    assert evaluate(fleet(hosts=("solo",), smoke_on=False), now=NOW) == ()
    assert evaluate(fleet(with_expect=False, smoke_on=False), now=NOW) == ()


def test_findings_sorted_worst_first_then_rule() -> None:
    r = fleet({"gpu02": {"facts": {"driver": _driver("580.159.04", kmod="580.95.05"),
                                   "nccl_system_version": "2.27.3",
                                   "gpus": (gpu(0, persistence_mode=False), gpu(1))}}})
    found = evaluate(r, now=NOW)
    keys = [(-SEVERITY_ORDER[f.severity], f.rule) for f in found]
    assert keys == sorted(keys)
    assert found[0].severity == "error" and found[-1].severity == "info"


def test_unreachable_host_only_gets_its_state_finding() -> None:
    found = evaluate(fleet({"gpu02": _down("unreachable")}), now=NOW)
    assert [(f.rule, f.hosts) for f in found] == [("GF001", ("gpu02",))]
    assert "10.0.0.2" in found[0].remediation


def test_remediation_names_playbook_and_version() -> None:
    (f,) = [f for f in evaluate(fleet({"gpu02": {"facts": {"driver": DRV_OTHER}}}), now=NOW)
            if f.rule == "GF101"]
    assert f.remediation == ("ansible-playbook -i INVENTORY gpufleet.gpu.upgrade_driver -l gpu02 "
                             "-e nvidia_driver_version=580.159.04")
    assert f.evidence["actual"] == "580.95.05"


def test_smoke_fail_without_failed_check_still_reported() -> None:
    r = fleet({"gpu02": {"smoke": {"status": "fail", "error": "rank 1 exited 1"}}})
    (f,) = [f for f in evaluate(r, now=NOW) if f.rule == "GF601"]
    assert "rank 1 exited 1" in f.message


def test_multinode_smoke_judged_once_for_all_its_hosts() -> None:
    bad = dataclasses.replace(_multinode("2.28.9", "2.28.9"), status="timeout", hung_ranks=(1,))
    r = fleet({"gpu01": {"smoke": bad}, "gpu02": {"smoke": bad}}, hosts=("gpu01", "gpu02"))
    found = [f for f in evaluate(r, now=NOW) if f.rule == "GF603"]
    assert [f.hosts for f in found] == [("gpu01", "gpu02")]


def test_healthy_h200_smoke_numbers_are_the_real_ones() -> None:
    # Guard against builders drifting from the capture they claim to mirror.
    s = smoke("x")
    assert s.busbw_gbps[4 << 30] == 343.7 and facts().driver.version == "580.159.04"


def test_the_throttle_reasons_judged_bad_are_names_the_probe_decodes() -> None:
    """One bit table (probes/gpus.py); GF411's policy may only name reasons it yields."""
    assert {name for _, name in THROTTLE_BITS} >= reference.THROTTLE_BAD


def test_gf011_names_the_path_and_free_space_and_a_roomy_tmp_is_silent() -> None:
    full = [f for f in evaluate(fleet({"gpu02": {"facts": {"tmpdir": FULL_TMP}}}), now=NOW)
            if f.rule == "GF011"]
    assert [f.message for f in full] == [
        "/tmp on gpu02: 0 B free, a file written there keeps no content (no space left on "
        "device); the probe went on in /dev/shm, the smoke test needs ~1 MiB there"]
    assert full[0].evidence["free_bytes"] == 0 and "df -h /tmp" in full[0].remediation
    roomy = TempDir(path="/tmp", free_bytes=1 << 30, writable=True)
    assert not [f for f in evaluate(fleet({"gpu02": {"facts": {"tmpdir": roomy}}}), now=NOW)
                if f.rule == "GF011"]


def test_an_unknown_host_key_is_not_told_to_remove_a_key() -> None:
    """Issue 37.3: GF008 (nothing listed) verifies and records; GF003 (changed) removes the old."""
    unknown = [f for f in evaluate(fleet({"gpu02": _down("hostkey_unknown")}), now=NOW)
               if f.rule in ("GF003", "GF008")]
    changed = [f for f in evaluate(fleet({"gpu02": _down("hostkey_mismatch")}), now=NOW)
               if f.rule in ("GF003", "GF008")]
    assert [f.rule for f in unknown] == ["GF008"] and [f.rule for f in changed] == ["GF003"]
    assert "--accept-new-host-keys" in unknown[0].remediation
    assert "ssh-keyscan" in unknown[0].remediation
    assert "ssh-keygen -R" not in unknown[0].remediation
    assert "ssh-keygen -R" in changed[0].remediation
