"""GF405/GF406 (Xid events), GF420 (the driver's recovery action), GF421 (a GPU lost from the
driver): what an Xid asks of the node, and whether it is still current.

The verdict per Xid comes from rules/xid.py: the driver's recovery action for that GPU where the
driver reports one, else NVIDIA's Xid catalog. An Xid is current while it is inside the time
window, or, whatever its age, when its effect lasts until a reset or reboot (fell off the bus,
an uncorrectable ECC event, …) and the log it came from is this boot's (the kernel ring buffer):
nothing has reset the node since. The driver's recovery action raises the need (a GPU that asks
for a reset now is current whatever the Xid's age); it does not lower it: an Xid whose own line
(`RST: Yes`, `D-RST: Yes`) or whose catalog bucket asks for a reset or reboot stays current until
a boot, even when the recovery action reads None or is absent (older drivers print None).
Other Xids are cleared by the driver's None.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

from gpufleet.model import Facts, Finding, XidEvent
from gpufleet.rules import xid as xids
from gpufleet.rules.base import Ctx, finding

# The ids this module emits (tests/unit/test_rules_plumbing.py holds it to that).
RULES: tuple[str, ...] = ("GF405", "GF406", "GF420", "GF421")

_UPTIME = re.compile(r"^\[\s*\d+(\.\d+)?\]$")
# The line's reset flag (rules/xid.py LINE_RESET_SOURCE): "RST: Yes" or "D-RST: Yes".
_LINE_RESET = re.compile(r"\bRST:\s*Yes\b", re.IGNORECASE)


def xid_in_window(ev: XidEvent, now: datetime, hours: int = xids.XID_WINDOW_HOURS) -> bool:
    """True when the event is recent. An uptime stamp ("[ 12.3]") is this boot: recent."""
    ts = (ev.timestamp or "").strip()
    if not ts or _UPTIME.match(ts):
        return True
    try:
        when = datetime.fromisoformat(ts.replace("Z", "+00:00").replace(",", "."))
    except ValueError:
        return True
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    ref = now if now.tzinfo else now.replace(tzinfo=timezone.utc)
    return ref - when <= timedelta(hours=hours)


def pci_form(bus_id: str | None) -> str | None:
    """nvidia-smi's "00000000:18:00.0" and sysfs's "0000:18:00.0" -> one comparable form."""
    if not bus_id:
        return None
    parts = bus_id.strip().lower().split(":")
    if len(parts) != 3:
        return bus_id.strip().lower()
    try:
        return f"{int(parts[0], 16):04x}:{parts[1]}:{parts[2]}"
    except ValueError:
        return bus_id.strip().lower()


def check(ctx: Ctx) -> Iterator[Finding]:
    for h, f in ctx.with_facts():
        yield from _recovery(h.name, f)
        yield from _lost(h.name, f)
        yield from _xids(ctx, h.name, f)


def _this_boot(f: Facts, bus: str | None) -> list[int]:
    return sorted({e.xid for e in f.xid_events if pci_form(e.bus_id) == pci_form(bus)})


def _recovery(name: str, f: Facts) -> Iterator[Finding]:
    """GF420: the driver asks for a recovery action on a GPU with no Xid in the log (rotated
    out, or journald without this boot); with Xids, each of them reports it as GF405."""
    index = {pci_form(g.bus_id): g.index for g in f.gpus}
    for r in f.gpu_recovery or ():
        need = xids.RECOVERY_NEED.get(r.action, "unknown")
        if need == "none" or _this_boot(f, r.bus_id):
            continue  # nothing pending, or its Xids carry the driver's verdict (GF405)
        gpu = index.get(pci_form(r.bus_id))
        yield finding(
            "GF420", [name],
            f"{name} GPU {gpu if gpu is not None else r.bus_id}: the driver asks for a recovery "
            f"action: {r.action}",
            {"gpu": gpu, "bus_id": r.bus_id, "recovery_action": r.action, "raw": r.raw,
             "need": need, "decided_by": "driver recovery action",
             "source": xids.RECOVERY_SOURCE, "subject": f"gpu{gpu}"},
            severity=xids.NEED_SEVERITY[need], gpu=gpu if gpu is not None else "?",
            fix=xids.NEED_FIX[need])


def _lost(name: str, f: Facts) -> Iterator[Finding]:
    """GF421: NVIDIA GPUs on the PCI bus the driver does not enumerate (only when it answered)."""
    if not f.pci_gpus or "nvidia_smi" in f.errors or "gpus" in f.errors:
        return
    seen = {pci_form(g.bus_id) for g in f.gpus}
    missing = [p.address for p in f.pci_gpus if pci_form(p.address) not in seen]
    if not missing:
        return
    evidence_xids = {a: _this_boot(f, a) for a in missing}
    told = "; ".join(f"{a}: Xid {', '.join(map(str, x))}" for a, x in evidence_xids.items() if x)
    yield finding(
        "GF421", [name],
        f"{name}: {len(f.pci_gpus)} NVIDIA GPU(s) on the PCI bus, the driver enumerates "
        f"{len(f.gpus)}; missing {', '.join(missing)}" + (f" ({told})" if told else ""),
        {"pci": len(f.pci_gpus), "enumerated": len(f.gpus), "missing": missing,
         "xids": evidence_xids, "source": "sysfs /sys/bus/pci/devices vs nvidia-smi"},
        bus=",".join(missing))


def _lasting_verdict(code: int, events: list[XidEvent]) -> xids.Verdict | None:
    """The verdict of an Xid that lasts until a reset: its catalog bucket's, else its own line's
    reset flag; None for an Xid that does not last."""
    catalog = xids.verdict(code)
    if catalog.need in xids.LASTING:
        return catalog
    if any(_LINE_RESET.search(e.message) for e in events):
        return xids.Verdict("reset", "the Xid's own line", xids.LINE_RESET_SOURCE, "RST: Yes")
    return None


def _xids(ctx: Ctx, name: str, f: Facts) -> Iterator[Finding]:
    """One finding per Xid and GPU: a flapping GPU logs the same Xid hundreds of times."""
    recovery = {pci_form(r.bus_id): r.action for r in f.gpu_recovery or ()}
    groups: dict[tuple[int, str | None], list[XidEvent]] = defaultdict(list)
    for ev in f.xid_events:
        groups[(ev.xid, ev.bus_id)].append(ev)
    for (code, bus), events in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        last = events[-1]
        v = xids.verdict(code, recovery.get(pci_form(bus)))
        recent = any(xid_in_window(e, ctx.now) for e in events)
        if not (v.decided_by == "driver recovery action" and v.need != "none"):
            # The driver asks for nothing (None) or says nothing: the Xid's own line and the
            # catalog still say whether it lasts until a reset.
            v = _lasting_verdict(code, events) or v
        lasting = v.need in xids.LASTING and last.this_boot is True
        # The driver's recovery action other than None is the GPU's state now, whatever the
        # Xid's age; a lasting Xid is current while this boot's log holds it.
        if v.decided_by == "driver recovery action":
            current = v.need != "none"
        else:
            current = recent or lasting
        info = xids.catalog().get(code)
        act = current and v.severity != "info"
        times = f" x{len(events)}, last" if len(events) > 1 else ""
        why = ("" if recent or not current else
               " (older than the window, but it lasts until a reset and this boot logged it)")
        if v.decided_by == "driver recovery action":
            why = f" (the driver's recovery action for the GPU now: {v.bucket})"
        elif not current:
            why = " (outside the window)"
        yield finding(
            "GF405" if act else "GF406", [name],
            f"{name}: Xid {code} on {bus or '?'}{times} at {last.timestamp or '?'}{why}: "
            f"{last.message}",
            {"xid": code, "bus_id": bus, "count": len(events), "first": events[0].timestamp,
             "last": last.timestamp, "message": last.message, "recent": recent,
             "lasting": lasting, "this_boot": last.this_boot,
             "window_hours": xids.XID_WINDOW_HOURS, "need": v.need, "decided_by": v.decided_by,
             "bucket": v.bucket, "investigatory": info.investigatory if info else None,
             "mnemonic": info.mnemonic if info else None, "source": v.source,
             "subject": f"xid{code}@{bus}"},
            severity=v.severity if act else "info",
            hint=f"Xid {code} ({info.description if info else 'not in the catalog'}"
            + (f"; the driver asks for {v.bucket}" if v.decided_by == "driver recovery action"
               else "; its own line asks for a reset (RST: Yes)"
               if v.decided_by == "the Xid's own line" else "")
            + "): "
            f"{xids.NEED_FIX[v.need]}"
            + (f"; NVIDIA's investigatory action: {info.investigatory}"
               if info and info.investigatory else ""),
        )
