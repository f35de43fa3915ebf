"""Rules on facts parsed from the real captures: the probe script runs against each host profile
(tests/fleet/profiles, built from tests/fixtures/h200x2-2026-11-30) and gpufleet's own parser reads
its output. Healthy hosts report nothing above info; each fault profile fires its rule.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from gpufleet.model import (
    SEVERITY_ORDER,
    Expectations,
    Facts,
    HostResult,
    HostSpec,
    RankInfo,
    Report,
    SmokeCheck,
    SmokeResult,
)
from gpufleet.probes.collect import parse_probe_output, probe_script
from gpufleet.report import Format, render
from gpufleet.rules import evaluate

REPO = Path(__file__).resolve().parents[2]
def _built() -> Path:
    import importlib.util  # noqa: PLC0415

    spec = importlib.util.spec_from_file_location(
        "gpufleet_build_profiles", REPO / "tests/fleet/profiles/build_profiles.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return Path(mod.ensure_built())


PROFILES = _built()  # built from tests/fleet/profiles/overlays
CAPTURE = REPO / "tests" / "fixtures" / "h200x2-2026-11-30"
IMAGE = "registry.example/nvidia/pytorch:25.10-py3"
# The desired state the healthy profiles match (tests/fleet/profiles/README.md).
DESIRED: dict[str, Any] = {
    "driver_version": "580.159.04", "toolkit_version": "1.19.1", "container_engine": "docker",
    "pytorch_image": IMAGE, "gpu_count": 2, "kernel_modules": "open",
    "pytorch_image_digest":
        "sha256:991fe96ed17cd3758bd498c26e7953ec34ed6ce4c97b4f5748acb365582d2f19",
}
EIGHT = ("h200x8", "fabric-incomplete", "gpu-missing", "xid79-lost")
GPU_PROFILES = ("h200x2", "h200x8", "driver-drift", "nvml-mismatch", "nvidia-smi-hang",
                "ecc-remap", "xid", "pcie-degraded", "nvlink-down", "persistence-off",
                "old-toolkit", "wrong-digest", "busy", "fabric-incomplete", "gpu-missing",
                "recovery-reset", "recovery-reboot", "xid79-lost", "xid13-burst", "xid-leaky")
NOW = datetime(2026, 11, 30, 12, tzinfo=timezone.utc)


def _probe(profile: str) -> Facts:
    p = PROFILES / profile
    env = {**os.environ, "PATH": f"{p / 'bin'}:{os.environ['PATH']}"}
    if (p / "proc_driver_nvidia").is_dir():
        env["GPUFLEET_PROC_DRIVER_NVIDIA"] = str(p / "proc_driver_nvidia")
    # The profile's PCI bus (absent: no sysfs), never this machine's.
    env["GPUFLEET_SYS_PCI_DEVICES"] = str(p / "sys_bus_pci_devices")
    env["GPUFLEET_BOOT_ID"] = str(p / "boot_id")
    # Short tool timeout only where the profile hangs on purpose; loaded CI needs slack elsewhere.
    wait = 1 if profile == "nvidia-smi-hang" else 10
    out = subprocess.run(["sh", "-s", "--", f"tool_timeout={wait}", f"image={IMAGE}"],
                         input=probe_script(), capture_output=True, text=True, env=env,
                         timeout=60, check=False)
    return parse_probe_output(out.stdout, collected_at="2026-11-30T11:59:00Z")


@pytest.fixture(scope="module")
def parsed() -> dict[str, Facts]:
    missing = [p for p in (*GPU_PROFILES, "no-nvidia-smi") if not (PROFILES / p).is_dir()]
    assert not missing, f"profiles missing: {missing}"
    names = (*GPU_PROFILES, "no-nvidia-smi")
    with ThreadPoolExecutor(4) as pool:
        return dict(zip(names, pool.map(_probe, names), strict=True))


def real_smoke(host: str) -> SmokeResult:
    """The real torchrun run of the capture (bench.txt rank 0, collect_env.txt versions)."""
    bench = (CAPTURE / "bench.txt").read_text()
    (line,) = [ln for ln in bench.splitlines() if ln.startswith('RESULT {"rank": 0')]
    res = json.loads(line.removeprefix("RESULT "))
    torch = re.search(r"PyTorch version: (\S+)", (CAPTURE / "collect_env.txt").read_text())
    assert torch is not None
    ranks = tuple(RankInfo(rank=r, host=host, local_rank=r, torch=torch.group(1), cuda="13.0",
                           nccl=res["nccl"], device=f"cuda:{r}", device_name="NVIDIA H200")
                  for r in range(res["world"]))
    return SmokeResult(
        status="pass", backend="nccl", world_size=res["world"], device_count=2, ranks=ranks,
        checks=(SmokeCheck("allreduce_exact", res["sum_ok"]),
                SmokeCheck("ddp", res["ddp_params_identical"])),
        busbw_gbps={s["bytes"]: s["busbw_GBps"] for s in res["sizes"]},
        timings_s={"init": res["init_s"], "total": res["total_s"]}, hosts=(host,))


def _report(hosts: dict[str, tuple[Facts, SmokeResult | None, Expectations, str]]) -> Report:
    return Report(
        hosts={n: HostResult(n, "ok", None, f, s) for n, (f, s, _e, _g) in hosts.items()},
        specs={n: HostSpec(n, n, groups=(g,), expect=e) for n, (_f, _s, e, g) in hosts.items()},
        generated_at="2026-11-30T12:00:00Z", level="quick")


def _above_info(report: Report) -> list[str]:
    return [f"{f.rule} {f.severity} {f.message}" for f in evaluate(report, now=NOW)
            if SEVERITY_ORDER[f.severity] > SEVERITY_ORDER["info"]]


def test_real_healthy_capture_single_host_no_inventory(parsed: dict[str, Facts]) -> None:
    # `gpufleet check` without -i on the captured machine: nothing set, no peers.
    r = _report({"vm": (parsed["h200x2"], real_smoke("vm"), Expectations(), "all")})
    assert _above_info(r) == []
    # The one info it has: system libnccl 2.28.3 vs the 2.28.9 torch loads.
    assert [f.rule for f in evaluate(r, now=NOW)] == ["GF306"]


@pytest.mark.parametrize("with_desired", [True, False])
def test_real_healthy_peers_nothing_above_info(parsed: dict[str, Facts],
                                               with_desired: bool) -> None:
    e = Expectations(**DESIRED, min_busbw_gbps=300.0) if with_desired else Expectations()
    e8 = Expectations(**{**DESIRED, "gpu_count": 8}) if with_desired else Expectations()
    hosts = {f"h200x2-{i}": (parsed["h200x2"], real_smoke(f"h200x2-{i}"), e, "gpu")
             for i in (1, 2, 3)}
    hosts["h200x8"] = (parsed["h200x8"], None, e8, "hgx")
    hosts["cpu-1"] = (parsed["no-nvidia-smi"], None, Expectations(), "cpu")
    hosts["cpu-2"] = (parsed["no-nvidia-smi"], None, Expectations(), "cpu")
    r = _report(hosts)
    assert _above_info(r) == []
    assert "gpufleet: HEALTHY" in render(r, Format.table)


# profile -> rules that must fire on it (with the desired state set / peers only)
FAULTS: dict[str, tuple[set[str], set[str]]] = {
    "driver-drift": ({"GF101"}, {"GF201", "GF202"}),
    "nvml-mismatch": ({"GF304", "GF106"}, {"GF304"}),
    "nvidia-smi-hang": ({"GF106", "GF010", "GF415"}, {"GF010", "GF415"}),
    "ecc-remap": ({"GF402", "GF403", "GF404"}, {"GF402", "GF403", "GF404"}),
    "xid": ({"GF405"}, {"GF405"}),
    "pcie-degraded": ({"GF407"}, {"GF407"}),
    "nvlink-down": ({"GF408"}, {"GF408"}),
    "persistence-off": ({"GF409"}, {"GF409"}),
    "old-toolkit": ({"GF104", "GF303"}, {"GF204", "GF303"}),
    "wrong-digest": ({"GF105"}, {"GF206"}),
    "fabric-incomplete": ({"GF412"}, {"GF412"}),
    "gpu-missing": ({"GF106"}, {"GF209"}),
    "recovery-reset": ({"GF405"}, {"GF405"}),
    "recovery-reboot": ({"GF405"}, {"GF405"}),
    "xid79-lost": ({"GF405", "GF421"}, {"GF405", "GF421"}),
    "xid-leaky": ({"GF405"}, {"GF405"}),
}


@pytest.mark.parametrize("with_desired", [True, False])
@pytest.mark.parametrize("profile", sorted(FAULTS))
def test_fault_profile_fires_its_rules(parsed: dict[str, Facts], profile: str,
                                       with_desired: bool) -> None:
    eight = profile in EIGHT
    healthy = parsed["h200x8" if eight else "h200x2"]
    desired = {**DESIRED, "gpu_count": 8 if eight else 2}
    e = Expectations(**desired) if with_desired else Expectations()
    hosts = {f"peer-{i}": (healthy, None, e, "gpu") for i in (1, 2, 3)}
    hosts["sick"] = (parsed[profile], None, e, "gpu")
    found = evaluate(_report(hosts), now=NOW)
    want = FAULTS[profile][0 if with_desired else 1]
    fired = {f.rule for f in found if "sick" in f.hosts}
    assert want <= fired, f"{profile}: wanted {sorted(want)}, fired {sorted(fired)}"
    assert all("sick" in f.hosts for f in found if f.severity != "info"), [
        (f.rule, f.hosts) for f in found]
    # A fault is never only an info.
    assert any(f.severity != "info" for f in found if "sick" in f.hosts)


def test_real_facts_report_validates_against_schema(parsed: dict[str, Facts]) -> None:
    schema = json.loads((REPO / "agent" / "gpufleet" / "schema" / "report-v1.json").read_text())
    r = _report({p: (f, real_smoke(p) if p == "h200x2" else None, Expectations(**DESIRED), "gpu")
                 for p, f in parsed.items()})
    gone = HostResult("gone", "unreachable", "no route")
    r = Report(hosts={**r.hosts, "gone": gone}, specs=r.specs, generated_at=r.generated_at,
               level=r.level)
    r = Report(hosts=r.hosts, specs=r.specs, findings=evaluate(r, now=NOW),
               generated_at=r.generated_at, level=r.level)
    doc = json.loads(render(r, Format.json))
    jsonschema.Draft202012Validator(schema).validate(doc)
    assert doc["summary"]["findings"]["error"] > 0


PROBE_RUNS = REPO / "tests" / "fixtures" / "h200x2-probe-2026-11-30"


def test_real_probe_output_from_the_device_machine_nothing_above_info() -> None:
    # probe.sh run unchanged on the real 2xH200 machine, idle and with a torch process on GPU 0.
    idle, busy = (parse_probe_output((PROBE_RUNS / f"probe-{n}.txt").read_text())
                  for n in ("idle", "busy"))
    image = Expectations(pytorch_image="pytorch/pytorch:2.11.0-cuda13.0-cudnn9-runtime")
    for hosts in ({"dev": (idle, None, image, "all")},
                  {"dev": (busy, real_smoke("dev"), image, "all")},
                  {"a": (idle, None, image, "gpu"), "b": (busy, None, image, "gpu"),
                   "c": (idle, None, image, "gpu")}):
        r = _report(hosts)
        assert _above_info(r) == [], hosts.keys()
    # What it does report: the tools that machine lacks, as info.
    rules = {f.rule for f in evaluate(_report({"dev": (idle, None, image, "all")}), now=NOW)}
    assert rules == {"GF010"}


def _sick(parsed: dict[str, Facts], profile: str) -> list[Any]:
    e = Expectations()
    return [f for f in evaluate(_report({"sick": (parsed[profile], None, e, "gpu")}), now=NOW)
            if "sick" in f.hosts]


def test_the_drivers_recovery_action_decides_over_the_catalog(parsed: dict[str, Facts]) -> None:
    """Xid 94 alone is RESTART_APP in NVIDIA's catalog (info); the driver says Reset: the driver
    wins, and every finding names which one decided and its source."""
    (xid94,) = [f for f in _sick(parsed, "recovery-reset") if f.evidence.get("xid") == 94]
    assert xid94.rule == "GF405" and xid94.severity == "error"
    ev = xid94.evidence
    assert (ev["decided_by"], ev["bucket"], ev["need"]) == (
        "driver recovery action", "gpu_reset", "reset")
    assert "error-recovery-and-response-flags" in ev["source"]
    assert "nvidia-smi -r" in xid94.remediation
    reboot = [f for f in _sick(parsed, "recovery-reboot") if f.rule == "GF405"]
    assert {f.evidence["xid"] for f in reboot} == {31, 154}
    assert {f.evidence["bucket"] for f in reboot} == {"node_reboot"}
    assert all("reboot" in f.remediation for f in reboot)


def test_a_pending_recovery_action_without_an_xid_in_the_log_is_gf420(
        parsed: dict[str, Facts]) -> None:
    rotated = dataclasses.replace(parsed["recovery-reset"], xid_events=())
    found = evaluate(_report({"sick": (rotated, None, Expectations(), "gpu")}), now=NOW)
    (gf420,) = [f for f in found if f.rule == "GF420"]
    assert gf420.severity == "error" and gf420.evidence["gpu"] == 1
    assert gf420.evidence["recovery_action"] == "gpu_reset"


def test_without_a_driver_verdict_the_catalog_decides(parsed: dict[str, Facts]) -> None:
    (gf405,) = [f for f in _sick(parsed, "xid79-lost") if f.rule == "GF405"]
    ev = gf405.evidence
    assert (ev["xid"], ev["decided_by"], ev["bucket"], ev["need"]) == (
        79, "NVIDIA Xid catalog", "RESTART_BM", "reboot")
    assert ev["lasting"] and not ev["recent"]  # two days old, still current
    assert ev["source"].startswith("https://docs.nvidia.com/deploy/xid-errors/")
