"""Probe parsers: golden files from every real capture, plus the failure shapes.

Golden files: tests/fixtures/golden/*.json. After a parser change run
`GPUFLEET_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/unit/test_probes.py` and read the diff.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from gpufleet.model import CommandResult, Expectations, HostSpec, to_jsonable
from gpufleet.probes import collect, parse_probe_output, probe_script
from gpufleet.probes.containers import parse_docker_info, parse_toolkit_version
from gpufleet.probes.fabric import parse_nvidia_smi_q_fabric
from gpufleet.probes.gpus import (
    decode_throttle_mask,
    gpu_from_q,
    nvidia_smi_failure,
    parse_nvidia_smi_q,
    parse_query_gpu_csv,
)
from gpufleet.probes.kernel_log import parse_xid_lines
from gpufleet.probes.processes import parse_compute_apps
from gpufleet.probes.sections import split_sections
from gpufleet.probes.system import (
    parse_ldconfig_nccl,
    parse_ldconfig_nvml,
    parse_os_release,
    parse_proc_driver_version,
    parse_uname,
)
from gpufleet.probes.topology import parse_nvlink_status, parse_topo_m
from gpufleet.transport.base import Transport, TransportError

REPO = Path(__file__).resolve().parents[2]
CAPTURE = REPO / "tests/fixtures/h200x2-2026-11-30"
GOLDEN = REPO / "tests/fixtures/golden"


def read(name: str) -> str:
    return (CAPTURE / name).read_text()


def facts_sections() -> dict[str, str]:
    """facts.txt is an older combined probe log whose sections start with `== name`."""
    sections: dict[str, list[str]] = {}
    current: list[str] = []
    for line in read("facts.txt").splitlines():
        if line.startswith("== "):
            current = sections.setdefault(line[3:].strip(), [])
        else:
            current.append(line)
    return {k: "\n".join(v) for k, v in sections.items()}


def q_summary(text: str) -> dict[str, Any]:
    query = parse_nvidia_smi_q(text)
    states, status = parse_nvidia_smi_q_fabric(query)
    return {
        "driver_version": query.driver_version,
        "cuda_version": query.cuda_version,
        "attached_gpus": query.attached_gpus,
        "gpus": [gpu_from_q(i, values) for i, values in enumerate(query.gpus)],
        "fabric_states": states,
        "fabric_status": status,
    }


def facts_txt() -> dict[str, Any]:
    s = facts_sections()
    return {
        "os_release": parse_os_release(s["os-release"]),
        "uname": parse_uname(s["uname"]),
        "proc_driver": parse_proc_driver_version(s["proc driver"]),
        "query_gpu": parse_query_gpu_csv(s["query csv"]),
        "topology": parse_topo_m(s["topo"]),
        "nvlink": parse_nvlink_status(s["nvlink"]),
        "fabric_query": nvidia_smi_failure(2, s["fabric"]),
        "nccl": parse_ldconfig_nccl(s["ldconfig nccl"]),
        "xid": parse_xid_lines(s["dmesg xid"]),
    }


# Capture file -> how it is parsed. Every probe-relevant capture is here; bench.txt and
# collect_env.txt are smoke-test logs, parsed by the smoke layer.
GOLDEN_CASES: dict[str, Callable[[], Any]] = {
    "query-gpu.csv": lambda: parse_query_gpu_csv(read("query-gpu.csv")),
    # The capture kept no header; these fields are inferred from its values (index, a Yes/No
    # flag, the event-reason mask, an Active/Not Active flag), not recorded.
    "query-gpu-noheader-nounits.csv": lambda: parse_query_gpu_csv(
        read("query-gpu-noheader-nounits.csv"),
        fields=("index", "remapped_rows.pending", "clocks_event_reasons.active", "hw_slowdown"),
    ),
    "nvidia-smi-q.txt": lambda: q_summary(read("nvidia-smi-q.txt")),
    "topo-m.txt": lambda: parse_topo_m(read("topo-m.txt")),
    "nvlink-s.txt": lambda: parse_nvlink_status(read("nvlink-s.txt")),
    "compute-apps.csv": lambda: parse_compute_apps(read("compute-apps.csv")),
    "kernel-log.txt": lambda: parse_xid_lines(read("kernel-log.txt")),
    "ldconfig.txt": lambda: {
        "nccl": parse_ldconfig_nccl(read("ldconfig.txt")),
        "nvml": parse_ldconfig_nvml(read("ldconfig.txt")),
    },
    "bad-field.txt": lambda: nvidia_smi_failure(2, read("bad-field.txt")),
    "q-d-fabric.txt": lambda: nvidia_smi_failure(2, read("q-d-fabric.txt")),
    "facts.txt": facts_txt,
}
PROBE_CAPTURE = REPO / "tests/fixtures/h200x2-probe-2026-11-30"
for _name in ("probe-idle.txt", "probe-busy.txt"):
    GOLDEN_CASES[_name] = lambda n=_name: parse_probe_output((PROBE_CAPTURE / n).read_text())


@pytest.mark.parametrize("capture", sorted(GOLDEN_CASES))
def test_golden(capture: str) -> None:
    got = json.loads(json.dumps(to_jsonable(GOLDEN_CASES[capture]())))
    path = GOLDEN / f"{capture}.json"
    if os.environ.get("GPUFLEET_UPDATE_GOLDEN") == "1":
        GOLDEN.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(got, indent=2, sort_keys=True) + "\n")
    assert path.exists(), f"no golden file {path}; run with GPUFLEET_UPDATE_GOLDEN=1 and review it"
    assert got == json.loads(path.read_text()), f"{capture} parses differently from {path.name}"


def test_every_capture_has_a_golden_case() -> None:
    smoke_logs = {"bench.txt", "collect_env.txt", "README.md"}
    # Kept as evidence of real output; no fact reads them yet (their parsers had no caller).
    unread = {"nvidia-smi.txt", "nvidia-smi-L.txt", "proc-driver-nvidia.txt"}
    cross_checked = {"nvidia-smi-q.xml"}  # see test_q_text_agrees_with_query_csv_and_xml
    captures = {p.name for p in CAPTURE.iterdir()} - smoke_logs - cross_checked - unread
    assert captures - GOLDEN_CASES.keys() == set()


# --------------------------------------------------------------------------- real captures


def test_real_probe_output_busy_host() -> None:
    busy = parse_probe_output((PROBE_CAPTURE / "probe-busy.txt").read_text())
    (process,) = busy.gpu_processes
    assert (process.pid, process.used_memory_mib) == (3085, 4614)
    assert process.gpu_uuid == busy.gpus[0].uuid
    assert busy.gpus[0].throttle_reasons == () and busy.gpus[1].throttle_reasons == ("gpu_idle",)
    assert busy.errors == {
        "toolkit": "nvidia-ctk: not found",
        "docker": "docker: not found",
        "containerd": "containerd: not found",
        "image": "docker: not found",
    }
    assert busy.fabric is not None and busy.fabric.manager_running is None


def test_query_gpu_capture_values() -> None:
    gpus = parse_query_gpu_csv(read("query-gpu.csv"))
    assert [g.index for g in gpus] == [0, 1]
    g = gpus[1]
    assert g.uuid == "GPU-d7b915ba-0fcc-7de5-ad60-046e8236bde5"
    assert g.bus_id == "00000000:00:07.0"
    assert g.memory_total_mib == 143771
    assert (g.persistence_mode, g.mig_mode, g.ecc_mode) == (True, "Disabled", "Enabled")
    assert g.retired_pages_pending is None  # "[N/A]" on H200: rows are remapped, not retired
    assert (g.remapped_rows_pending, g.remapped_rows_failed) == (False, False)
    assert (g.pcie_gen_current, g.pcie_gen_max, g.pcie_width_current, g.pcie_width_max) == (
        5,
        5,
        16,
        16,
    )
    assert (g.compute_cap, g.serial, g.vbios) == ("9.0", "1654024029552", "96.00.A5.00.1A")
    assert g.throttle_reasons == ("gpu_idle",)


def test_q_text_agrees_with_query_csv_and_xml() -> None:
    """Three real renderings of the same host must parse to the same facts.

    The XML was captured on another boot of the VM (other GPU UUIDs), so it is compared on
    everything but the UUID.
    """
    q = q_summary(read("nvidia-smi-q.txt"))
    csv_gpus = parse_query_gpu_csv(read("query-gpu.csv"))
    root = ET.fromstring(read("nvidia-smi-q.xml"))
    xml_gpus = root.findall("gpu")
    assert q["driver_version"] == root.findtext("driver_version") == "580.159.04"
    assert q["cuda_version"] == root.findtext("cuda_version") == "13.0"
    for from_q, from_csv, node in zip(q["gpus"], csv_gpus, xml_gpus, strict=True):
        assert from_q.uuid == from_csv.uuid
        assert from_q.bus_id == from_csv.bus_id == node.get("id")
        assert (
            from_q.memory_total_mib
            == from_csv.memory_total_mib
            == int((node.findtext("fb_memory_usage/total") or "").split()[0])
        )
        assert from_q.pcie_gen_max == from_csv.pcie_gen_max == 5
        assert from_q.throttle_reasons == from_csv.throttle_reasons
    assert (
        list(q["fabric_states"].values())
        == [n.findtext("fabric/state") for n in xml_gpus]
        == ["Completed", "Completed"]
    )


def test_topology_capture() -> None:
    topo = parse_topo_m(read("topo-m.txt"))
    assert topo.devices == ("GPU0", "GPU1")
    assert topo.links["GPU0"]["GPU1"] == topo.links["GPU1"]["GPU0"] == "NV18"
    assert topo.links["GPU0"]["GPU0"] == "X"
    assert topo.cpu_affinity == {"GPU0": "0-31", "GPU1": "0-31"}
    assert topo.numa_affinity == {"GPU0": "0", "GPU1": "0"}
    assert topo.nics == {}


def test_nccl_version_from_ldconfig_capture() -> None:
    assert parse_ldconfig_nccl(read("ldconfig.txt")) == "2.28.3"


def test_kernel_module_version_capture() -> None:
    assert parse_proc_driver_version(facts_sections()["proc driver"]) == ("580.159.04", "open")


# --------------------------------------------------------------------------- formats seen elsewhere

TOPO_WITH_NICS = (
    "\tGPU0\tGPU1\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    "GPU0\t X \tNV6\tPIX\tSYS\t6,14,22,30\t3\t\tN/A\n"
    "GPU1\tNV6\t X \tSYS\tPIX\t\t1\t\tN/A\n"
    "NIC0\tPIX\tSYS\t X \tSYS\n"
    "NIC1\tSYS\tPIX\tSYS\t X \n"
    "\nLegend:\n\n  X    = Self\n\nNIC Legend:\n\n  NIC0: mlx5_0\n  NIC1: mlx5_1\n"
)


def test_topology_with_nics_and_empty_cpu_affinity() -> None:
    topo = parse_topo_m(TOPO_WITH_NICS)
    assert topo.devices == ("GPU0", "GPU1", "NIC0", "NIC1")
    assert topo.links["GPU0"] == {"GPU0": "X", "GPU1": "NV6", "NIC0": "PIX", "NIC1": "SYS"}
    assert topo.links["NIC1"]["GPU1"] == "PIX"
    assert topo.cpu_affinity == {"GPU0": "6,14,22,30"}  # GPU1's cell is empty
    assert topo.numa_affinity == {"GPU0": "3", "GPU1": "1"}
    assert topo.nics == {"NIC0": "mlx5_0", "NIC1": "mlx5_1"}


def test_nvlink_inactive_links() -> None:
    text = (
        "GPU 3: Tesla V100-SXM2-32GB (UUID: GPU-x)\n"
        "\t Link 0: 25.781 GB/s\n\t Link 3: <inactive>\n"
        "GPU 4: Tesla V100-SXM2-32GB (UUID: GPU-y)\n"
    )
    (g3, g4) = parse_nvlink_status(text)
    assert g3.gpu_index == 3
    assert [(link.link, link.active, link.speed_gbps) for link in g3.links] == [
        (0, True, 25.781),
        (3, False, None),
    ]
    assert g4.links == ()


def test_xid_formats() -> None:
    text = (
        "[ 1843.308145] NVRM: Xid (PCI:0000:b3:00): 79, pid='<unknown>', name=<unknown>, "
        "GPU has fallen off the bus.\n"
        "2026-11-30T00:41:07,512345+00:00 NVRM: Xid (PCI:0000:18:00): 48, pid=4711, "
        "name=python3, An uncorrectable double bit error (DBE) has been detected.\n"
        "[    4.181388] NVRM: Persistence mode is deprecated\n"
    )
    events = parse_xid_lines(text)
    assert [(e.xid, e.timestamp, e.bus_id) for e in events] == [
        (79, "[ 1843.308145]", "00000000:B3:00.0"),
        (48, "2026-11-30T00:41:07,512345+00:00", "00000000:18:00.0"),
    ]
    assert events[0].message.endswith("GPU has fallen off the bus.")
    # journald's short-iso puts "HOST kernel: " first; probe.sh's source line says journalctl.
    journal = ("# source: journalctl\n2026-11-30T00:42:00+0000 gpu07 kernel: NVRM: Xid "
               "(PCI:0000:18:00): 13, Graphics Exception\n")
    assert [(e.xid, e.timestamp, e.bus_id) for e in parse_xid_lines(journal)] == [
        (13, "2026-11-30T00:42:00+0000", "00000000:18:00.0")]


def test_throttle_mask_decoding() -> None:
    assert decode_throttle_mask("0x0000000000000001") == ("gpu_idle",)
    assert decode_throttle_mask("0x00000000000000C8") == (
        "hw_slowdown",
        "hw_thermal_slowdown",
        "hw_power_brake_slowdown",
    )
    assert decode_throttle_mask("0x0000000000001000") == ("unknown_0x1000",)
    assert decode_throttle_mask("[N/A]") == ()
    assert decode_throttle_mask(None) == ()


def test_nvidia_smi_failure_sentences() -> None:
    mismatch = (
        "Failed to initialize NVML: Driver/library version mismatch\n"
        "NVML library version: 580.159\n"
    )
    assert nvidia_smi_failure(18, mismatch) == (
        "NVML: Driver/library version mismatch (NVML library version 580.159)"
    )
    assert nvidia_smi_failure(127, "nvidia-smi: not found") == "nvidia-smi: not found"
    assert nvidia_smi_failure(124, "", "10") == "nvidia-smi hung (no answer in 10 s)"
    assert nvidia_smi_failure(
        9,
        "NVIDIA-SMI has failed because it couldn't communicate with the "
        "NVIDIA driver. Make sure that the latest NVIDIA driver is installed "
        "and running.",
    ).startswith("nvidia-smi: couldn't communicate")
    assert (
        nvidia_smi_failure(6, "No devices were found")
        == "nvidia-smi exited 6: No devices were found"
    )


def test_docker_info_full_json_and_toolkit() -> None:
    full = json.dumps(
        {
            "ID": "x",
            "ServerVersion": "27.5.1",
            "DefaultRuntime": "runc",
            "Runtimes": {"runc": {"path": "runc"}, "nvidia": {"path": "nvidia-container-runtime"}},
            "Containers": 3,
        }
    )
    info = parse_docker_info("WARNING: bridge-nf-call-iptables is disabled\n" + full)
    assert info is not None
    assert (info.server_version, info.runtimes, info.default_runtime) == (
        "27.5.1",
        ("nvidia", "runc"),
        "runc",
    )
    # The client prints the template even when the daemon is down: that is no docker server.
    assert parse_docker_info('{"ServerVersion":"","DefaultRuntime":"","Runtimes":null}') is None
    assert (
        parse_toolkit_version(
            "NVIDIA Container Toolkit CLI version 1.17.8\ncommit: f202b80a9b9d0db00d9b1d73c0128c8"
        )
        == "1.17.8"
    )


def test_proprietary_module_and_os_release_quoting() -> None:
    text = (
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.173.02  Tue Jun 23 08:38:17 UTC 2026\n"
    )
    assert parse_proc_driver_version(text) == ("580.173.02", "proprietary")
    assert parse_os_release(
        'ID="rocky"\nVERSION_ID=\'9.4\'\nPRETTY_NAME="Rocky Linux 9.4 (Blue Onyx)"\n'
    ) == {
        "ID": "rocky",
        "VERSION_ID": "9.4",
        "PRETTY_NAME": "Rocky Linux 9.4 (Blue Onyx)",
    }


# --------------------------------------------------------------------------- sections, whole output


def test_sections_keep_stdout_and_stderr_apart() -> None:
    text = (
        "Welcome banner\n==gpufleet== a rc=0\nline 1\n\nline 3\n"
        "==gpufleet== b rc=1\nout\n==gpufleet-stderr==\nerr 1\n==gpufleet== end rc=0\n"
    )
    s = split_sections(text)
    assert list(s) == ["a", "b", "end"]
    assert s["a"].stdout == "line 1\n\nline 3" and s["a"].stderr == ""
    assert (s["b"].rc, s["b"].stdout, s["b"].stderr) == (1, "out", "err 1")


def test_truncated_output_is_reported_not_raised() -> None:
    facts = parse_probe_output("==gpufleet== meta rc=0\ntool_timeout=10\n==gpufleet== uname rc=0\n")
    assert facts.errors["probe"].startswith("probe output ended early")
    assert parse_probe_output("").errors == {"probe": "probe printed nothing"}


def test_a_hung_topo_keeps_the_gpus() -> None:
    text = "\n".join(
        [
            "==gpufleet== meta rc=0",
            "tool_timeout=10",
            "==gpufleet== query_gpu rc=0",
            read("query-gpu.csv"),
            "==gpufleet== topo rc=124",
            "==gpufleet== nvlink rc=124",
            "==gpufleet-stderr==",
            "skipped: nvidia-smi hung earlier in this probe",
            "==gpufleet== end rc=0",
        ]
    )
    facts = parse_probe_output(text)
    assert facts.gpu_count == 2
    assert facts.errors["topology"] == "nvidia-smi hung (no answer in 10 s)"
    assert facts.errors["nvidia_smi"] == "nvidia-smi hung (no answer in 10 s)"
    assert "hung earlier" in facts.errors["nvlink"]


# --------------------------------------------------------------------------- the script itself


class LocalShell(Transport):
    """A test transport that runs argv with the local sh: the real script, no SSH."""

    name = "local-test"

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = dict(env or os.environ)
        self.calls: list[Sequence[str]] = []

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        self.calls.append(list(argv))
        start = time.monotonic()
        # As over SSH: one quoted command line for a shell.
        proc = subprocess.run(
            ["sh", "-c", shlex.join(argv)],
            input=stdin,
            capture_output=True,
            timeout=timeout,
            env={**self.env, **(env or {})},
        )
        return CommandResult(
            proc.returncode, proc.stdout.decode(), proc.stderr.decode(), time.monotonic() - start
        )

    def put(self, data: bytes, remote_path: str, mode: int = 0o644) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class Unreachable(LocalShell):
    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        raise TransportError("unreachable", "gpu07: connection refused")


def test_collect_on_this_machine_is_one_round_trip_and_never_raises() -> None:
    """This dev machine has no nvidia-smi and a docker client without an engine."""
    transport = LocalShell()
    raw: list[str] = []
    spec = HostSpec(
        "here", "127.0.0.1", expect=Expectations(pytorch_image="repo/x:1 $(touch /tmp/p)")
    )
    facts = collect(transport, spec, raw_sink=raw.append)
    assert len(transport.calls) == 1
    assert transport.calls[0][:3] == ["sh", "-s", "--"]
    assert raw and raw[0].startswith("==gpufleet== meta rc=0")
    assert "image=repo/x:1 $(touch /tmp/p)" in raw[0]  # travelled as data, not code
    assert facts.os.kernel == os.uname().release
    assert facts.gpus == () and facts.errors["nvidia_smi"] == "nvidia-smi: not found"
    assert facts.docker is None and facts.errors["docker"].startswith("docker: ")
    assert "probe" not in facts.errors
    assert facts.probe_duration_s is not None and facts.probe_duration_s > 0


def test_transport_errors_propagate() -> None:
    with pytest.raises(TransportError):
        collect(Unreachable(), HostSpec("gpu07", "10.0.0.7"))


@pytest.mark.parametrize("argv", [["dash"], ["bash", "--posix"]], ids=["dash", "bash"])
def test_script_runs_under_posix_shells(argv: list[str]) -> None:
    proc = subprocess.run(
        [*argv, "-s", "--", "tool_timeout=5"],
        input=probe_script(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    sections = split_sections(proc.stdout)
    assert "end" in sections and sections["uname"].ok
    assert proc.stderr == ""


class TimesOut(LocalShell):
    """The transport's overall timeout fired: it returns what arrived so far."""

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        partial = "==gpufleet== meta rc=0\ntool_timeout=10\n==gpufleet== uname rc=0\n6.1.0 x86_64\n"
        return CommandResult(None, partial, "", timeout, timed_out=True)


