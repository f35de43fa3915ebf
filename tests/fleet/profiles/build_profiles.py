# ruff: noqa: E501  (captured output lines are long)
"""Build the simulated GPU host profiles from the real 2xH200 capture.

    .venv/bin/python tests/fleet/profiles/build_profiles.py          # rewrite the profiles
    .venv/bin/python tests/fleet/profiles/build_profiles.py --check  # exit 1 if they differ

Every profile starts from tests/fixtures/h200x2-2026-11-30 (real output) and changes only
what its name says; README.md lists the differences. The generated files are committed so
the fleet needs no Python on the simulated hosts; tests/unit/test_profiles.py runs --check.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
CAPTURE = HERE.parent.parent / "fixtures" / "h200x2-2026-11-30"

DRIVER = "580.159.04"
IMAGE = "pytorch/pytorch:2.11.0-cuda13.0-cudnn9-runtime"


def digest(seed: str) -> str:
    return "sha256:" + hashlib.sha256(seed.encode()).hexdigest()


IMAGE_DIGEST = digest("gpufleet simulated image " + IMAGE)
ABSENT_IMAGE = "gpufleet/absent:never"  # the one image ref every simulated docker lacks
OTHER_DIGEST = digest("gpufleet simulated image rebuilt " + IMAGE)
QUERY_FIELDS = (
    "index,name,uuid,pci.bus_id,driver_version,vbios_version,memory.total,persistence_mode,"
    "mig.mode.current,ecc.mode.current,ecc.errors.uncorrected.volatile.total,"
    "ecc.errors.uncorrected.aggregate.total,retired_pages.pending,remapped_rows.pending,"
    "remapped_rows.failure,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,"
    "pcie.link.width.max,clocks_event_reasons.active,compute_cap,serial"
)
APPS_FIELDS = "pid,process_name,used_gpu_memory,gpu_uuid"
APPS_HEADER = "pid, process_name, used_gpu_memory [MiB], gpu_uuid\n"

REPLAY = r"""#!/bin/sh
# Replays captured tool output for a simulated GPU host (see tests/fleet/profiles/README.md).
# Called as `replay TOOL ARGS...` by the bin/TOOL wrappers. .data/TOOL.index has lines
#   RC OUT ERR PATTERN
# the first PATTERN (a sh glob) matching "ARGS" wins: OUT goes to stdout, ERR to stderr
# ("-" = nothing; in *.tmpl files @DATA@ becomes this directory and @REPO@ the last
# argument without its :tag), then exit RC.
# RC "hang" sleeps until killed; RC "real" runs the host's own TOOL instead.
data=$(cd "$(dirname "$0")" && pwd)
tool=$1
shift
args="$*"
last=
for arg in "$@"; do last=$arg; done
repo=$last
case $last in *:*) case ${last##*:} in */*) ;; *) repo=${last%:*} ;; esac ;; esac
show() {
    case $1 in
        -) ;;
        *.tmpl)
            while IFS= read -r line; do
                case $line in
                    *@DATA@*) line="${line%%@DATA@*}$data${line#*@DATA@}" ;;
                esac
                case $line in
                    *@REPO@*) line="${line%%@REPO@*}$repo${line#*@REPO@}" ;;
                esac
                printf '%s\n' "$line"
            done <"$data/$1"
            ;;
        *) cat "$data/$1" ;;
    esac
}
if [ -r "$data/$tool.index" ]; then
    while read -r rc out err pattern; do
        case $rc in '' | '#'*) continue ;; esac
        # shellcheck disable=SC2254  # the pattern is meant to glob
        case $args in
            $pattern)
                show "$out"
                show "$err" >&2
                case $rc in
                    hang) exec sleep 2147483647 ;;
                    real)
                        for dir in /usr/sbin /usr/bin /sbin /bin; do
                            [ -x "$dir/$tool" ] && exec "$dir/$tool" "$@"
                        done
                        echo "$tool: not found" >&2
                        exit 127
                        ;;
                esac
                exit "$rc"
                ;;
        esac
    done <"$data/$tool.index"
