"""RDMA ports (InfiniBand, RoCE) and their link rates, as the kernel's sysfs lists them: the
network side of the multinode bandwidth expectation (gpufleet.sku.bandwidth).

Source of the format: torvalds/linux drivers/infiniband/core/sysfs.c `rate_show`, which prints
/sys/class/infiniband/DEVICE/ports/PORT/rate with `"%d%s Gb/sec (%dX%s)\n"` (the `%s` after the
number is ".5" or empty; the last is the speed name with its space), e.g. "400 Gb/sec (4X NDR)",
"2.5 Gb/sec (1X SDR)"; Documentation/ABI/stable/sysfs-class-infiniband lists the file.
probe.sh prints `DEVICE PORT RATE` per port; no line at all when there is no RDMA device.
The ib_links family below reads each port's state, counters, PKeys and RoCE netdev.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from gpufleet.model import IbLink, IbPort
from gpufleet.probes.sections import Family, ProbeOutput

_LINE = re.compile(r"^([A-Za-z0-9_.:-]{1,64}) ([0-9]{1,4}) (\S.{0,63})$")
_GBIT = re.compile(r"^([0-9]+(?:\.[0-9]+)?) Gb/sec\b")


def parse_ib_ports(text: str) -> tuple[IbPort, ...]:
    """probe.sh's ib_ports section -> the ports, by device and port.

    A line that is not `DEVICE PORT RATE` (a device name of sysfs's characters, a port number)
    is host text gpufleet does not trust as a port, and is skipped.
    """
    ports = []
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if not m:
            continue
        rate = m.group(3).strip()
        gbit = _GBIT.match(rate)
        ports.append(IbPort(m.group(1), m.group(2), rate, float(gbit.group(1)) if gbit else None))
    return tuple(sorted(ports, key=lambda p: (p.device, int(p.port))))


def build_ib_ports(out: ProbeOutput) -> dict[str, Any]:
    text = out.ok("ib_ports")
    return {"ib_ports": None if text is None else out.safe("ib_ports", None, parse_ib_ports,
                                                          text)}


IB_PORTS = Family("ib_ports", sections=("ib_ports",), errors=("ib_ports",),
                  fields=("ib_ports",), build=build_ib_ports)


# ---------------------------------------------------------------------------------- ib_links
# Each port's health, from the same sysfs tree. Layout and formats (torvalds/linux@0147ebcf:
# drivers/infiniband/core/sysfs.c, and Documentation/ABI/stable/sysfs-class-infiniband):
# - ports/N/state `"%d: %s"` (state_show: NOP DOWN INIT ARMED ACTIVE ACTIVE_DEFER);
#   phys_state `"%d: %s"` (phys_state_show: Sleep Polling Disabled PortConfigurationTraining
#   LinkUp LinkErrorRecovery "Phy Test"); link_layer "InfiniBand" | "Ethernet" (RoCE);
# - ports/N/counters/*: the PMA PortCounters, one unsigned number each (symbol_error,
#   link_error_recovery, link_downed, port_rcv_errors, …, local_link_integrity_errors,
#   excessive_buffer_overrun_errors, VL15_dropped, port_xmit_data, …), "N/A (no PMA)" when the
#   device has no PMA (show_pma_counter);
# - ports/N/hw_counters/*: the driver's own counters (mlx5: rnr_nak_retry_err,
#   local_ack_timeout_err, out_of_sequence, …; rdma_counter stats), one number each;
# - ports/N/pkeys/I `"0x%04x"` (show_port_pkey; 0x0000 is an empty slot, not printed by the
#   probe); gids/0 `%pI6`; gid_attrs/ndevs/0 the netdev name (print_ndev; RoCE only);
# - /sys/class/net/NETDEV/carrier_changes (Documentation/ABI/testing/sysfs-class-net): how many
#   times the link went up or down since the netdev was created: the RoCE port's flaps.
_PORT = re.compile(r"^port ([A-Za-z0-9_.:-]{1,64}) ([0-9]{1,4})$")
_STATE = re.compile(r"^(state|phys_state) [0-9]{1,3}: ([A-Za-z_ ]{1,40}|<unknown>)$")
_LAYER = re.compile(r"^link_layer (InfiniBand|Ethernet|Unknown)$")
_COUNTER = re.compile(r"^(counter|hw_counter) ([A-Za-z0-9_]{1,64}) ([0-9]{1,20})$")
_PKEY = re.compile(r"^pkey [0-9]{1,5} (0x[0-9a-f]{4})$")
_GID = re.compile(r"^gid0 ([0-9a-f:]{2,39})$")
_NETDEV = re.compile(r"^netdev ([A-Za-z0-9_.:@-]{1,15})$")
_CARRIER = re.compile(r"^carrier_changes ([0-9]{1,12})$")
MAX_COUNTERS = 256  # per port and kind: mlx5 has fewer than 100; more is not sysfs


def parse_ib_links(text: str) -> tuple[IbLink, ...]:
    """probe.sh's ib_links section -> one IbLink per `port DEVICE PORT` block.

    Every line must match its exact shape (host output is untrusted); a line that does not is
    skipped, as is a counter that is not a number ("N/A (no PMA)")."""
    ports: list[dict[str, Any]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if m := _PORT.match(line):
            ports.append({"device": m.group(1), "port": m.group(2), "counters": {},
                          "hw_counters": {}, "pkeys": []})
            continue
        if not ports:
            continue
        cur = ports[-1]
        if m := _STATE.match(line):
            cur[m.group(1)] = m.group(2)
        elif m := _LAYER.match(line):
            cur["link_layer"] = m.group(1)
        elif m := _COUNTER.match(line):
            table = cur["counters" if m.group(1) == "counter" else "hw_counters"]
            if len(table) < MAX_COUNTERS:
                table[m.group(2)] = int(m.group(3))
        elif m := _PKEY.match(line):
            if m.group(1) not in cur["pkeys"] and len(cur["pkeys"]) < MAX_COUNTERS:
                cur["pkeys"].append(m.group(1))
        elif m := _GID.match(line):
            cur["gid0"] = m.group(1)
        elif m := _NETDEV.match(line):
            cur["netdev"] = m.group(1)
        elif (m := _CARRIER.match(line)) and "netdev" in cur:
            cur["carrier_changes"] = int(m.group(1))
    links = [IbLink(**{**p, "pkeys": tuple(sorted(p["pkeys"]))}) for p in ports]
    return tuple(sorted(links, key=lambda p: (p.device, int(p.port))))


# ---------------------------------------------------------------------------------- mlxlink
# `mlxlink -d DEV -c` (NVIDIA MFT / Mellanox/mstflint), text output. Shape from its source,
# Mellanox/mstflint@fc9373e1 mlxlink/modules/mlxlink_commander.cpp (the "Physical Counters and
# BER Info" section: "Effective Physical BER" and "Raw Physical BER" printed as
# `COEF + "E-" + MAGNITUDE`, e.g. "15E-255", the value the firmware gives for no errors) and
# printutil/mlxlink_cmd_print.cpp / mlxlink_record.cpp (a blank line, the title, dashes, then
# `KEY` padded with `: ` to column PDDR_LINE_LEN and the value; a coloured value carries ANSI
# escapes). DeepOps' check_ib_link_ber reads the same line (`cut -d : -f 2`).
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_DEVICE = re.compile(r"^device ([A-Za-z0-9_.:-]{1,64}) rc=([0-9]{1,3})$")
_BER_LINE = re.compile(r"^(Effective|Raw) Physical BER\s*:\s*([0-9]{1,4}E-[0-9]{1,3})\s*$")
MLXLINK_ABSENT = "mlxlink not installed"


def parse_mlxlink(text: str) -> dict[str, dict[str, str]]:
    """probe.sh's mlxlink section -> {device: {"ber"?, "raw_ber"?, "note"?}}; {"*": note} when
    the tool is absent. Only the `> `-prefixed lines under a `device` line are mlxlink's."""
    out: dict[str, dict[str, str]] = {}
    dev: str | None = None
    for raw in text.splitlines():
        if raw.strip() == "mlxlink=absent":
            return {"*": {"note": MLXLINK_ABSENT}}
        if m := _DEVICE.match(raw.strip()):
            dev = m.group(1)
            out[dev] = {"rc": m.group(2)}
            continue
        if dev is None or not raw.startswith("> "):
            continue
        line = _ANSI.sub("", raw[2:]).strip()
        if line:
            out[dev]["last"] = line[:200]
        if b := _BER_LINE.match(line):
            out[dev]["ber" if b.group(1) == "Effective" else "raw_ber"] = b.group(2)
    for got in out.values():
        rc, last = got.pop("rc"), got.pop("last", None)
        if "ber" not in got:
            why = ("mlxlink did not finish in the tool timeout (killed)" if rc in ("124", "137")
                   else f"mlxlink exit {rc}" if rc != "0"
                   else "mlxlink printed no Effective Physical BER")
            got["note"] = f"{why}: {last}" if last else why
    return out


def with_ber(links: tuple[IbLink, ...], mlx: dict[str, dict[str, str]] | None
             ) -> tuple[IbLink, ...]:
    """Each link with its device's BER, or the reason there is none."""
    if mlx is None:
        return links  # an older probe: not asked
    out = []
    for link in links:
        got = mlx.get(link.device) or mlx.get("*")
        if got is None:
            got = {"note": "port not ACTIVE" if link.state != "ACTIVE"
                   else "mlxlink gave nothing for this device"}
        out.append(dataclasses.replace(link, ber=got.get("ber"), raw_ber=got.get("raw_ber"),
                                       ber_note=got.get("note")))
    return tuple(out)


def _links(out: ProbeOutput, text: str) -> tuple[IbLink, ...]:
    mlx = out.ok("mlxlink")
    return with_ber(parse_ib_links(text), None if mlx is None else parse_mlxlink(mlx))


def build_ib_links(out: ProbeOutput) -> dict[str, Any]:
    text = out.ok("ib_links")
    return {"ib_links": None if text is None else out.safe("ib_links", None, _links, out,
                                                          text)}


IB_LINKS = Family("ib_links", sections=("ib_links", "mlxlink"), errors=("ib_links",),
                  fields=("ib_links",), build=build_ib_links)
