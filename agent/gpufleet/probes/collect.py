"""One probe round trip per host: ship probe.sh, parse its sections into Facts."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import shlex
from collections.abc import Callable
from importlib import resources
from typing import Any

from gpufleet.model import Facts, HostSpec
from gpufleet.probes import nccl
from gpufleet.probes.families import FAMILIES
from gpufleet.probes.gpus import smi_error
from gpufleet.probes.sections import ProbeOutput, split_sections
from gpufleet.transport.base import Transport

DEFAULT_TOOL_TIMEOUT = 10.0


@functools.cache
def probe_script() -> str:
    """The POSIX sh probe as shipped: probe.sh with its two includes filled in at build time
    (nccl.SHELL's lines; ws_check.py as a shell-quoted string), still one command per host."""
    files = resources.files("gpufleet.probes")
    script = files.joinpath("probe.sh").read_text(encoding="utf-8")
    ws_check = files.joinpath("ws_check.py").read_text(encoding="utf-8")
    return (script.replace("#@include nccl.SHELL\n", nccl.SHELL.lstrip("\n"))
            .replace("#@include ws_check.py\n", f"ws_check={shlex.quote(ws_check)}\n"))


def probe_args(spec: HostSpec, tool_timeout: float = DEFAULT_TOOL_TIMEOUT) -> list[str]:
    """argv for the remote shell; values travel as positional parameters, never as code."""
    args = ["sh", "-s", "--", f"tool_timeout={tool_timeout:g}"]
    if spec.expect.pytorch_image:
        args.append(f"image={spec.expect.pytorch_image}")
    return args


def collect(
    transport: Transport,
    spec: HostSpec,
    *,
    timeout: float = 60.0,
    raw_sink: Callable[[str], None] | None = None,
    tool_timeout: float | None = None,
) -> Facts:
    """Run the probe on one host (one transport.run) and parse it.

    tool_timeout bounds each tool on the host (default 10 s, less when `timeout` is short, so
    one hung tool still leaves time for the others). TransportError propagates: the caller
    maps it to the host's status.
    """
    if tool_timeout is None:
        tool_timeout = max(1.0, min(DEFAULT_TOOL_TIMEOUT, round(timeout / 6)))
    collected_at = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    result = transport.run(
        probe_args(spec, tool_timeout),
        stdin=probe_script().encode(),
        timeout=timeout,
    )
    if raw_sink is not None:
        raw_sink(result.stdout)
    facts = parse_probe_output(result.stdout, collected_at=collected_at)
    errors = dict(facts.errors)
    if result.timed_out:
        errors["probe"] = f"probe did not finish within {timeout:g} s; facts are partial"
    elif "probe" in errors and result.rc not in (0, None):
        last = result.stderr.strip().splitlines()[-1:] or [""]
        errors["probe"] = f"probe exited {result.rc}: {last[0]}".rstrip(": ")
    return dataclasses.replace(facts, errors=errors, probe_duration_s=round(result.duration_s, 3))


def parse_probe_output(text: str, *, collected_at: str | None = None) -> Facts:
    """The probe's sectioned output -> Facts (pure): every family of FAMILIES in turn.

    Missing or failed facts are None/empty with a sentence in Facts.errors[family]; a family
    whose build raises keeps its fields' defaults and costs no other family.
    """
    out = ProbeOutput({}, {}, _smi_sections())
    sections = out.safe("probe", {}, split_sections, text)
    meta = out.safe("probe", {}, _key_values, sections["meta"].stdout) if "meta" in sections \
        else {}
    out.sections, out.meta, out.tool_timeout = sections, meta, meta.get("tool_timeout", "?")
    if not sections:
        out.errors["probe"] = "probe printed nothing"
    elif "end" not in sections:
        out.errors["probe"] = "probe output ended early (no end marker); facts are partial"
    values: dict[str, Any] = {}
    for family in FAMILIES:
        got = out.safe(family.name, {}, family.build, out)
        values.update((name, got[name]) for name in family.fields if name in got)
    smi_error(out)  # decided even when every nvidia-smi family failed before asking
    return Facts(collected_at=collected_at, errors=out.errors, **values)


@functools.cache
def _smi_sections() -> tuple[tuple[str, str], ...]:
    """(section, family) of the nvidia-smi families in the order probe.sh calls them, the order
    their failures are reported in."""
    script = probe_script()
    pairs = ((f.smi, f.name) for f in FAMILIES if f.smi is not None)
    return tuple(sorted(pairs, key=lambda pair: script.find(f"\nsmi {pair[0]} ")))


def _key_values(text: str) -> dict[str, str]:
    pairs = (line.partition("=") for line in text.splitlines())
    return {key.strip(): value.strip() for key, sep, value in pairs if sep}
