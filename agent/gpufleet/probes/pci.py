"""GPUs on the PCI bus as the kernel sees them (sysfs), whether or not the driver enumerates
them: the count a later check compares with nvidia-smi's to tell a node it lost a GPU.

Source of the format: the kernel's sysfs ABI (Documentation/ABI/testing/sysfs-bus-pci) and
drivers/pci/pci-sysfs.c, which print `vendor` and `device` as "0x%04x" and `class` as
"0x%06x" under /sys/bus/pci/devices/DOMAIN:BUS:DEV.FN/. probe.sh keeps vendor 0x10de with
class 0x0300xx (VGA compatible) or 0x0302xx (3D controller) and prints `ADDRESS CLASS DEVICE`
per function, or `sysfs=absent` when there is no /sys/bus/pci/devices (a container, say).
"""

from __future__ import annotations

import re
from typing import Any

from gpufleet.model import PciFunction
from gpufleet.probes.sections import Family, ProbeOutput

_LINE = re.compile(r"^([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]) "
                   r"(0x030[02][0-9a-fA-F]{2})(?: (0x[0-9a-fA-F]{4}))?$")


def parse_pci_gpus(text: str) -> tuple[PciFunction, ...] | None:
    """probe.sh's pci_gpus section -> the functions, by address; None when sysfs was absent.

    A line that is not exactly `ADDRESS CLASS [DEVICE]` is not trusted as a GPU and skipped.
    """
    if "sysfs=absent" in text.splitlines():
        return None
    found = (_LINE.match(line.strip()) for line in text.splitlines())
    return tuple(sorted((PciFunction(m.group(1).lower(), m.group(2).lower(),
                                     m.group(3).lower() if m.group(3) else None)
                         for m in found if m), key=lambda f: f.address))


def build_pci_gpus(out: ProbeOutput) -> dict[str, Any]:
    text = out.ok("pci_gpus")
    return {"pci_gpus": None if text is None else out.safe("pci_gpus", None, parse_pci_gpus,
                                                          text)}


PCI_GPUS = Family("pci_gpus", sections=("pci_gpus",), errors=("pci_gpus",),
                  fields=("pci_gpus",), build=build_pci_gpus)
