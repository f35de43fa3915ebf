"""The fact-family registry: it covers every Facts field once, reads exactly what probe.sh
writes, each family fails alone, and the shipped probe carries ws_check.py verbatim.

Golden cases per family, pyinfra-style: tests/fixtures/families/FAMILY/CASE.json holds the input
(`capture`: a real probe output under tests/fixtures, or `sections`: NAME -> rc/stdout/stderr,
with its `source`) and what that family makes of it (`fields`, and `errors` among the family's
own keys). After a parser change run `GPUFLEET_UPDATE_GOLDEN=1 .venv/bin/python -m pytest
tests/unit/test_probe_families.py` and read the diff."""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpufleet.model import Facts, KernelsInfo, to_jsonable
from gpufleet.probes import probe_script
from gpufleet.probes.families import (
    COLLECT_ERRORS,
    COLLECT_FIELDS,
    COLLECT_SECTIONS,
    FAMILIES,
)
from gpufleet.probes.sections import ProbeOutput
from gpufleet.sku import bandwidth

REPO = Path(__file__).resolve().parents[2]
PROBE_RUNS = REPO / "tests/fixtures/h200x2-probe-2026-11-30"
collect = importlib.import_module("gpufleet.probes.collect")  # the package exports a function
CASES = REPO / "tests/fixtures/families"
PROBE_SH = REPO / "agent/gpufleet/probes/probe.sh"
# `section NAME …`, `smi NAME …`, `emit NAME RC` and the printf'd meta/end headers.
_WRITES = re.compile(r"^\s*(?:section|smi|emit) ([a-z_]+)\b|==gpufleet== ([a-z_]+) rc=",
                     re.MULTILINE)


def test_the_families_fill_every_facts_field_exactly_once() -> None:
    declared = [f for fam in FAMILIES for f in fam.fields] + list(COLLECT_FIELDS)
    assert sorted(declared) == sorted(f.name for f in dataclasses.fields(Facts))


def test_the_families_read_exactly_the_sections_probe_sh_writes() -> None:
    written = {a or b for a, b in _WRITES.findall(probe_script())}
    read = {s for fam in FAMILIES for s in fam.sections} | set(COLLECT_SECTIONS)
    assert written == read
    assert {f.smi for f in FAMILIES if f.smi} <= read


def test_family_names_are_unique_and_their_own_error_key() -> None:
    names = [f.name for f in FAMILIES]
    assert len(names) == len(set(names))
    assert all(f.name in f.errors for f in FAMILIES)  # a crashed build reports under its name


@pytest.mark.parametrize("capture", ["probe-idle.txt", "probe-busy.txt"])
def test_every_error_a_real_capture_gives_is_declared(capture: str) -> None:
    declared = {e for f in FAMILIES for e in f.errors} | set(COLLECT_ERRORS)
    facts = collect.parse_probe_output((PROBE_RUNS / capture).read_text())
    assert facts.errors.keys() <= declared
    broken = collect.parse_probe_output("==gpufleet== meta rc=0\n==gpufleet== query_gpu rc=127\n"
                                        "==gpufleet-stderr==\nnvidia-smi: not found\n")
    assert broken.errors.keys() <= declared and "nvidia_smi" in broken.errors


def test_a_family_whose_build_raises_costs_only_that_family(
        monkeypatch: pytest.MonkeyPatch) -> None:
    text = (PROBE_RUNS / "probe-idle.txt").read_text()
    whole = collect.parse_probe_output(text)

    def boom(out: ProbeOutput) -> dict[str, Any]:
        raise KeyError("odd")

    broken = tuple(dataclasses.replace(f, build=boom) if f.name == "gpus" else f
                   for f in FAMILIES)
    monkeypatch.setattr(collect, "FAMILIES", broken)
    facts = collect.parse_probe_output(text)
    assert facts.gpus == () and facts.errors["gpus"] == "could not read gpus: KeyError: 'odd'"
    assert dataclasses.replace(facts, gpus=whole.gpus, errors=whole.errors) == whole


def test_the_shipped_probe_carries_ws_check_py_verbatim() -> None:
    """The shell-quoted copy probe_script() embeds is byte for byte the linted file."""
    script = probe_script()
    line = next(ln for ln in script.split("\nws_check=")[1:2])
    assignment = "ws_check=" + line.split("\ncapture docker ps -q --no-trunc\n")[0]
    shown = subprocess.run(["sh", "-c", assignment + '\nprintf %s "$ws_check"'],
                           capture_output=True, text=True, check=True, timeout=30).stdout
    assert shown == (REPO / "agent/gpufleet/probes/ws_check.py").read_text()
    assert "import json" not in PROBE_SH.read_text()  # no second copy in probe.sh



