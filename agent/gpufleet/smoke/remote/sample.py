"""What the GPU looked like while a rank measured it: one nvidia-smi sample taken during the load.

The controller names the cause of a slow measurement from this (gpufleet/sku/causes.py): other
processes on the same GPU, active clock event reasons, a power limit below the default, SM
clocks below their maximum, PCIe below its max, MIG/ECC state. Started before the timed loop,
collected after it; a missing or hung nvidia-smi gives {"error": ...}, never an exception.
Fields: `nvidia-smi --help-query-gpu` / `--help-query-compute-apps` (driver 580 names;
clocks_event_reasons.active is the NVML mask that probes/gpus.py THROTTLE_BITS decodes). The
same two queries ran on the lent H200 (driver 580.159.04) under each co-tenant: their real
outputs are in benchmarks/results/2026-12-01-nvidia-h200-k-anchors.json.
"""

from __future__ import annotations

import os
import shutil
import subprocess

GPU_FIELDS = ("uuid", "clocks_event_reasons.active", "clocks.sm", "clocks.max.sm",
              "power.draw", "power.limit", "power.default_limit", "pcie.link.gen.current",
              "pcie.link.gen.max", "pcie.link.width.current", "pcie.link.width.max",
              "mig.mode.current", "memory.used", "memory.total")
APP_FIELDS = ("gpu_uuid", "pid", "process_name", "used_memory")
TIMEOUT_S = 10.0


def start():
    """Start both queries (they run while the caller loads the GPU); None without nvidia-smi."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    procs = []
    for query in ("--query-gpu=" + ",".join(GPU_FIELDS),
                  "--query-compute-apps=" + ",".join(APP_FIELDS)):
        try:
            procs.append(subprocess.Popen([smi, query, "--format=csv,noheader,nounits"],
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True))
        except OSError as e:
            return {"error": str(e)}
    return procs


def parse_rows(text, fields):
    out = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == len(fields):
            out.append(dict(zip(fields, cells, strict=True)))
    return out


def finish(procs, uuid):
    """{"gpu": this GPU's row, "apps": processes on it other than this one, "own_pid"}."""
    if procs is None:
        return {"error": "no sample: nvidia-smi not found, or the load did not run"}
    if isinstance(procs, dict):
        return procs
    texts = []
    for p in procs:
        try:
            text, _err = p.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            return {"error": "nvidia-smi did not answer in %.0f s" % TIMEOUT_S}
        texts.append(text if p.returncode == 0 else "")
    gpus = parse_rows(texts[0], GPU_FIELDS)
    mine = [g for g in gpus if uuid and g["uuid"].lower() == uuid.lower()]
    on_gpu = [a for a in parse_rows(texts[1], APP_FIELDS)
              if uuid and a["gpu_uuid"].lower() == uuid.lower()]
    own = str(os.getpid())
    seen = any(a["pid"] == own for a in on_gpu)
    # In a container nvidia-smi reports host PIDs (or none): this rank is then one of the rows
    # but cannot be told apart (own_pid_seen false); gpufleet/sku/causes.py counts it out.
    others = [a for a in on_gpu if a["pid"] != own]
    return {"gpu": mine[0] if mine else None, "apps": others, "own_pid": os.getpid(),
            "own_pid_seen": seen}
