"""GF4xx: GPU health signals (REFERENCE.md, "Hardware health signals")."""

from __future__ import annotations

from collections.abc import Iterator

from gpufleet.model import Facts, Finding, HostResult
from gpufleet.rules import reference
from gpufleet.rules.base import Ctx, finding
from gpufleet.sku import nvlink_norm

# The ids this module emits (tests/unit/test_rules_plumbing.py holds it to that).
# Xid events and the driver's recovery action: rules/faults.py.
RULES: tuple[str, ...] = ("GF401", "GF402", "GF403", "GF404", "GF407", "GF408", "GF409", "GF410",
                          "GF411", "GF412", "GF414")

_FABRIC_OK = frozenset({"Completed", "N/A", "Not Supported"})


def _below(current: int | None, maximum: int | None) -> bool:
    return current is not None and maximum is not None and current < maximum


def _gpus(h: HostResult, f: Facts) -> Iterator[Finding]:
    name = h.name
    for g in f.gpus:
        ev = {"gpu": g.index, "uuid": g.uuid, "serial": g.serial, "bus_id": g.bus_id,
              "subject": f"gpu{g.index}"}
        if g.ecc_uncorrected_volatile:
            yield finding("GF402", [name],
                          f"{name} GPU {g.index}: {g.ecc_uncorrected_volatile} uncorrected ECC "
                          "errors since the last reset",
                          ev | {"volatile": g.ecc_uncorrected_volatile,
                                "aggregate": g.ecc_uncorrected_aggregate}, gpu=g.index)
        elif g.ecc_uncorrected_aggregate:
            yield finding("GF402", [name],
                          f"{name} GPU {g.index}: {g.ecc_uncorrected_aggregate} uncorrected ECC "
                          "errors in its lifetime (none since the last reset)",
                          ev | {"volatile": 0, "aggregate": g.ecc_uncorrected_aggregate},
                          severity="warning", gpu=g.index)
        if g.remapped_rows_pending or g.retired_pages_pending:
            what = "row remap" if g.remapped_rows_pending else "page retirement"
            yield finding("GF403", [name], f"{name} GPU {g.index}: {what} pending",
                          ev | {"remapped_rows_pending": g.remapped_rows_pending,
                                "retired_pages_pending": g.retired_pages_pending}, gpu=g.index)
        if g.remapped_rows_failed:
            yield finding("GF404", [name], f"{name} GPU {g.index}: row remapping failed",
                          ev, gpu=g.index)
        gen = (g.pcie_gen_current, g.pcie_gen_max)
        width = (g.pcie_width_current, g.pcie_width_max)
        slow_gen, narrow = _below(*gen), _below(*width)
        reasons = g.throttle_reasons  # decoded by the probe (probes/gpus.py THROTTLE_BITS)
        if narrow or slow_gen:
            # An idle GPU may drop its link generation to save power; the width never drops.
            idle_only = not narrow and "gpu_idle" in reasons
            yield finding("GF407", [name],
                          f"{name} GPU {g.index}: PCIe Gen{gen[0]} x{width[0]}, "
                          f"max Gen{gen[1]} x{width[1]}" + (" (idle)" if idle_only else ""),
                          ev | {"gen": list(gen), "width": list(width)},
                          severity="info" if idle_only else None, gpu=g.index)
        bad = sorted(set(reasons) & reference.THROTTLE_BAD)
        if bad:
            yield finding("GF411", [name],
                          f"{name} GPU {g.index}: clocks throttled: {', '.join(bad)}",
                          ev | {"reasons": list(reasons), "mask": g.throttle_mask}, gpu=g.index)


def _settings(name: str, f: Facts, mig_expected: bool) -> Iterator[Finding]:
    """Per-host settings: one finding naming every GPU, not eight findings for one setting."""
    off = [g.index for g in f.gpus if g.persistence_mode is False]
    if off:
        yield finding("GF409", [name], f"{name}: persistence mode off on GPU(s) {_ids(off)}",
                      {"gpus": off}, gpu=_ids(off))
    mig = [g.index for g in f.gpus if (g.mig_mode or "").lower() == "enabled"]
    if mig and not mig_expected:
        yield finding("GF410", [name], f"{name}: MIG enabled on GPU(s) {_ids(mig)}",
                      {"gpus": mig}, gpu=_ids(mig))
    # "N/A" (no ECC memory, e.g. GeForce) parses to None: only a switched-off ECC is a finding.
    no_ecc = [g.index for g in f.gpus if (g.ecc_mode or "").lower() == "disabled"]
    if no_ecc:
        yield finding("GF414", [name], f"{name}: ECC disabled on GPU(s) {_ids(no_ecc)}",
                      {"gpus": no_ecc}, gpu=_ids(no_ecc))


def _ids(indexes: list[int]) -> str:
    return ",".join(str(i) for i in indexes)


def check(ctx: Ctx) -> Iterator[Finding]:
    for h, f in ctx.with_facts():
        name = h.name
        yield from _gpus(h, f)
        yield from _settings(name, f, ctx.expect(name).mig_expected)
        s = h.smoke
        if s is not None and s.device_count is not None and f.gpu_count > 0 and (
            s.device_count < f.gpu_count
        ):
            yield finding("GF401", [name],
                          f"{name}: torch sees {s.device_count} GPU(s), nvidia-smi {f.gpu_count}",
                          {"torch": s.device_count, "nvidia_smi": f.gpu_count})
        for links in f.nvlink:
            down = [lk.link for lk in links.links if not lk.active]
            gpu = next((g for g in f.gpus if g.index == links.gpu_index), None)
            norm = nvlink_norm(gpu.name if gpu else None)
            if norm is not None and len(links.links) - len(down) >= norm.links:
                continue  # built with fewer links (H100 PCIe: 12 of 18, azurehpc#162)
            if down:
                yield finding("GF408", [name],
                              f"{name} GPU {links.gpu_index}: NVLink(s) {down} inactive of "
                              f"{len(links.links)}",
                              {"gpu": links.gpu_index, "inactive": down,
                               "total": len(links.links), "subject": f"gpu{links.gpu_index}"},
                              gpu=links.gpu_index)
        fab = f.fabric
        if fab is not None:
            bad = {i: s for i, s in fab.gpu_states.items() if s not in _FABRIC_OK}
            failed = {i: s for i, s in fab.gpu_status.items() if s not in ("Success", "N/A")}
            stopped = fab.nvswitch_count > 0 and fab.manager_running is False
            if bad or failed or stopped:
                yield finding("GF412", [name],
                              f"{name}: NVSwitch fabric not ready: "
                              + "; ".join(
                                  [f"GPU {i} state {s}" for i, s in sorted(bad.items())]
                                  + [f"GPU {i} status {s}" for i, s in sorted(failed.items())]
                                  + (["nvidia-fabricmanager not running"] if stopped else [])),
                              {"states": {str(k): v for k, v in bad.items()},
                               "status": {str(k): v for k, v in failed.items()},
                               "manager_running": fab.manager_running,
                               "nvswitch_count": fab.nvswitch_count})