def _probe_text(case: dict[str, Any]) -> str:
    if "capture" in case:
        return (REPO / "tests/fixtures" / case["capture"]).read_text()
    parts = ["==gpufleet== meta rc=0\ntool_timeout=10\n"]
    for name, sec in case["sections"].items():
        parts.append(f"==gpufleet== {name} rc={sec['rc']}\n{sec['stdout']}\n")
        if sec.get("stderr"):
            parts.append(f"==gpufleet-stderr==\n{sec['stderr']}\n")
    return "".join(parts) + "==gpufleet== end rc=0\n"


CASE_FILES = sorted(CASES.glob("*/*.json"))


@pytest.mark.parametrize("path", CASE_FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_family_case(path: Path) -> None:
    family = next(f for f in FAMILIES if f.name == path.parent.name)
    case = json.loads(path.read_text())
    assert case.get("source"), f"{path}: say where the input comes from"
    facts = collect.parse_probe_output(_probe_text(case))
    got = {"fields": {f: json.loads(json.dumps(to_jsonable(getattr(facts, f))))
                      for f in family.fields},
           "errors": {k: v for k, v in facts.errors.items() if k in family.errors}}
    if os.environ.get("GPUFLEET_UPDATE_GOLDEN") == "1":
        path.write_text(json.dumps({**case, **got}, indent=2) + "\n")
    assert got == {"fields": case["fields"], "errors": case["errors"]}, path.name


def test_every_family_has_a_golden_case() -> None:
    assert {f.name for f in FAMILIES} == {p.parent.name for p in CASE_FILES}


def test_probe_sh_lists_only_nvidia_vga_and_3d_functions_from_sysfs(tmp_path: Path) -> None:
    """The shipped probe against a sysfs tree in the ABI's format (one file per attribute,
    0x-hex and a newline: drivers/pci/pci-sysfs.c), the new-fact example of docs/add-a-fact.md."""
    devices = {"0000:00:06.0": ("0x10de", "0x030200", "0x2335"),  # 3D controller (H200 SXM)
               "0000:00:07.0": ("0x10de", "0x030000", "0x2330"),  # VGA compatible
               "0000:00:08.0": ("0x10de", "0x040300", "0x22e8"),  # the GPU's HDMI audio
               "0000:00:09.0": ("0x10de", "0x068000", "0x22a3"),  # an NVSwitch (bridge)
               "0000:00:02.0": ("0x8086", "0x030000", "0x0d57")}  # another vendor's VGA
    for address, (vendor, cls, device) in devices.items():
        d = tmp_path / "devices" / address
        d.mkdir(parents=True)
        for name, value in (("vendor", vendor), ("class", cls), ("device", device)):
            (d / name).write_text(value + "\n")
    env = {**os.environ, "GPUFLEET_SYS_PCI_DEVICES": str(tmp_path / "devices")}
    out = subprocess.run(["sh", "-s", "--"], input=probe_script(), capture_output=True,
                         text=True, env=env, timeout=120).stdout
    facts = collect.parse_probe_output(out)
    assert [(f.address, f.class_code, f.device_id) for f in facts.pci_gpus or ()] == [
        ("0000:00:06.0", "0x030200", "0x2335"), ("0000:00:07.0", "0x030000", "0x2330")]
    env["GPUFLEET_SYS_PCI_DEVICES"] = str(tmp_path / "absent")
    out = subprocess.run(["sh", "-s", "--"], input=probe_script(), capture_output=True,
                         text=True, env=env, timeout=120).stdout
    assert collect.parse_probe_output(out).pci_gpus is None


def test_probe_sh_reads_rdma_port_rates_from_sysfs(tmp_path: Path) -> None:
    """The shipped probe against /sys/class/infiniband in the kernel's layout (DEVICE/ports/N/
    rate, rate_show's text and a newline: torvalds/linux drivers/infiniband/core/sysfs.c); the
    smoke runner's multinode expectation reads these rates from the facts."""
    rates = {("mlx5_0", "1"): "400 Gb/sec (4X NDR)", ("mlx5_1", "1"): "200 Gb/sec (4X HDR)",
             ("mlx5_bond_0", "2"): "100 Gb/sec (4X EDR)"}
    for (dev, port), rate in rates.items():
        d = tmp_path / "infiniband" / dev / "ports" / port
        d.mkdir(parents=True)
        (d / "rate").write_text(rate + "\n")
    (tmp_path / "infiniband" / "mlx5_9" / "ports").mkdir(parents=True)  # a device, no port yet
    env = {**os.environ, "GPUFLEET_SYS_CLASS_INFINIBAND": str(tmp_path / "infiniband")}
    out = subprocess.run(["sh", "-s", "--"], input=probe_script(), capture_output=True,
                         text=True, env=env, timeout=120).stdout
    facts = collect.parse_probe_output(out)
    assert [(p.device, p.port, p.rate, p.rate_gbit) for p in facts.ib_ports or ()] == [
        ("mlx5_0", "1", "400 Gb/sec (4X NDR)", 400.0),
        ("mlx5_1", "1", "200 Gb/sec (4X HDR)", 200.0),
        ("mlx5_bond_0", "2", "100 Gb/sec (4X EDR)", 100.0)]
    assert bandwidth.links_from_facts(facts).nic_gbps == (50.0, 25.0, 12.5)
    env["GPUFLEET_SYS_CLASS_INFINIBAND"] = str(tmp_path / "absent")
    out = subprocess.run(["sh", "-s", "--"], input=probe_script(), capture_output=True,
                         text=True, env=env, timeout=120).stdout
    assert collect.parse_probe_output(out).ib_ports == ()


def test_the_schema_accepts_the_new_fact_read_and_not_read() -> None:
    import jsonschema  # noqa: PLC0415

    schema = json.loads((REPO / "agent/gpufleet/schema/report-v1.json").read_text())
    facts_schema = {"$ref": "#/$defs/facts", "$defs": schema["$defs"]}
    case = json.loads((CASES / "pci_gpus/h200x2.json").read_text())
    facts = collect.parse_probe_output(_probe_text(case))
    jsonschema.validate(json.loads(json.dumps(to_jsonable(facts))), facts_schema)
    bad = {**json.loads(json.dumps(to_jsonable(facts))), "pci_gpus": [{"class_code": "0x030200"}]}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, facts_schema)


