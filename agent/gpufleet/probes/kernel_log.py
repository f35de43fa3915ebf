"""XID events from the kernel log (pure parser)."""

from __future__ import annotations

import re
from typing import Any

from gpufleet.model import XidEvent
from gpufleet.probes.sections import Family, ProbeOutput

# The driver's own line (NVIDIA/open-gpu-kernel-modules src/nvidia/src/kernel/gpu/rc/kernel_rc.c,
# krcReportXid: "NVRM: Xid (PCI:%04x:%02x:%02x): %d, pid=%s, name=%s, %s"; a MIG GPU adds
# " GPU-I:.." inside the parenthesis). It must be the kernel message's start: a segfault report
# ("comm[pid]: segfault at ... in <file name>[...]", the file name the user's) quotes it later.
_XID = re.compile(r"NVRM: Xid \(PCI:(?P<bus>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})"
                  r"(?:\.[0-7])?(?: [^)]*)?\): (?P<xid>\d+),?\s*(?P<msg>.*)$")
# `dmesg -x` puts "FACILITY:LEVEL: " first (util-linux sys-utils/dmesg.c print_record,
# "%-6s:%-6s: "); user text written to /dev/kmsg is facility "user" (the kernel's devkmsg_write
# gives user space LOG_USER unless it names another non-kern facility).
_FACILITY = re.compile(r"^(?P<fac>[a-z0-9]+) *:[a-z]+ *: ")
_BRACKET = re.compile(r"^(\[\s*[\d.]+\]) ")
_ISO = re.compile(r"^(\d{4}-\d\d-\d\dT\S+) ")
# journalctl -k -o short-iso: "TIME HOST kernel: MESSAGE".
_JOURNAL = re.compile(r"^(\d{4}-\d\d-\d\dT\S+) \S+ kernel: ")
_SKIPPED = re.compile(r"^# skipped: (\d+) not from the driver, (\d+) older than the newest (\d+)$",
                      re.MULTILINE)
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


def _driver_message(line: str, journal: bool) -> tuple[str | None, str] | None:
    """(timestamp, message) of a kernel-facility line, or None for another facility's line."""
    fac = _FACILITY.match(line)
    if fac:
        if fac.group("fac") != "kern":
            return None
        line = line[fac.end():]
    stamp = _JOURNAL.match(line) if journal else _BRACKET.match(line) or _ISO.match(line)
    if stamp:
        return stamp.group(1), line[stamp.end():]
    return None, line


def parse_xid_lines(text: str) -> tuple[XidEvent, ...]:
    """dmesg (-x, plain or --time-format iso) or `journalctl -k -o short-iso` lines -> XidEvents.

    An Xid is a kernel-facility message that itself begins "NVRM: Xid (PCI:…): N"; a line that
    only quotes one (a segfault report naming a user's file, user text in /dev/kmsg) is none.
    timestamp keeps what the log gave: "[ 1843.308145]" (seconds since boot) or an ISO time.
    this_boot is True when probe.sh's `# source:` line says dmesg (the ring buffer of this boot).
    """
    events: list[XidEvent] = []
    # probe.sh's first line names the source; the ring buffer (dmesg) is this boot's only.
    this_boot = True if re.match(r"# source: dmesg\b", text) else None
    journal = text.startswith("# source: journalctl")
    for line in text.splitlines():
        got = _driver_message(line, journal)
        match = _XID.match(got[1]) if got else None
        if got is None or match is None:
            continue
        code, msg = int(match.group("xid")), match.group("msg").strip()
        events.append(XidEvent(
            xid=code,
            timestamp=got[0],
            bus_id=normalize_bus_id(match.group("bus")),
            message=msg,
            this_boot=this_boot,
            nvlink=nvlink_of(code, msg),
        ))
    return tuple(events)


def skipped_lines(text: str) -> str | None:
    """What the log held that is not among the events: lines quoting "NVRM: Xid" that the driver
    did not log (probe.sh's count plus those this parser refused), and driver Xid lines older
    than the newest probe.sh keeps. None when nothing was skipped."""
    said = _SKIPPED.search(text)
    forged, older, keep = (int(g) for g in said.groups()) if said else (0, 0, 0)
    quoted = sum(1 for ln in text.splitlines() if "NVRM: Xid" in ln)
    forged += quoted - len(parse_xid_lines(text))
    parts = []
    if forged:
        parts.append(f"{forged} kernel-log line(s) quoting 'NVRM: Xid' not logged by the NVIDIA "
                     "driver (another facility, or text inside another message) were ignored")
    if older:
        parts.append(f"{older} older Xid line(s) beyond the newest {keep} were not read")
    return "; ".join(parts) or None


def build_xid(out: ProbeOutput) -> dict[str, Any]:
    xids = out.safe("xid", (), parse_xid_lines, out.ok("kernel_log") or "")
    out.fail("xid", "kernel_log", "dmesg")
    # Forged or flushed lines are a fact about the host (GF010 names it), never Xid events.
    skipped = out.safe("xid_skipped", None, skipped_lines, out.ok("kernel_log") or "")
    if skipped:
        out.errors["xid_skipped"] = skipped
    return {"xid_events": xids}


XID = Family("xid", sections=("kernel_log",), errors=("xid", "xid_skipped"), fields=("xid_events",),
             build=build_xid)