def test_probe_timeout_keeps_the_partial_facts() -> None:
    facts = collect(TimesOut(), HostSpec("gpu07", "10.0.0.7"), timeout=5)
    assert facts.errors["probe"] == "probe did not finish within 5 s; facts are partial"
    assert facts.os.kernel == "6.1.0"


def test_a_tool_that_ignores_term_is_killed(tmp_path: Path) -> None:
    """timeout -k: TERM first, KILL two seconds later; the section says hung, the rest arrives."""
    stubborn = tmp_path / "docker"
    stubborn.write_text("#!/bin/sh\ntrap '' TERM\nsleep 300\n")
    stubborn.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    start = time.monotonic()
    proc = subprocess.run(
        ["sh", "-s", "--", "tool_timeout=1"],
        input=probe_script(),
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )
    elapsed = time.monotonic() - start
    sections = split_sections(proc.stdout)
    assert sections["docker_info"].rc == 137
    facts = parse_probe_output(proc.stdout)
    assert facts.errors["docker"] == "docker hung (no answer in 1 s)"
    assert "end" in sections and facts.os.kernel == os.uname().release
    assert elapsed < 120, elapsed  # killed, not waited out (the tool sleeps 300 s)


OLD_SMI = """#!/bin/sh
# An older nvidia-smi: no clocks_event_reasons.* fields yet.
case "$*" in
  *clocks_event_reasons*)
    echo 'Field "clocks_event_reasons.active" is not a valid field to query.'
    exit 2 ;;
  --query-gpu=*) printf '%s\\n' \\
    'index, name, uuid, pci.bus_id, driver_version, clocks_throttle_reasons.active' \\
    '0, Tesla V100-SXM2-32GB, GPU-aaaa, 00000000:18:00.0, 535.183.01, 0x0000000000000004' ;;
  *) exit 0 ;;
esac
"""


