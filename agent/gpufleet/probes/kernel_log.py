"""XID events from the kernel log (pure parser)."""

from __future__ import annotations

import re
from typing import Any

from gpufleet.model import XidEvent
from gpufleet.probes.sections import Family, ProbeOutput

# NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<bus>[^)]*)\): (?P<xid>\d+),?\s*(?P<msg>.*)$")
_BRACKET = re.compile(r"^\s*(\[\s*[\d.]+\])")
_ISO = re.compile(r"^(\d{4}-\d\d-\d\dT\S+)")
# Xid 74's text names the link: "NVLink: fatal error detected on link 14(0x0, 0x0, 0x10000, …)"
# (NVIDIA's layout as NVSentinel documents it, docs/designs/019-workflow-nvlink-err.md "Message
# Format"; the seven registers follow the link id without a space).
_NVLINK = re.compile(r"\blink (\d{1,3})\s*\(")


def nvlink_of(xid: int, message: str) -> int | None:
    """The NVLink an Xid 74 message names, else None (other codes name no link this way)."""
    match = _NVLINK.search(message) if xid == 74 else None
    return int(match.group(1)) if match else None


def normalize_bus_id(raw: str) -> str | None:
    """The kernel's "0000:18:00" (domain:bus:device) -> nvidia-smi's "00000000:18:00.0".

    GPUs are PCI function 0, so Xid bus ids compare directly with Gpu.bus_id.
    """
    parts = raw.strip().split(":")
    if len(parts) != 3 or not all(re.fullmatch(r"[0-9a-fA-F]+", p) for p in parts):
        return raw.strip() or None
    domain, bus, device = parts
    return f"{int(domain, 16):08X}:{int(bus, 16):02X}:{int(device, 16):02X}.0"


def parse_xid_lines(text: str) -> tuple[XidEvent, ...]:
    """dmesg (plain or --time-format iso) or `journalctl -k -o short-iso` lines -> XidEvents.

    timestamp keeps what the log gave: "[ 1843.308145]" (seconds since boot) or an ISO time.
    this_boot is True when probe.sh's `# source:` line says dmesg (the ring buffer of this boot).
    """
    events: list[XidEvent] = []
    # probe.sh's first line names the source; the ring buffer (dmesg) is this boot's only.
    this_boot = True if re.match(r"# source: dmesg\b", text) else None
    for line in text.splitlines():
        match = _XID.search(line)
        if not match:
            continue
        prefix = line[: match.start()]
        stamp = _BRACKET.match(prefix) or _ISO.match(prefix)
        code, msg = int(match.group("xid")), match.group("msg").strip()
        events.append(XidEvent(
            xid=code,
            timestamp=stamp.group(1) if stamp else None,
            bus_id=normalize_bus_id(match.group("bus")),
            message=msg,
            this_boot=this_boot,
            nvlink=nvlink_of(code, msg),
        ))
    return tuple(events)


def build_xid(out: ProbeOutput) -> dict[str, Any]:
    xids = out.safe("xid", (), parse_xid_lines, out.ok("kernel_log") or "")
    out.fail("xid", "kernel_log", "dmesg")
    return {"xid_events": xids}


XID = Family("xid", sections=("kernel_log",), errors=("xid",), fields=("xid_events",),
             build=build_xid)
