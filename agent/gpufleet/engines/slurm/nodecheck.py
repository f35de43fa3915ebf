"""Node-local mode: this node checks itself (local transport), e.g. as Slurm's HealthCheckProgram.

Expectations come from a file the roles render (`--expect`, the desired-state variables of
gpufleet.inventory.desired, read by load_expectations/node_spec exactly as hostvars are); without
one only the rules that need neither expectations nor peers can fire. With `--slurm-drain` the
verdict drains or resumes this node in Slurm (engines/slurm/drain.py decides, with its circuit
breaker; rules/slurm.py names the outcome, GF901-GF905).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

from gpufleet.engines.slurm.drain import SlurmNode, drain_reason, plan_evidence
from gpufleet.model import Finding, HostSpec, Report
from gpufleet.report.pipeline import judge
from gpufleet.rules import slurm as slurm_rules
from gpufleet.smoke.levels import smoke_level
from gpufleet.sweep.sweep import run_check


def node_name(explicit: str | None, environ: Mapping[str, str] | None = None) -> str:
    """Slurm's name for this node: $SLURMD_NODENAME, else --node, else the hostname."""
    env = os.environ if environ is None else environ
    return env.get("SLURMD_NODENAME") or explicit or socket.gethostname().split(".")[0]


def slurm_findings(node: str, findings: tuple[Finding, ...], *, fail_on: str, share: float,
                   window_s: float) -> list[Finding]:
    """Apply the verdict to Slurm (drain/keep/resume/leave) and say what happened as findings."""

    p = SlurmNode(node).apply(drain_reason(findings, fail_on), share=share, window_s=window_s)
    return slurm_rules.findings(node, p.action, p.detail, plan_evidence(p), share=share)


def run_node_check(
    spec: HostSpec,
    *,
    level: str,
    timeout: float,
    smoke_timeout: float,
    force: bool,
    generated_at: str,
) -> Report:
    """Facts (and at level quick or full the smoke test) of this machine, judged by the rules.

    A node without NVIDIA GPUs skips the smoke test unless its expectations say it has none
    (gpufleet_expected_gpu_count: 0): then its CPU ranks (gloo) are what there is to test, as
    `check -i` tests an inventory host without GPUs."""

    results = run_check([spec], smoke_level=smoke_level(level), force=force, forks=1,
                        probe_timeout=timeout, smoke_timeout=smoke_timeout, progress=False,
                        smoke_without_gpu=spec.expect.gpu_count == 0)
    report = Report(hosts=results, specs={spec.name: spec}, generated_at=generated_at,
                    level=level)
    return judge(report)
