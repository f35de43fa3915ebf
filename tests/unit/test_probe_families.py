"""The fact-family registry: it covers every Facts field once, reads exactly what probe.sh
writes, each family fails alone, and the shipped probe carries ws_check.py verbatim."""

from __future__ import annotations

import dataclasses
import importlib
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpufleet.model import Facts
from gpufleet.probes import probe_script
from gpufleet.probes.families import (
    COLLECT_ERRORS,
    COLLECT_FIELDS,
    COLLECT_SECTIONS,
    FAMILIES,
)
from gpufleet.probes.sections import ProbeOutput

REPO = Path(__file__).resolve().parents[2]
PROBE_RUNS = REPO / "tests/fixtures/h200x2-probe-2026-11-30"
collect = importlib.import_module("gpufleet.probes.collect")  # the package exports a function
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

