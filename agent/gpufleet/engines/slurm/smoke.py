"""`gpufleet smoke --slurm`: the multinode smoke test inside a Slurm allocation, launched with srun.

The allocation says everything: SLURM_JOB_ID and SLURM_JOB_NODELIST name the nodes (in Slurm's
order, expanded by `scontrol show hostnames`), `sinfo` gives each node's NodeAddr, and the first
node is the rendezvous store host (torchrun c10d on its NodeAddr). Every command the smoke runner
would send over SSH goes through `srun --overlap -N1 -n1 -w NODE` instead (transport/srun.py), so
the same script runs with the same checks and comes back as the same JSON.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from gpufleet import probes
from gpufleet.inventory import node_spec
from gpufleet.model import HostResult, HostSpec, SmokeResult
from gpufleet.sweep.fanout import fan_out
from gpufleet.transport.srun import SrunTransport


class AllocationError(Exception):
    """Not inside a usable Slurm allocation; the message says why."""


def allocation(environ: Mapping[str, str] | None = None) -> tuple[str, list[tuple[str, str]]]:
    """(job id, [(node, NodeAddr)…]) of the allocation this process runs in, nodelist order."""
    env = os.environ if environ is None else environ
    job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not job or not nodelist:
        raise AllocationError("--slurm needs a Slurm allocation: run it under salloc/sbatch "
                              "(SLURM_JOB_ID and SLURM_JOB_NODELIST are not set)")
    from gpufleet.engines.slurm.drain import SlurmError, run_command  # noqa: PLC0415

    try:
        names = run_command(["scontrol", "show", "hostnames", nodelist])
        if names.returncode != 0:
            raise AllocationError(f"scontrol show hostnames {nodelist} exited "
                                  f"{names.returncode}: {names.stderr.strip()[:300]}")
        nodes = [n.strip() for n in names.stdout.split() if n.strip()]
        addrs = run_command(["sinfo", "-h", "-N", "-n", ",".join(nodes), "-o", "%N|%o"])
    except SlurmError as exc:
        raise AllocationError(str(exc)) from exc
    address = dict(line.split("|", 1) for line in addrs.stdout.splitlines() if "|" in line)
    return job, [(n, address.get(n, n).strip() or n) for n in nodes]


def run_slurm_smoke(
    variables: Mapping[str, Any],
    *,
    level: str,
    timeout: float,
    probe_timeout: float,
    force: bool,
    environ: Mapping[str, str] | None = None,
) -> tuple[dict[str, HostResult], dict[str, HostSpec]]:
    """Facts of every allocated node, then one smoke world over all of them."""
    from gpufleet.smoke import runner  # noqa: PLC0415

    job, nodes = allocation(environ)
    specs = []
    for name, addr in nodes:
        spec = node_spec(name, variables)
        exp = spec.expect
        # The rendezvous address is the node's NodeAddr unless the expectations name one.
        specs.append(dataclasses.replace(
            spec, address=addr, expect=dataclasses.replace(
                exp, smoke_address=exp.smoke_address or addr)))
    transports = {s.name: SrunTransport(s, job) for s in specs}

    def probe(spec: HostSpec) -> HostResult:
        facts = probes.collect(transports[spec.name], spec, timeout=probe_timeout)
        return HostResult(name=spec.name, status="ok", facts=facts)

    results = fan_out(specs, probe, progress=False, label="facts")
    members = [(s, transports[s.name], f) for s in specs
               if results[s.name].status == "ok" and (f := results[s.name].facts) is not None]
    names = tuple(s.name for s in specs)
    try:
        smokes = runner.run_multinode(members, level=level, timeout=timeout, force=force)
    except Exception as exc:  # the world failed as a whole: every member says why
        failed = SmokeResult(status="error", level=level, hosts=names,
                             error=f"{type(exc).__name__}: {exc}")
        smokes = dict.fromkeys(names, failed)
    finally:
        for t in transports.values():
            t.close()
    out = {n: dataclasses.replace(r, smoke=smokes.get(n)) if n in smokes else r
           for n, r in results.items()}
    return out, {s.name: s for s in specs}