def test_an_unknown_query_field_falls_back_to_the_basic_query(tmp_path: Path) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(OLD_SMI)
    smi.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    proc = subprocess.run(
        ["sh", "-s", "--"], input=probe_script(), capture_output=True, text=True, env=env
    )
    sections = split_sections(proc.stdout)
    assert (sections["query_gpu"].rc, sections["query_gpu_basic"].rc) == (2, 0)
    facts = parse_probe_output(proc.stdout)
    (gpu,) = facts.gpus
    assert (gpu.name, gpu.bus_id, gpu.throttle_reasons) == (
        "Tesla V100-SXM2-32GB",
        "00000000:18:00.0",
        ("sw_power_cap",),
    )
    assert facts.driver.version == "535.183.01"
    assert not {"nvidia_smi", "gpus"} & facts.errors.keys()


def test_gpus_come_from_q_when_both_queries_fail() -> None:
    bad = read("bad-field.txt").split("\n\nexit")[0]
    text = "\n".join(
        [
            "==gpufleet== meta rc=0",
            "tool_timeout=10",
            "==gpufleet== query_gpu rc=2",
            bad,
            "==gpufleet== query_gpu_basic rc=2",
            bad,
            "==gpufleet== nvidia_smi_q rc=0",
            read("nvidia-smi-q.txt"),
            "==gpufleet== end rc=0",
        ]
    )
    facts = parse_probe_output(text)
    assert [g.uuid for g in facts.gpus] == [
        g.uuid for g in parse_query_gpu_csv(read("query-gpu.csv"))
    ]
    assert facts.gpus[1].remapped_rows_pending is False and facts.gpus[1].pcie_width_max == 16
    assert facts.driver.version == "580.159.04" and facts.errors == {}


