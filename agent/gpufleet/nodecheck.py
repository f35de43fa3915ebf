"""Node-local mode: this node checks itself (local transport), e.g. as Slurm's HealthCheckProgram.

Expectations come from a file the roles render (`--expect`, the same inventory variables as the
inventory: `nvidia_driver_version`, `pytorch_image_digest`, …); without one only the rules that
need neither expectations nor peers can fire. With `--slurm-drain` the verdict drains or resumes
this node in Slurm (gpufleet.slurm has the rules for that, the circuit breaker included).
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpufleet.model import Finding, HostSpec, Report

# Inventory variables the expectations file may carry (those inventory.py reads into a spec).
EXPECT_KEYS = frozenset({
    "nvidia_driver_version", "nvidia_driver_branch", "nvidia_driver_kernel_modules",
    "nvidia_container_toolkit_version", "container_runtime_engine", "pytorch_image",
    "pytorch_image_digest", "gpufleet_expected_gpu_count", "gpufleet_smoke_runtime",
    "gpufleet_smoke_python", "gpufleet_min_busbw_gbps", "gpufleet_mig_expected",
    "gpufleet_smoke_address", "gpufleet_smoke_interface",
})  # fmt: skip


# What node-check --slurm-drain did in Slurm: written by slurm_findings, never by rules.evaluate.
SLURM_RULES = frozenset({"GF901", "GF902", "GF903", "GF904", "GF905"})


class ExpectError(Exception):
    """The expectations file cannot be used; the message says why."""


def node_name(explicit: str | None, environ: Mapping[str, str] | None = None) -> str:
    """Slurm's name for this node: $SLURMD_NODENAME, else --node, else the hostname."""
    env = os.environ if environ is None else environ
    return env.get("SLURMD_NODENAME") or explicit or socket.gethostname().split(".")[0]


def load_expectations(path: Path | None) -> dict[str, Any]:
    """The variables in the expectations file (YAML or JSON mapping); {} without a file."""
    if path is None:
        return {}
    import yaml  # type: ignore[import-untyped]  # noqa: PLC0415  # ansible dependency

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ExpectError(f"cannot read {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ExpectError(f"{path} is not YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ExpectError(f"{path} must be a mapping of inventory variables, not "
                          f"{type(data).__name__}")
    unknown = sorted(str(k) for k in data if k not in EXPECT_KEYS)
    if unknown:
        raise ExpectError(f"{path}: unknown variable(s) {', '.join(unknown)} (known: "
                          f"{', '.join(sorted(EXPECT_KEYS))})")
    return {str(k): v for k, v in data.items()}


def node_spec(name: str, variables: Mapping[str, Any]) -> HostSpec:
    """This node as a local host with the expectations of `variables` (read as inventory.py
    reads hostvars, so a value means the same in both places)."""
    from gpufleet.inventory import InventoryError, spec_from_vars  # noqa: PLC0415

    try:
        return spec_from_vars(name, {**variables, "ansible_connection": "local"})
    except InventoryError as exc:
        raise ExpectError(str(exc)) from exc


def slurm_findings(node: str, findings: tuple[Finding, ...], *, fail_on: str, share: float,
                   window_s: float) -> list[Finding]:
    """Apply the verdict to Slurm (drain/keep/resume/leave) and say what happened as findings."""
    from gpufleet.rules.base import finding  # noqa: PLC0415
    from gpufleet.slurm import SlurmNode, drain_reason, plan_evidence  # noqa: PLC0415

    reason = drain_reason(findings, fail_on)
    p = SlurmNode(node).apply(reason, share=share, window_s=window_s)
    evidence = plan_evidence(p)
    if p.action == "breaker":
        return [finding("GF901", [node], p.detail, evidence, share=f"{share:g}")]
    if p.action in ("drain", "keep"):
        return [finding("GF902", [node], p.detail, evidence)]
    if p.action == "resume":
        return [finding("GF903", [node], p.detail, evidence)]
    if p.action == "leave":
        return [finding("GF904", [node], p.detail, evidence)]
    if p.action == "error":
        return [finding("GF905", [node], f"{node}: Slurm not updated: {p.detail}", evidence)]
    return []


def run_node_check(
    spec: HostSpec,
    *,
    level: str,
    timeout: float,
    smoke_timeout: float,
    force: bool,
    generated_at: str,
) -> Report:
    """Facts (and at level quick the smoke test) of this machine, judged by the rules."""
    from gpufleet.rules import evaluate  # noqa: PLC0415
    from gpufleet.sweep.sweep import run_check  # noqa: PLC0415

    results = run_check([spec], level=level, force=force, forks=1, probe_timeout=timeout,
                        smoke_timeout=smoke_timeout, progress=False, smoke_without_gpu=False)
    report = Report(hosts=results, specs={spec.name: spec}, generated_at=generated_at,
                    level=level)
    return dataclasses.replace(report, findings=evaluate(report))
