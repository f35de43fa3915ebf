"""The kernels installed beside the running one: a host running an older kernel than the newest
it has installed has a security update waiting for a reboot.

Source of the layout: the distributions' kernel packages install `/boot/vmlinuz-RELEASE`, RELEASE
being what `uname -r` prints once it runs (Debian's linux-image-*, Ubuntu's linux-image-*-generic,
RHEL's kernel-core, whose %posttrans copies vmlinuz into /boot); Debian and Ubuntu's
update-notifier-common/unattended-upgrades touch `/var/run/reboot-required` when a package needs
a reboot. probe.sh prints one `vmlinuz RELEASE` line per file, `boot=absent` when /boot cannot be
listed, and `reboot-required` when the flag file exists.
"""

from __future__ import annotations

import re
from typing import Any

from gpufleet.model import KernelsInfo
from gpufleet.probes.sections import Family, ProbeOutput

# A kernel release as uname prints it: no spaces, no shell or path characters.
_LINE = re.compile(r"^vmlinuz ([0-9][0-9A-Za-z._+~-]{0,127})$")
_NUM = re.compile(r"\d+")


def release_key(release: str) -> tuple[tuple[int, ...], str]:
    """Order kernel releases by their numbers ("6.8.0-100-generic" after "6.8.0-45-generic")."""
    return tuple(int(n) for n in _NUM.findall(release)), release


def parse_kernels(text: str) -> KernelsInfo | None:
    """probe.sh's kernels section -> KernelsInfo; None when /boot could not be listed."""
    lines = [line.strip() for line in text.splitlines()]
    if "boot=absent" in lines:
        return None
    found = {m.group(1) for m in map(_LINE.match, lines) if m}
    return KernelsInfo(
        installed=tuple(sorted(found, key=release_key)),
        reboot_required="reboot-required" in lines,
    )


# /proc/sys/kernel/random/boot_id: "a UUID generated once per boot" (the kernel's
# Documentation/admin-guide/sysctl/kernel.rst, "random"; drivers/char/random.c proc_do_uuid
# prints it as 36 lowercase hex-and-dash characters and a newline).
_BOOT_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def parse_boot_id(text: str) -> str | None:
    """The boot id, or None for anything but one UUID line (host output is untrusted)."""
    line = text.strip()
    return line if _BOOT_ID.fullmatch(line) else None


def build_boot_id(out: ProbeOutput) -> dict[str, Any]:
    text = out.ok("boot_id")
    out.fail("boot_id", "boot_id", "cat /proc/sys/kernel/random/boot_id")
    return {"boot_id": None if text is None else parse_boot_id(text)}


BOOT_ID = Family("boot_id", sections=("boot_id",), errors=("boot_id",), fields=("boot_id",),
                 build=build_boot_id)


def build_kernels(out: ProbeOutput) -> dict[str, Any]:
    text = out.ok("kernels")
    return {"kernels": None if text is None else out.safe("kernels", None, parse_kernels, text)}


KERNELS = Family("kernels", sections=("kernels",), errors=("kernels",), fields=("kernels",),
                 build=build_kernels)