def test_parse_image_env_reads_the_env_line_of_the_image_query() -> None:
    from gpufleet.probes.containers import parse_image_env, parse_repo_digests  # noqa: PLC0415

    text = '["r/x@sha256:aa"]\nenv=["PATH=/usr/bin","NCCL_DEBUG=WARN","junk"]\n'
    assert parse_repo_digests(text) == ("r/x@sha256:aa",)
    assert parse_image_env(text) == ("PATH=/usr/bin", "NCCL_DEBUG=WARN")
    assert parse_image_env("null\nenv=null\n") == ()  # an image without Env
    assert parse_repo_digests("null\nenv=[\"A=1\"]\n") == ()  # not the Env line
    assert parse_image_env('["r/x@sha256:aa"]\n') is None  # a stand-in without the line


def test_gpu_link_kinds_is_one_answer_on_the_model_and_on_the_report_json() -> None:
    """rules/perf.py (Facts), the report page (JSON) and sku/bandwidth.py share it."""
    from gpufleet.model import gpu_link_kinds, topology_signature  # noqa: PLC0415

    topo = parse_topo_m(read("topo-m.txt"))
    as_json = json.loads(json.dumps(to_jsonable(topo)))
    assert topo.gpu_link_kinds() == gpu_link_kinds(as_json["links"]) == {"NV18"}
    assert topology_signature(2, as_json["links"]) == "2x NV18"
    assert topology_signature(0, {}) == "0x ?"
    assert topology_signature(1, {}) == "1x (one GPU)"  # issue 25: no "1x ?" cohort
    assert topo.gpu_link_kinds(2) == {"NV18"}
    # Asked about 3 GPUs of a 2-GPU matrix: the missing pairs are unknown, not uniform NV18.
    assert topo.gpu_link_kinds(3) == {"NV18", ""}
    assert gpu_link_kinds({"GPU0": None, "NIC0": {"GPU0": "SYS"}}) == frozenset()
