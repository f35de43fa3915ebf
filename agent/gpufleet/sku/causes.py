"""The likely cause of a slow GPU, from what was seen during the run (pure).

Evidence, most specific first: the smoke's nvidia-smi sample taken under load (smoke/remote/
sample.py: other processes on the GPU, clock event reasons, power limit vs default, SM clock vs
max, PCIe now vs max, MIG), then the facts collected before the run (GPU processes, throttle
reasons, MIG, PCIe). A healthy H200 under a GEMM loop is SW-power-capped at its default limit
(REFERENCE.md 1xH200 2026-12-01: 693.7 of 700 W, SM 1470 of 1980 MHz): that alone is no cause.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpufleet.model import Facts, Gpu
from gpufleet.probes.gpus import decode_throttle_mask

# Reasons that slow a GPU by themselves (sw_power_cap only with a lowered limit, see above).
SLOWING = {"hw_slowdown": "HW slowdown (power brake or thermal, set by the board)",
           "sw_thermal_slowdown": "SW thermal slowdown (GPU too hot)",
           "hw_thermal_slowdown": "HW thermal slowdown (GPU too hot)",
           "hw_power_brake_slowdown": "HW power brake (external power brake signal)"}
POWER_LIMIT_SLACK = 0.98  # power.limit below this x default is a lowered limit
CLOCK_SLACK = 0.85  # SM clock below this x max with no power cap: clocks held down


def _num(row: Mapping[str, Any], key: str) -> float | None:
    try:
        return float(str(row.get(key, "")).strip())
    except ValueError:
        return None


def foreign(smp: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    """The sample's processes that are not the smoke's own rank. Where the rank's pid was not
    among them (a container's pid namespace) one of them is the rank: only a second counts."""
    apps = list((smp or {}).get("apps") or [])
    if (smp or {}).get("own_pid_seen") is False:
        return apps if len(apps) > 1 else []
    return apps


def _sample_causes(smp: Mapping[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    apps = foreign(smp)
    if apps:
        out.append({"cause": "other_processes",
                    "text": "other process(es) computing on this GPU during the run: " + ", ".join(
                        f"pid {a.get('pid')} {a.get('process_name')} "
                        f"({a.get('used_memory')} MiB)" for a in apps),
                    "processes": apps})
    row = smp.get("gpu") or {}
    if not row:
        return out
    reasons = decode_throttle_mask(row.get("clocks_event_reasons.active"))
    for r in reasons:
        if r in SLOWING:
            out.append({"cause": r, "text": "clock event reason active under load: " + SLOWING[r]})
    limit, default = _num(row, "power.limit"), _num(row, "power.default_limit")
    if limit and default and limit < POWER_LIMIT_SLACK * default:
        out.append({"cause": "power_limit_lowered",
                    "text": f"power limit {limit:g} W below its default {default:g} W "
                            "(`nvidia-smi -q -d POWER`; restore with `nvidia-smi -pl`)",
                    "power_limit_w": limit, "default_limit_w": default})
    sm, sm_max = _num(row, "clocks.sm"), _num(row, "clocks.max.sm")
    if (sm and sm_max and sm < CLOCK_SLACK * sm_max and "sw_power_cap" not in reasons
            and not any(r in SLOWING for r in reasons)):
        why = ("application clocks set" if "applications_clocks_setting" in reasons
               else "locked or application clocks")
        out.append({"cause": "clocks_held",
                    "text": f"SM clock {sm:g} MHz of max {sm_max:g} under load with no power or "
                            f"thermal reason: {why} (`nvidia-smi -q -d CLOCK`; reset with "
                            "`nvidia-smi -rgc` / `-rac`)", "sm_mhz": sm, "max_sm_mhz": sm_max})
    gen, gen_max = _num(row, "pcie.link.gen.current"), _num(row, "pcie.link.gen.max")
    wid, wid_max = _num(row, "pcie.link.width.current"), _num(row, "pcie.link.width.max")
    if (gen and gen_max and gen < gen_max) or (wid and wid_max and wid < wid_max):
        out.append({"cause": "pcie_below_max",
                    "text": f"PCIe Gen{gen:g} x{wid:g} under load, max Gen{gen_max:g} "
                            f"x{wid_max:g}" if gen and wid and gen_max and wid_max else
                            "PCIe link below its max under load"})
    if str(row.get("mig.mode.current", "")).lower() == "enabled":
        out.append({"cause": "mig", "text": "MIG is enabled: the run saw one slice, not the GPU"})
    return out


def _facts_causes(f: Facts, g: Gpu) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    procs = [p for p in f.gpu_processes if g.uuid and p.gpu_uuid == g.uuid]
    if procs:
        out.append({"cause": "other_processes",
                    "text": "process(es) on this GPU when the facts were read: " + ", ".join(
                        f"pid {p.pid} {p.name} ({p.used_memory_mib} MiB)" for p in procs),
                    "processes": [{"pid": p.pid, "process_name": p.name,
                                   "used_memory": p.used_memory_mib} for p in procs]})
    for r in g.throttle_reasons:
        if r in SLOWING:
            out.append({"cause": r, "text": "clock event reason active: " + SLOWING[r]})
    if (g.mig_mode or "").lower() == "enabled":
        out.append({"cause": "mig", "text": "MIG is enabled: the run saw one slice, not the GPU"})
    return out


FIXES = {
    "other_processes": "stop the other process(es) or wait for them: {pids}",
    "hw_slowdown": "check the board's power and cooling: `nvidia-smi -q -d PERFORMANCE,POWER,"
                   "TEMPERATURE`",
    "sw_thermal_slowdown": "check cooling and airflow: `nvidia-smi -q -d TEMPERATURE`",
    "hw_thermal_slowdown": "check cooling and airflow: `nvidia-smi -q -d TEMPERATURE`",
    "hw_power_brake_slowdown": "check the PSU/power-brake signal with the vendor",
    "power_limit_lowered": "restore the default limit: `nvidia-smi -pl {default}`",
    "clocks_held": "reset clocks: `nvidia-smi -rgc` and `nvidia-smi -rac`",
    "pcie_below_max": "reseat the GPU/riser and check BIOS PCIe settings",
    "mig": "disable MIG (`nvidia-smi -mig 0`) or judge the slice, not the GPU",
}


def fix(c: dict[str, Any]) -> str:
    """The command or action for one cause from likely()."""
    pids = ", ".join(f"pid {p.get('pid')}" for p in c.get("processes") or ())
    return FIXES.get(c["cause"], "").format(pids=pids or "?",
                                            default=c.get("default_limit_w", "DEFAULT"))


def likely(f: Facts | None, g: Gpu | None, smp: Mapping[str, Any] | None,
           metric: str) -> list[dict[str, Any]]:
    """Causes for a slow `metric` on GPU g, sampled evidence first, each cause once."""
    found = _sample_causes(smp) if smp and not smp.get("error") else []
    if f is not None and g is not None:
        found += _facts_causes(f, g)
    if metric not in ("h2d_gbps", "d2h_gbps"):
        found = [c for c in found if c["cause"] != "pcie_below_max"]
    seen: set[str] = set()
    out = []
    for c in found:
        if c["cause"] not in seen:
            seen.add(c["cause"])
            out.append(c)
    return out