fi
echo "$tool (simulated): these arguments are not simulated: $args" >&2
exit 2
"""

WRAPPER = """#!/bin/sh
exec "$(dirname "$0")/.data/replay" {tool} "$@"
"""


@dataclass
class Profile:
    name: str
    about: str
    files: dict[str, str] = field(default_factory=dict)  # .data/NAME -> text
    index: dict[str, list[str]] = field(default_factory=dict)  # tool -> index lines
    links: dict[str, str] = field(default_factory=dict)  # .data/lib/NAME -> target
    proc_version: str | None = None

    def tool(self, tool: str, *lines: str) -> None:
        self.index[tool] = list(lines)


def read(name: str) -> str:
    return (CAPTURE / name).read_text()


# --------------------------------------------------------------------------- the real host


def kernel_log() -> str:
    return "".join(
        line + "\n" for line in read("kernel-log.txt").splitlines() if line.startswith("[")
    )


def ldconfig_text() -> str:
    lines = [line for line in read("ldconfig.txt").splitlines() if "=>" in line]
    out = []
    for line in lines:
        soname = line.split()[0]
        if soname in ("libnccl.so.2", "libnvidia-ml.so.1"):
            line = line.split("=>")[0] + "=> @DATA@/lib/" + soname
        out.append(line)
    return "\n".join(out) + "\n"


def proc_version(version: str, open_module: bool = True) -> str:
    if open_module:
        head = f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {version}  Release Build  (nixbld@)  "
    else:
        head = f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {version}  Tue Sep 30 12:00:00 UTC 2025"
    return head + "\nGCC version:  gcc version 15.3.0 (GCC) \n"


def base_h200x2() -> Profile:
    p = Profile("h200x2", "the real 2xH200 capture, healthy")
    p.files.update(
        {
            "smi.txt": read("nvidia-smi.txt"),
            "L.txt": read("nvidia-smi-L.txt"),
            "q.txt": read("nvidia-smi-q.txt"),
            "topo.txt": read("topo-m.txt"),
            "nvlink-s.txt": read("nvlink-s.txt"),
            "query-gpu.csv": read("query-gpu.csv"),
            "compute-apps.csv": APPS_HEADER,
            "bad-field.txt": read("bad-field.txt").split("\n\nexit")[0].rstrip("\n") + "\n",
            "d-fabric.txt": read("q-d-fabric.txt").split("\nexit")[0] + "\n",
            "invalid.txt": "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n",
            "kernel-log.txt": kernel_log(),
            "ldconfig.tmpl": ldconfig_text(),
            "lspci.txt": "00:06.0 0302: 10de:2335 (rev a1)\n00:07.0 0302: 10de:2335 (rev a1)\n",
            "ctk.txt": "NVIDIA Container Toolkit CLI version 1.19.1\ncommit: 2b6c5ff0c6e7d4cd1a09d1e3a4fa0d5d1c3e1f44\n",
            "containerd.txt": "containerd containerd.io 1.7.27 05044ec0a9a75232cad458027ca83437aae3f4da\n",
            "docker-info.json": (
                '{"ServerVersion":"28.2.2","DefaultRuntime":"nvidia","Runtimes":'
                '{"io.containerd.runc.v2":{"path":"runc"},"nvidia":{"path":"nvidia-container-runtime"},'
                '"runc":{"path":"runc"}}}\n'
            ),
            "digests.tmpl": f'["@REPO@@{IMAGE_DIGEST}"]\n',
            "no-such-image.txt": "Error response from daemon: No such image (simulated host)\n",
        }
    )
    p.links = {
        "libnccl.so.2": "libnccl.so.2.28.3",
        "libnvidia-ml.so.1": f"libnvidia-ml.so.{DRIVER}",
    }
    p.tool(
        "nvidia-smi",
        "0 smi.txt - ",
        "0 L.txt - -L",
        "0 q.txt - -q",
        "0 topo.txt - topo -m",
        "0 nvlink-s.txt - nvlink -s",
        f"0 query-gpu.csv - --query-gpu={QUERY_FIELDS} --format=csv",
        f"0 compute-apps.csv - --query-compute-apps={APPS_FIELDS} --format=csv",
        "2 d-fabric.txt - -q -d FABRIC",
        "2 bad-field.txt - --query-gpu=*",
        "2 invalid.txt - *",
    )
    p.tool("nvidia-ctk", "0 ctk.txt - --version", "0 ctk.txt - -v")
    p.tool(
        "docker",
        "0 docker-info.json - info --format*",
        f"1 - no-such-image.txt image inspect --format* -- {ABSENT_IMAGE}",
        "0 digests.tmpl - image inspect --format*",
        "real - - *",
    )
    p.tool("containerd", "0 containerd.txt - --version", "real - - *")
    p.tool("dmesg", "0 kernel-log.txt - *")
    p.tool("ldconfig", "0 ldconfig.tmpl - -p", "real - - *")
    p.tool("lspci", "0 lspci.txt - -n -d 10de:", "real - - *")
    p.tool("pgrep", "1 - - -x nv-fabricmanager", "real - - *")
    p.proc_version = proc_version(DRIVER)
    return p


# --------------------------------------------------------------------------- text surgery


def q_blocks(text: str) -> tuple[str, list[str]]:
    """Split `nvidia-smi -q` text into the header and one block per GPU."""
    parts = re.split(r"(?m)^(?=GPU [0-9A-F]{8}:)", text)
    return parts[0], parts[1:]


def q_set(block: str, path: tuple[str, ...], value: str) -> str:
    """Set the value of the -q line at PATH (headings then key) inside one GPU block."""
    lines = block.split("\n")
    depth, start = 0, 0
    for i in range(start, len(lines)):
        line = lines[i]
        indent = (len(line) - len(line.lstrip(" "))) // 4
        key = line.strip().split(":")[0].strip()
        if indent == depth + 1 and key == path[depth]:
            if depth == len(path) - 1:
                head = line.split(":")[0]
                lines[i] = f"{head}: {value}"
                return "\n".join(lines)
            depth += 1
    raise KeyError(path)


def q_edit(p: Profile, gpu: int, edits: dict[tuple[str, ...], str]) -> None:
    head, blocks = q_blocks(p.files["q.txt"])
    for path, value in edits.items():
        blocks[gpu] = q_set(blocks[gpu], path, value)
    p.files["q.txt"] = head + "".join(blocks)


def csv_edit(p: Profile, gpu: int, edits: dict[str, str], name: str = "query-gpu.csv") -> None:
    lines = p.files[name].splitlines()
    header = [re.sub(r"\s*\[.*\]$", "", h.strip()) for h in lines[0].split(",")]
    row = [c.strip() for c in lines[1 + gpu].split(",")]
    for key, value in edits.items():
        row[header.index(key)] = value
    lines[1 + gpu] = ", ".join(row)
    p.files[name] = "\n".join(lines) + "\n"


def everywhere(p: Profile, old: str, new: str) -> None:
    for name, text in p.files.items():
        p.files[name] = text.replace(old, new)


# --------------------------------------------------------------------------- 8-GPU HGX host

HGX_BUSES = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")


def hgx_uuid(i: int) -> str:
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"gpufleet-sim-h200x8-gpu{i}"))


def build_h200x8(gpus: tuple[int, ...] = tuple(range(8))) -> Profile:
    """An HGX H200 8-GPU host: NV18 all-to-all through 4 NVSwitches, 8 NICs, fabric manager.

    Built from the real GPU 0 block; `gpus` picks the physical GPUs the driver still sees.
    """
    base = base_h200x2()
    p = replace(base, name="h200x8", about="8-GPU HGX NVSwitch host", files=dict(base.files))
    real_uuid = "GPU-e0ec50b6-f483-68ed-fb7b-ecc8879a76a1"
    real_bus = "00000000:00:06.0"
    head, blocks = q_blocks(p.files["q.txt"])
    template = blocks[0]
    q_out, csv_rows, smi_rows, listing, nvlink = [], [], [], [], []
    csv_lines = p.files["query-gpu.csv"].splitlines()
    smi_lines = p.files["smi.txt"].splitlines()
    smi_gpu = smi_lines[8:12]  # the GPU 0 block of the table (4 lines incl. separator)
    for n, phys in enumerate(gpus):
        bus = f"00000000:{HGX_BUSES[phys]}:00.0"
        serial = str(1654000000000 + phys * 1111)
        block = (
            template.replace(real_uuid, hgx_uuid(phys))
            .replace(real_bus, bus)
            .replace("1653924170558", serial)
        )
        block = q_set(block, ("Minor Number",), str(n))
        block = q_set(block, ("PCI", "Bus"), f"0x{HGX_BUSES[phys]}")
        block = q_set(block, ("PCI", "Device"), "0x00")
        block = q_set(block, ("Platform Info", "Module Id"), str(phys + 1))
        block = q_set(block, ("Board ID",), f"0x{int(HGX_BUSES[phys], 16) << 8:x}")
        q_out.append(block)
        cells = [c.strip() for c in csv_lines[1].split(",")]
        cells[0], cells[2], cells[3], cells[-1] = str(n), hgx_uuid(phys), bus, serial
        csv_rows.append(", ".join(cells))
        smi_rows.extend(
            line.replace("  0  NVIDIA", f"  {n}  NVIDIA").replace(real_bus, bus) for line in smi_gpu
        )
        listing.append(f"GPU {n}: NVIDIA H200 (UUID: {hgx_uuid(phys)})")
        nvlink.append(f"GPU {n}: NVIDIA H200 (UUID: {hgx_uuid(phys)})")
        nvlink.extend(f"\t Link {k}: 26.562 GB/s" for k in range(18))
    head = head.replace(
        "Attached GPUs                                          : 2",
        f"Attached GPUs                                          : {len(gpus)}",
    )
    p.files["q.txt"] = head + "".join(q_out)
    p.files["query-gpu.csv"] = csv_lines[0] + "\n" + "\n".join(csv_rows) + "\n"
    p.files["smi.txt"] = "\n".join(smi_lines[:8] + smi_rows + smi_lines[16:]) + "\n"
    p.files["L.txt"] = "\n".join(listing) + "\n"
    p.files["nvlink-s.txt"] = "\n".join(nvlink) + "\n"
    p.files["topo.txt"] = hgx_topo(len(gpus), gpus)
    p.files["lspci.txt"] = "".join(
        f"{b.lower()}:00.0 0302: 10de:2335 (rev a1)\n" for b in HGX_BUSES
    ) + "".join(f"{b}:00.0 0680: 10de:22a3 (rev a1)\n" for b in ("05", "06", "07", "08"))
    p.files["fm-pid.txt"] = "2345\n"
    p.files["fm-version.txt"] = f"Fabric Manager version is : {DRIVER}\n"
    p.tool("pgrep", "0 fm-pid.txt - -x nv-fabricmanager", "real - - *")
    p.tool("nv-fabricmanager", "0 fm-version.txt - *")
    return p


def hgx_topo(count: int, phys: tuple[int, ...]) -> str:
    """`nvidia-smi topo -m` as an HGX H200 prints it: NV18 between GPUs, one NIC per GPU."""
    gpus = [f"GPU{i}" for i in range(count)]
    nics = [f"NIC{i}" for i in range(8)]
    cols = gpus + nics
    socket = [0 if p < 4 else 1 for p in phys]
    cpu = ("0-55,112-167", "56-111,168-223")

    def nic_link(g: int, n: int) -> str:
        if phys[g] == n:
            return "PIX"
        return "NODE" if socket[g] == (0 if n < 4 else 1) else "SYS"

    out = [
        "\t\x1b[4m" + "\t".join([*cols, "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]) + "\x1b[0m"
    ]
    for g in range(count):
        cells = [" X " if g == h else "NV18" for h in range(count)]
        cells += [nic_link(g, n) for n in range(8)]
        out.append("\t".join([gpus[g], *cells, cpu[socket[g]], str(socket[g]), "", "N/A"]))
    for n in range(8):
        cells = [nic_link(g, n) for g in range(count)]
        cells += [" X " if n == m else ("NODE" if (n < 4) == (m < 4) else "SYS") for m in range(8)]
        out.append("\t".join([nics[n], *cells]))
    legend = read("topo-m.txt").split("Legend:", 1)[1]
    nic_legend = "\n".join(f"  NIC{i}: mlx5_{i}" for i in range(8))
    return (
        "\n".join(out)
        + "\n\nLegend:"
        + legend.rstrip("\n")
        + "\n\nNIC Legend:\n\n"
        + nic_legend
        + "\n\n"
    )


# --------------------------------------------------------------------------- the profiles


def variant(
    name: str, about: str, edit: Callable[[Profile], None], base: Profile | None = None
) -> Profile:
    start = base or base_h200x2()
    p = replace(
        start,
        name=name,
        about=about,
        files=dict(start.files),
        index={k: list(v) for k, v in start.index.items()},
        links=dict(start.links),
    )
    edit(p)
    return p


def drift(p: Profile) -> None:
    everywhere(p, DRIVER, "570.172.08")
    everywhere(p, "CUDA Version: 13.0", "CUDA Version: 12.8")
    p.files["q.txt"] = p.files["q.txt"].replace(
        "CUDA Version                                           : 13.0",
        "CUDA Version                                           : 12.8",
    )
    p.links["libnvidia-ml.so.1"] = "libnvidia-ml.so.570.172.08"
    p.proc_version = proc_version("570.172.08")


def nvml_mismatch(p: Profile) -> None:
    p.files["nvml-mismatch.txt"] = (
        "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.159\n"
    )
    p.tool("nvidia-smi", "18 nvml-mismatch.txt - *")
    p.proc_version = proc_version("580.95.05", open_module=False)


def no_nvidia_smi(p: Profile) -> None:
    for tool in ("nvidia-smi", "nvidia-ctk", "docker", "containerd", "nv-fabricmanager"):
        p.index.pop(tool, None)
    p.files = {
        "kernel-log.txt": "[    0.000000] Linux version 6.1.0-28-amd64 (debian-kernel@lists.debian.org)\n"
        "[    1.234567] e1000e 0000:00:1f.6 eth0: NIC Link is Up 1000 Mbps Full Duplex\n",
        "ldconfig.tmpl": "\tlibc.so.6 (libc6,x86-64) => /lib/x86_64-linux-gnu/libc.so.6\n",
        "lspci.txt": "",
    }
    p.links = {}
    p.proc_version = None


def nvidia_smi_hang(p: Profile) -> None:
    p.tool("nvidia-smi", "hang - - *")


def ecc_remap(p: Profile) -> None:
    csv_edit(
        p,
        1,
        {
            "ecc.errors.uncorrected.volatile.total": "2",
            "ecc.errors.uncorrected.aggregate.total": "7",
            "remapped_rows.pending": "Yes",
            "remapped_rows.failure": "Yes",
        },
    )
    q_edit(
        p,
        1,
        {
            ("ECC Errors", "Volatile", "DRAM Uncorrectable"): "2",
            ("ECC Errors", "Aggregate", "DRAM Uncorrectable"): "7",
            ("Remapped Rows", "Uncorrectable Error"): "7",
            ("Remapped Rows", "Pending"): "Yes",
            ("Remapped Rows", "Remapping Failure Occurred"): "Yes",
        },
    )


XID_LINES = (
    "[ 8123.456789] NVRM: Xid (PCI:0000:00:07): 48, pid=4711, name=python3, An uncorrectable "
    "double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.\n"
    "[ 8123.460012] NVRM: Xid (PCI:0000:00:07): 79, pid='<unknown>', name=<unknown>, "
    "GPU has fallen off the bus.\n"
)


def xid(p: Profile) -> None:
    p.files["kernel-log.txt"] += XID_LINES


def pcie_degraded(p: Profile) -> None:
    csv_edit(p, 1, {"pcie.link.gen.current": "4", "pcie.link.width.current": "8"})
    q_edit(
        p,
        1,
        {
            ("PCI", "GPU Link Info", "PCIe Generation", "Current"): "4",
            ("PCI", "GPU Link Info", "PCIe Generation", "Device Current"): "4",
            ("PCI", "GPU Link Info", "Link Width", "Current"): "8x",
        },
    )


def nvlink_down(p: Profile) -> None:
    lines = p.files["nvlink-s.txt"].splitlines()
    p.files["nvlink-s.txt"] = (
        "\n".join(re.sub(r"Link (3|11): .*", r"Link \1: <inactive>", line) for line in lines) + "\n"
    )
    p.files["topo.txt"] = p.files["topo.txt"].replace("NV18", "NV16")


def persistence_off(p: Profile) -> None:
    for gpu in (0, 1):
        csv_edit(p, gpu, {"persistence_mode": "Disabled"})
        q_edit(p, gpu, {("Persistence Mode",): "Disabled"})
    p.files["smi.txt"] = p.files["smi.txt"].replace(
        "NVIDIA H200                    On  |", "NVIDIA H200                    Off |"
    )


def old_toolkit(p: Profile) -> None:
    p.files["ctk.txt"] = (
        "NVIDIA Container Toolkit CLI version 1.16.1\ncommit: a470818ba7d9166be282cd0039dd2fc9b0a34d73\n"
    )


def wrong_digest(p: Profile) -> None:
    p.files["digests.tmpl"] = f'["@REPO@@{OTHER_DIGEST}"]\n'


def busy(p: Profile) -> None:
    p.files["compute-apps.csv"] = (
        APPS_HEADER + "48213, python3, 81920 MiB, GPU-e0ec50b6-f483-68ed-fb7b-ecc8879a76a1\n"
    )


def fabric_incomplete(p: Profile) -> None:
    head, blocks = q_blocks(p.files["q.txt"])
    blocks = [
        q_set(q_set(b, ("Fabric", "State"), "In Progress"), ("Fabric", "Status"), "N/A")
        for b in blocks
    ]
    p.files["q.txt"] = head + "".join(blocks)
    p.tool("pgrep", "1 - - -x nv-fabricmanager", "real - - *")


def keep(p: Profile) -> None:
    del p


def profiles() -> list[Profile]:
    h200x8 = build_h200x8()
    return [
        variant("h200x2", "the real 2xH200 capture, healthy", keep),
        variant("h200x8", "8-GPU HGX NVSwitch host, healthy", keep, h200x8),
        variant("driver-drift", "h200x2 with driver 570.172.08 / CUDA 12.8", drift),
        variant("nvml-mismatch", "userspace 580.159.04, kernel module 580.95.05", nvml_mismatch),
        variant("no-nvidia-smi", "no NVIDIA tools at all (a CPU box)", no_nvidia_smi),
        variant("nvidia-smi-hang", "nvidia-smi never answers", nvidia_smi_hang),
        variant("ecc-remap", "GPU 1: uncorrected ECC, remapped rows pending and failed", ecc_remap),
        variant("xid", "kernel log with Xid 48 and Xid 79 on GPU 1", xid),
        variant("pcie-degraded", "GPU 1 at PCIe gen 4 x8 (max gen 5 x16)", pcie_degraded),
        variant("nvlink-down", "links 3 and 11 inactive on both GPUs, topo NV16", nvlink_down),
        variant("persistence-off", "persistence mode disabled on both GPUs", persistence_off),
        variant("old-toolkit", "nvidia-ctk 1.16.1", old_toolkit),
        variant("wrong-digest", "the image is present with another digest", wrong_digest),
        variant("busy", "python3 (pid 48213) computing on GPU 0", busy),
        variant(
            "fabric-incomplete",
            "h200x8, fabric In Progress, fabric manager stopped",
            fabric_incomplete,
            h200x8,
        ),
        variant(
            "gpu-missing",
            "h200x8 with 7 GPUs visible (physical GPU 5 gone)",
            keep,
            build_h200x8((0, 1, 2, 3, 4, 6, 7)),
        ),
    ]


# --------------------------------------------------------------------------- writing


def write(p: Profile, root: Path) -> None:
    base = root / p.name
    data = base / "bin" / ".data"
    data.mkdir(parents=True)
    (data / "replay").write_text(REPLAY)
    (data / "replay").chmod(0o755)
    (base / "ABOUT").write_text(p.about + "\n")
    for name, text in sorted(p.files.items()):
        (data / name).write_text(text)
    for tool, lines in sorted(p.index.items()):
        (data / f"{tool}.index").write_text("\n".join(lines) + "\n")
        wrapper = base / "bin" / tool
        wrapper.write_text(WRAPPER.format(tool=tool))
        wrapper.chmod(0o755)
    if p.links:
        (data / "lib").mkdir()
        for link, target in sorted(p.links.items()):
            (data / "lib" / target).write_text("")
            os.symlink(target, data / "lib" / link)
    if p.proc_version is not None:
        (base / "proc_driver_nvidia").mkdir()
        (base / "proc_driver_nvidia" / "version").write_text(p.proc_version)


def snapshot(root: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            out[rel] = "-> " + os.readlink(path)
        elif path.is_file():
            mode = "x" if os.access(path, os.X_OK) else "-"
            out[rel] = mode + path.read_text()
    return out


def build(root: Path) -> None:
    for p in profiles():
        write(p, root)


def main(argv: list[str]) -> int:
    names = [p.name for p in profiles()]
    with tempfile.TemporaryDirectory() as tmp:
        build(Path(tmp))
        fresh = snapshot(Path(tmp))
        if "--check" in argv:
            current: dict[str, str] = {}
            for name in names:
                if (HERE / name).exists():
                    current.update({f"{name}/{k}": v for k, v in snapshot(HERE / name).items()})
            differ = sorted(k for k in set(fresh) | set(current) if fresh.get(k) != current.get(k))
            for key in differ[:20]:
                print(f"differs: {key}", file=sys.stderr)
            return 1 if differ else 0
        for name in names:
            shutil.rmtree(HERE / name, ignore_errors=True)
            shutil.copytree(Path(tmp) / name, HERE / name, symlinks=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