def test_nvidia_smi_subcommand_failures_are_listed_in_the_probes_order() -> None:
    """errors keep probe order (the facts table and GF3xx evidence list them in that order)."""
    text = "==gpufleet== meta rc=0\ntool_timeout=10\n==gpufleet== query_gpu rc=0\nindex\n0\n"
    for name in ("nvidia_smi_q", "topo", "nvlink", "compute_apps"):
        text += f"==gpufleet== {name} rc=3\n==gpufleet-stderr==\nboom\n"
    facts = collect.parse_probe_output(text + "==gpufleet== end rc=0\n")
    assert list(facts.errors)[:4] == ["fabric", "topology", "nvlink", "gpu_processes"]


def test_probe_sh_lists_installed_kernels_and_the_reboot_flag(tmp_path: Path) -> None:
    """The shipped probe over a /boot as the distributions' kernel packages lay it out
    (vmlinuz-RELEASE, plus initrd and config files that are not kernels) and Debian/Ubuntu's
    /var/run/reboot-required flag; a /boot that is not a directory reads as not collected."""
    boot = tmp_path / "boot"
    boot.mkdir()
    for name in ("vmlinuz-6.8.0-45-generic", "vmlinuz-6.8.0-100-generic",
                 "initrd.img-6.8.0-100-generic", "config-6.8.0-100-generic"):
        (boot / name).write_text("")
    (boot / "vmlinuz-6.9.0 evil").write_text("")  # a name no kernel package writes
    flag = tmp_path / "reboot-required"
    env = {**os.environ, "GPUFLEET_BOOT": str(boot), "GPUFLEET_REBOOT_REQUIRED": str(flag)}

    def kernels() -> object:
        out = subprocess.run(["sh", "-s", "--"], input=probe_script(), capture_output=True,
                             text=True, env=env, timeout=120).stdout
        return collect.parse_probe_output(out).kernels

    assert kernels() == KernelsInfo(("6.8.0-45-generic", "6.8.0-100-generic"), False)
    flag.write_text("*** System restart required ***\n")
    assert kernels() == KernelsInfo(("6.8.0-45-generic", "6.8.0-100-generic"), True)
    env["GPUFLEET_BOOT"] = str(tmp_path / "absent")
    assert kernels() is None
