"""RDMA ports (InfiniBand, RoCE) and their link rates, as the kernel's sysfs lists them: the
network side of the multinode bandwidth expectation (gpufleet.bandwidth).

Source of the format: torvalds/linux drivers/infiniband/core/sysfs.c `rate_show`, which prints
/sys/class/infiniband/DEVICE/ports/PORT/rate with `"%d%s Gb/sec (%dX%s)\n"` (the `%s` after the
number is ".5" or empty; the last is the speed name with its space), e.g. "400 Gb/sec (4X NDR)",
"2.5 Gb/sec (1X SDR)"; Documentation/ABI/stable/sysfs-class-infiniband lists the file.
probe.sh prints `DEVICE PORT RATE` per port; no line at all when there is no RDMA device.
"""

from __future__ import annotations

import re
from typing import Any

from gpufleet.model import IbPort
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
