"""GPUDirect RDMA (GF460, GF622-GF624) through the shipped probe and the real parsers.

GF460 cases are one short file each under tests/fixtures/gdr/: a simulated host profile (its
stand-in nvidia-smi and /proc/driver/nvidia/version replay real captures: tests/fleet/profiles),
the kernel release `uname -r` reports (a stand-in uname in PATH: this machine's release is not
the case's), the modules and peer-memory clients in sysfs (tests/harness/sysfs_ib.py write_gdr
names the layout's sources), RDMA ports (default one NDR port), and the findings expected
(rule -> a phrase of the message). The real probe.sh reads it all, the real rules judge it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.model import (
    Facts,
    HostResult,
    NcclConfig,
    NcclSetting,
    Report,
    SmokeCheck,
    SmokeResult,
)
from gpufleet.probes import parse_probe_output, probe_script
from gpufleet.rules import evaluate
from gpufleet.smoke.nccl_paths import parse_nccl_init
from harness.sysfs_ib import write_gdr, write_tree

REPO = Path(__file__).resolve().parents[2]
CASES = sorted((REPO / "tests/fixtures/gdr").glob("*.yaml"))
GDR_RULES = ("GF460", "GF622", "GF623", "GF624")


def _builder() -> Any:
    import importlib.util  # noqa: PLC0415

    spec = importlib.util.spec_from_file_location(
        "gpufleet_build_profiles", REPO / "tests/fleet/profiles/build_profiles.py")
    assert spec is not None and spec.loader is not None
    if spec.name not in sys.modules:
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod  # dataclasses look their module up there
        spec.loader.exec_module(mod)
    return sys.modules[spec.name]


def probe(tmp: Path, case: dict[str, Any]) -> Facts:
    builder = _builder()
    profile = Path(builder.ensure_built()) / case["profile"]
    proc = profile / "proc_driver_nvidia"
    if case.get("open_modules") is False:  # the profile's driver, the other flavor's line
        proc = tmp / "proc_driver_nvidia"
        proc.mkdir()
        (proc / "version").write_text(builder.proc_version(builder.DRIVER, False))
    bindir = tmp / "uname-bin"
    bindir.mkdir()
    # probe.sh asks `uname -r -m`: release and machine, one space apart (coreutils uname).
    (bindir / "uname").write_text(f"#!/bin/sh\necho '{case['kernel']} x86_64'\n")
    (bindir / "uname").chmod(0o755)
    ports = case.get("ports", {"mlx5_0/1": {}})
    env = {**os.environ, **write_tree(tmp, ports),
           **write_gdr(tmp, case.get("modules", {}), case.get("memory_peers", {})),
           "PATH": f"{bindir}:{profile / 'bin'}:{os.environ['PATH']}",
           "GPUFLEET_PROC_DRIVER_NVIDIA": str(proc),
           "GPUFLEET_SYS_PCI_DEVICES": str(tmp / "no-pci")}
    out = subprocess.run(["sh", "-s", "--", "tool_timeout=10"], input=probe_script(),
                         capture_output=True, text=True, env=env, timeout=120, check=False)
    return parse_probe_output(out.stdout, collected_at="2026-12-01T06:00:00Z")


def judge(hosts: dict[str, HostResult]) -> list[Any]:
    return [f for f in evaluate(Report(hosts=hosts)) if f.rule in GDR_RULES]


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_gdr_case(path: Path, tmp_path: Path) -> None:
    case = yaml.safe_load(path.read_text())
    assert case["source"], f"{path.name}: every simulated host says where its facts come from"
    facts = probe(tmp_path, case)
    assert facts.os.kernel == case["kernel"] and facts.gpus and facts.gdr is not None
    flavor = "proprietary" if case.get("open_modules") is False else "open"
    assert facts.driver.kernel_module_flavor == flavor
    found = judge({"gpu01": HostResult("gpu01", "ok", facts=facts)})
    assert {f.rule for f in found} == set(case["expect"]), [f.message for f in found]
    for f in found:
        assert case["expect"][f.rule] in f.message, f.message
        assert f.evidence["hcas"] == ["mlx5_0/1"] and "modprobe nvidia_peermem" in f.remediation


def test_the_probe_reads_modules_and_peer_clients(tmp_path: Path) -> None:
    case = {"profile": "h200x2", "kernel": "6.8.0-45-generic",
            "modules": {"nvidia_peermem": "580.159.04", "ib_core": "", "nv_peer_mem": "1.3-0"},
            "memory_peers": {"nv_mem": "580.159.04", "nv_mem_nc": "1.3-0"}}
    g = probe(tmp_path, case).gdr
    assert g is not None
    assert dict(g.modules) == {"ib_core": "", "nv_peer_mem": "1.3-0",
                               "nvidia_peermem": "580.159.04"}
    assert dict(g.memory_peers) == {"nv_mem": "580.159.04", "nv_mem_nc": "1.3-0"}


# ------------------------------------------------------------------- the gdr smoke check


def gdr_check(rows: list[dict[str, Any]]) -> SmokeCheck:
    # The shape agg_gdr returns (smoke/remote/gdr.py; tests/unit/test_smoke_gdr.py runs it).
    return SmokeCheck("gdr", passed=False, detail="...", data={"hcas": rows, "not_run": []})


def smoke_with(check: SmokeCheck) -> SmokeResult:
    return SmokeResult(status="fail", level="full", backend="nccl", world_size=8,
                       checks=(check,))


def test_a_slow_hca_is_gf622_and_a_failed_one_gf624_not_gf601() -> None:
    rows = [{"hca": "mlx5_0/1", "gpu": 0, "numa": 0, "rate_gbit": 400.0, "gbps": 391.5,
             "error": None, "host": "gpu01", "floor_gbit": 360.0, "basis": "published GDR "
             "floor for H200, at most 0.9 x the port"},
            {"hca": "mlx5_1/1", "gpu": 4, "numa": 1, "rate_gbit": 400.0, "gbps": 201.1,
             "error": None, "host": "gpu01", "floor_gbit": 360.0, "basis": "published GDR "
             "floor for H200, at most 0.9 x the port"},
            {"hca": "mlx5_2/1", "gpu": 4, "numa": 1, "rate_gbit": 400.0, "gbps": None,
             "error": "ib_write_bw exit 1: Couldn't connect to localhost:18517", "host": "gpu01",
             "floor_gbit": 360.0, "basis": "..."}]
    hosts = {"gpu01": HostResult("gpu01", "ok", facts=Facts(), smoke=smoke_with(gdr_check(rows)))}
    every = evaluate(Report(hosts=hosts))
    assert not [f for f in every if f.rule == "GF601"]
    (slow,) = [f for f in every if f.rule == "GF622"]
    assert slow.evidence["hca"] == "mlx5_1/1" and slow.evidence["gbps"] == 201.1
    assert "201.1 Gb/s, floor 360 Gb/s" in slow.message and "mlxlink -d mlx5_1" in slow.remediation
    (failed,) = [f for f in every if f.rule == "GF624"]
    assert failed.evidence["hca"] == "mlx5_2/1" and "Couldn't connect" in failed.message
    assert "ib_write_bw -d mlx5_2 --use_cuda=4" in failed.remediation


def test_a_gdr_check_that_measured_nothing_stays_gf601() -> None:
    crashed = SmokeCheck("gdr", passed=False, detail="gdr raised KeyError", data={})
    hosts = {"gpu01": HostResult("gpu01", "ok", facts=Facts(), smoke=smoke_with(crashed))}
    assert [f.rule for f in evaluate(Report(hosts=hosts)) if f.rule.startswith("GF6")] == [
        "GF601"]


# --------------------------------------------------------------- NET/IB without GPUDirect

# NCCL's channel lines (NVIDIA/nccl src/transport/net.cc sendSetup: "... via NET/%s/%d%s%s%s",
# "/GDRDMA" when GPUDirect is used): no IB capture exists here, so these are inferences.
PLAIN_IB = ["NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.1<0>", "Using network IB",
            "Channel 00/0 : 1[1] -> 2[0] [send] via NET/IB/0",
            "Channel 00/0 : 3[1] -> 0[0] [send] via NET/IB/0/GDRDMA"]


def multinode(tmp: Path, cases: dict[str, str], lines: list[str],
              conf: dict[str, NcclConfig] | None = None) -> list[Any]:
    rec = parse_nccl_init(lines)
    hosts = {}
    for name, case_file in cases.items():
        case = yaml.safe_load((REPO / "tests/fixtures/gdr" / case_file).read_text())
        (tmp / name).mkdir()
        facts = probe(tmp / name, case)
        if conf and name in conf:
            facts = Facts(**{**facts.__dict__, "nccl_config": conf[name]})
        smoke = SmokeResult(status="pass", level="quick", backend="nccl", world_size=4,
                            hosts=tuple(cases), transport=rec)
        hosts[name] = HostResult(name, "ok", facts=facts, smoke=smoke)
    return judge(hosts)


def test_ib_without_gdrdma_on_hosts_with_a_path_is_gf623(tmp_path: Path) -> None:
    found = multinode(tmp_path, {"a": "dmabuf-open-modules.yaml", "b": "mofed-peermem.yaml"},
                      PLAIN_IB)
    (f,) = found
    assert f.rule == "GF623" and f.severity == "error" and f.hosts == ("a", "b")
    assert f.evidence["connections"] == ["1->2 dev 0"] and "rank 1 -> 2" in f.message
    assert "NCCL_NET_GDR_LEVEL" in f.evidence["causes"][0]


def test_gf623_names_the_setting_that_turned_gdr_off(tmp_path: Path) -> None:
    conf = NcclConfig(effective=(NcclSetting("NCCL_DMABUF_ENABLE", "0", "/etc/nccl.conf"),))
    found = multinode(tmp_path, {"a": "dmabuf-open-modules.yaml", "b": "mofed-peermem.yaml"},
                      PLAIN_IB, {"a": conf})
    (f,) = [x for x in found if x.rule == "GF623"]
    assert f.evidence["causes"] == ["NCCL_DMABUF_ENABLE=0 in /etc/nccl.conf on a, whose only "
                                    "GPUDirect path is DMA-BUF"]
    assert "NCCL_DMABUF_ENABLE=0" in f.remediation


def test_a_host_without_a_path_is_gf460_not_gf623(tmp_path: Path) -> None:
    found = multinode(tmp_path, {"a": "dmabuf-open-modules.yaml", "b": "inert-peermem.yaml"},
                      PLAIN_IB)
    assert [(f.rule, f.hosts) for f in found] == [("GF460", ("b",))]


def test_every_ib_connection_with_gdrdma_is_silent(tmp_path: Path) -> None:
    lines = [x for x in PLAIN_IB if not x.endswith("NET/IB/0")]
    assert multinode(tmp_path, {"a": "dmabuf-open-modules.yaml", "b": "mofed-peermem.yaml"},
                     lines) == []
