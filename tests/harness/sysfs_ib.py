"""A simulated /sys/class/infiniband (+ /sys/class/net) tree, written from a short case file.

Layout and file formats from the kernel, not from a capture (no IB host's sysfs is captured in
this repository): torvalds/linux@0147ebcf8927f09e1923114092f6b14c1de75a95
drivers/infiniband/core/sysfs.c (state_show "%d: %s", phys_state_show "5: LinkUp",
link_layer_show, rate_show "%d%s Gb/sec (%dX%s)", show_pma_counter "%u" per counters/ file,
show_port_pkey "0x%04x" per pkeys/ slot, show_port_gid %pI6, print_ndev for gid_attrs/ndevs),
Documentation/ABI/stable/sysfs-class-infiniband (the hw_counters/ directory, whose names are the
driver's: mlx5's rnr_nak_retry_err, local_ack_timeout_err, out_of_sequence) and
Documentation/ABI/testing/sysfs-class-net (carrier_changes). The values are inferences: an
8-port NDR host (gpud's h100/h200 expectation: 8 ports at 400 Gb/s) unless a case says otherwise.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# The PMA PortCounters the kernel exposes under counters/ (sysfs.c pma_attrs).
PMA = ("symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
       "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors", "port_xmit_discards",
       "port_xmit_constraint_errors", "port_rcv_constraint_errors",
       "local_link_integrity_errors", "excessive_buffer_overrun_errors", "VL15_dropped",
       "port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets")
HW = ("rnr_nak_retry_err", "local_ack_timeout_err", "out_of_sequence", "duplicate_request")
PKEY_SLOTS = 4  # the kernel lists the whole table (often 128); empty slots read 0x0000

DEFAULT: Mapping[str, Any] = {
    "state": "4: ACTIVE", "phys_state": "5: LinkUp", "link_layer": "InfiniBand",
    "rate": "400 Gb/sec (4X NDR)", "counters": {}, "hw_counters": {}, "pkeys": ["0xffff"],
    "gid0": "fe80:0000:0000:0000:0c42:a103:0003:41e0", "netdev": None, "carrier_changes": 0,
}


def merged(base: Mapping[str, Any], change: Mapping[str, Any] | None) -> dict[str, Any]:
    """`base` with `change` applied one level into counters/hw_counters."""
    out = copy.deepcopy(dict(base))
    for key, value in (change or {}).items():
        if key in ("counters", "hw_counters") and isinstance(value, Mapping):
            out[key] = {**out.get(key, {}), **value}
        else:
            out[key] = value
    return out


def write_tree(root: Path, ports: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Write ports ("mlx5_0/1" -> attributes over DEFAULT) under root; the probe's env vars."""
    ib, net = root / "infiniband", root / "net"
    for name, attrs in ports.items():
        port = merged(DEFAULT, attrs)
        dev, num = name.split("/")
        d = ib / dev / "ports" / num
        for sub in ("counters", "hw_counters", "pkeys", "gids", "gid_attrs/ndevs"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        for key in ("state", "phys_state", "link_layer", "rate"):
            (d / key).write_text(f"{port[key]}\n")
        for key in PMA:
            (d / "counters" / key).write_text(f"{port['counters'].get(key, 0)}\n")
        for key in HW:
            (d / "hw_counters" / key).write_text(f"{port['hw_counters'].get(key, 0)}\n")
        keys = list(port["pkeys"]) + ["0x0000"] * PKEY_SLOTS
        for i, key in enumerate(keys[:max(PKEY_SLOTS, len(port["pkeys"]))]):
            (d / "pkeys" / str(i)).write_text(f"{key}\n")
        (d / "gids" / "0").write_text(f"{port['gid0']}\n")
        if port["netdev"]:
            (d / "gid_attrs" / "ndevs" / "0").write_text(f"{port['netdev']}\n")
            (net / port["netdev"]).mkdir(parents=True, exist_ok=True)
            (net / port["netdev"] / "carrier_changes").write_text(f"{port['carrier_changes']}\n")
    return {"GPUFLEET_SYS_CLASS_INFINIBAND": str(ib), "GPUFLEET_SYS_CLASS_NET": str(net)}


def write_gdr(root: Path, modules: Mapping[str, str], peers: Mapping[str, str]) -> dict[str, str]:
    """/sys/module/NAME/version and /sys/kernel/mm/memory_peers/NAME/version under root; the
    probe's env vars. Layout: a module's sysfs directory holds `version` when it declares
    MODULE_VERSION (nvidia_peermem does: NVIDIA/open-gpu-kernel-modules
    kernel-open/nvidia-peermem/nvidia-peermem.c; an in-tree ib_core does not: "" writes none);
    memory_peers/NAME/version is what NVIDIA/nccl@276b2fe4 src/transport/net_ib/gdr.cc reads.
    The values are the case's."""
    mod, mm = root / "module", root / "kernel_mm"
    for name, version in modules.items():
        (mod / name).mkdir(parents=True, exist_ok=True)
        if version:
            (mod / name / "version").write_text(f"{version}\n")
    for name, version in peers.items():
        (mm / "memory_peers" / name).mkdir(parents=True, exist_ok=True)
        (mm / "memory_peers" / name / "version").write_text(f"{version}\n")
    return {"GPUFLEET_SYS_MODULE": str(mod), "GPUFLEET_SYS_KERNEL_MM": str(mm)}


def write_mlxlink(bindir: Path, devices: Mapping[str, Mapping[str, Any]]) -> Path:
    """bin/mlxlink: a stand-in for `mlxlink -d DEV -c` that prints, per device, what the case
    says in mlxlink's text layout (Mellanox/mstflint@fc9373e1: mlxlink_commander.cpp writes the
    "Operational Info" and "Physical Counters and BER Info" sections, the BERs as
    COEF "E-" MAGNITUDE; printutil/mlxlink_cmd_print.cpp a blank line, the title and dashes;
    mlxlink_record.cpp `KEY` then `: ` right-aligned to PDDR_LINE_LEN, 34 in that version).
    A case's `ber` ("15E-255"), `raw` ("3E-10"), `color` (the value in red, ANSI escapes as
    mlxlink's changeColorOS writes them) or `fail` (a message on stderr, exit 1: mlxlink's
    errors go to stderr, "-E- ..." as its MlxRegException messages print; the text is the
    case's). A device the case does not name is an error, as for a device mlxlink cannot open."""
    def rows(title: str, pairs: list[tuple[str, str]]) -> str:
        body = "".join(f"{k}{': ':>{34 - len(k)}}{v}\n" for k, v in pairs)
        return f"\n{title}\n{'-' * len(title)}\n{body}"

    cases = []
    for dev, c in devices.items():
        if c.get("fail"):
            cases.append(f"    {dev}) echo '{c['fail']}' >&2; exit 1 ;;")
            continue
        ber = f"\033[31m{c['ber']}\033[0m" if c.get("color") else c["ber"]
        text = rows("Operational Info", [("State", "Active"), ("Physical state", "LinkUp"),
                                         ("Speed", "IB-NDR"), ("Width", "4x")])
        text += rows("Physical Counters and BER Info", [
            ("Time Since Last Clear [Min]", "1204.6"), ("Effective Physical Errors", "0"),
            ("Raw Physical Errors Per Lane", "0,0,0,0"), ("Effective Physical BER", ber),
            ("Raw Physical BER", c.get("raw", "15E-255")), ("Link Down Counter", "0"),
            ("Link Error Recovery Counter", "0")])
        cases.append(f"    {dev}) cat <<'EOF'\n{text}EOF\n    ;;")
    bindir.mkdir(parents=True, exist_ok=True)
    script = bindir / "mlxlink"
    script.write_text(
        "#!/bin/sh\ndev=; for a in \"$@\"; do [ \"$prev\" = -d ] && dev=$a; prev=$a; done\n"
        "case $dev in\n" + "\n".join(cases) +
        "\n    *) echo \"-E- Failed to open device: $dev\" >&2; exit 1 ;;\nesac\n")
    script.chmod(0o755)
    return bindir
