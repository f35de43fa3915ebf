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
from dataclasses import dataclass, field, replace
from pathlib import Path

import tomllib

HERE = Path(__file__).resolve().parent
CAPTURE = HERE.parent.parent / "fixtures" / "h200x2-2026-11-30"
OVERLAYS = HERE / "overlays"

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
# RC "reset" answers like a GPU reset and records it: from then on lines with RC "ifreset:N"
# apply (the host's answers after the reset), skipped before. The record lives in the host's
# own /proc/driver tmpfs (one per simulated host, new on every profile switch). Likewise
# "ifreboot:N" lines apply in a boot after a simulated reboot (the fleet writes $state/reboot,
# tests/fleet/fleetlib.py _boot_steps).
data=$(cd "$(dirname "$0")" && pwd)
state=${GPUFLEET_SIM_STATE:-/proc/driver/gpufleet-sim}
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
        case $rc in
            ifreset:*)
                [ -e "$state/reset" ] || continue
                rc=${rc#ifreset:}
                ;;
            ifreboot:*)
                [ -e "$state/reboot" ] || continue
                rc=${rc#ifreboot:}
                ;;
        esac
        # shellcheck disable=SC2254  # the pattern is meant to glob
        case $args in
            $pattern)
                show "$out"
                show "$err" >&2
                case $rc in
                    hang) exec sleep 2147483647 ;;
                    reset)
                        mkdir -p "$state" && : >"$state/reset" && exit 0
                        echo "$tool (simulated): cannot record the reset in $state" >&2
                        exit 2
                        ;;
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

# nvidia-bug-report.sh as the driver ships it, reduced to what the collect playbook relies on
# (NVIDIA's script from the 390.48 driver package, redistributed in
# sakjain92/Fractional-GPUs@72c86c113d29d41a31371325ab50f119dfd219df:driver/NVIDIA-Linux-x86_64-390.48/nvidia-bug-report.sh):
# `--output-file BASE` writes BASE.gz (gzip when present, ".gz" appended), `--safe-mode` and
# `--extra-system-data` are accepted, any other argument prints the usage and exits 1, a non-root
# caller gets "ERROR: Please run nvidia-bug-report.sh as root." and exit 1, and the log starts
# "Start of NVIDIA bug report log file." with sections separated by a line of underscores and
# "*** FILE" / command headers. The sections here are the profile's own nvidia-smi -q, the NVIDIA
# module version and kernel messages (the real script appends far more).
BUG_REPORT = r"""#!/bin/sh
here=$(dirname "$0")
base=nvidia-bug-report.log
while [ $# -gt 0 ]; do
    case $1 in
        -o | --output-file) [ -n "$2" ] || { echo "usage: nvidia-bug-report.sh [--output-file FILE]"; exit 1; }
            base=$2; shift ;;
        --safe-mode | --extra-system-data) ;;
        *) echo "usage: nvidia-bug-report.sh [--output-file FILE] [--safe-mode]"; exit 1 ;;
    esac
    shift
done
if [ "$(id -u)" -ne 0 ]; then
    echo "ERROR: Please run nvidia-bug-report.sh as root."
    exit 1
fi
log=$base.gz
echo "nvidia-bug-report.sh will now collect information about your system and create the file '$log' in the current directory."
sep=____________________________________________
{
    echo "$sep"; echo
    echo "Start of NVIDIA bug report log file.  Please include this file, along"
    echo "with a detailed description of your problem, when reporting a graphics"
    echo "driver bug."; echo
    echo "nvidia-bug-report.sh Version: simulated (gpufleet test profile)"; echo
    echo "Date: $(date)"; echo "uname: $(uname -a)"; echo
    echo "$sep"; echo; echo "*** /proc/driver/nvidia/version"
    cat /proc/driver/nvidia/version 2>&1; echo
    echo "$sep"; echo; echo "$here/nvidia-smi -q"; echo
    "$here/nvidia-smi" -q 2>&1; echo
    echo "$sep"; echo; echo "Scanning kernel log files for NVIDIA kernel messages:"
    dmesg 2>/dev/null | grep -e NVRM -e nvidia-; echo
} | gzip -c >"$log" || exit 1
echo "complete."
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
    etc: dict[str, str] = field(default_factory=dict)  # files the fleet overlays on /etc
    setenv: dict[str, str] = field(default_factory=dict)  # the ssh session's environment
    boot: list[str] = field(default_factory=list)  # kernels in /boot beside the running one
    # NVIDIA 3D controllers on the simulated PCI bus (sysfs), by address; () = no sysfs tree
    pci: tuple[str, ...] = ()
    sim_reboot: bool = False  # bin/gpufleet-sim-reboot (overlay reboot = "heals" / "persists")

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
        "0 nvlink-e.txt - nvlink -e",
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


# --------------------------------------------------------------------------- overlays


def _subst(value: object) -> object:
    """Placeholders an overlay may use for values this module computes."""
    if isinstance(value, str):
        return (value.replace("@IMAGE_DIGEST@", IMAGE_DIGEST)
                .replace("@OTHER_DIGEST@", OTHER_DIGEST).replace("@DRIVER@", DRIVER))
    if isinstance(value, list):
        return [_subst(v) for v in value]
    if isinstance(value, dict):
        return {k: _subst(v) for k, v in value.items()}
    return value


def _gpus(p: Profile, spec: object) -> list[int]:
    count = len(q_blocks(p.files["q.txt"])[1])
    return list(range(count)) if spec == "all" else [int(g) for g in spec]  # type: ignore[attr-defined]


def _edit(p: Profile, e: dict[str, object]) -> None:
    """One declarative edit (see README.md, "Overlays")."""
    op = e["op"]
    if op == "replace":
        names = list(p.files) if e["file"] == "*" else [str(e["file"])]
        for name in names:
            p.files[name] = p.files[name].replace(str(e["old"]), str(e["new"]))
    elif op == "regex":
        p.files[str(e["file"])] = re.sub(str(e["pattern"]), str(e["repl"]),
                                         p.files[str(e["file"])], flags=re.MULTILINE)
    elif op == "file":
        p.files[str(e["name"])] = str(e["text"])
    elif op == "append":
        p.files[str(e["name"])] += str(e["text"])
    elif op == "clear_files":
        p.files = {}
    elif op == "csv":
        for g in _gpus(p, e["gpus"]):
            csv_edit(p, g, dict(e["set"]))  # type: ignore[call-overload]
    elif op == "q":
        for g in _gpus(p, e["gpus"]):
            q_edit(p, g, {tuple(k.split("/")): str(v)
                          for k, v in dict(e["set"]).items()})  # type: ignore[call-overload]
    elif op == "nvlink":  # one link of one GPU in `nvidia-smi nvlink -s`
        head, _, rest = p.files["nvlink-s.txt"].partition(f"GPU {e['gpu']}:")
        block, nxt, tail = rest.partition("\nGPU ")
        block = re.sub(rf"Link {e['link']}: .*", f"Link {e['link']}: {e['text']}", block)
        p.files["nvlink-s.txt"] = head + f"GPU {e['gpu']}:" + block + nxt + tail
    elif op == "tool":
        p.tool(str(e["tool"]), *[str(x) for x in e["lines"]])  # type: ignore[attr-defined]
    elif op == "drop_tools":
        for tool in e["tools"]:  # type: ignore[attr-defined]
            p.index.pop(str(tool), None)
    elif op == "link":
        p.links[str(e["name"])] = str(e["target"])
    elif op == "clear_links":
        p.links = {}
    elif op == "proc_version":
        version = str(e.get("version", ""))
        p.proc_version = proc_version(version, bool(e.get("open", True))) if version else None
    else:
        raise ValueError(f"{p.name}: unknown overlay op {op!r}")


def from_overlay(path: Path, bases: dict[str, Profile]) -> Profile:
    """A profile = its base (a real capture, or the 8-GPU host built from it) + the overlay."""
    data = _subst(tomllib.loads(path.read_text()))
    assert isinstance(data, dict)
    base_name = str(data.get("base", "h200x2"))
    if "gpus" in data:
        start = build_h200x8(tuple(int(g) for g in data["gpus"]))
    else:
        start = bases[base_name]
    p = replace(start, name=path.stem, about=str(data["about"]), files=dict(start.files),
                index={k: list(v) for k, v in start.index.items()}, links=dict(start.links),
                etc=dict(data.get("etc", {})), setenv=dict(data.get("setenv", {})),
                boot=[str(b) for b in data.get("boot", [])])
    if "pci" in data:  # physical GPUs on the bus, whether or not the driver enumerates them
        buses = HGX_BUSES if base_name == "h200x8" or "gpus" in data else ("06", "07")
        p = replace(p, pci=tuple(f"0000:{buses[int(g)].lower()}:00.0" for g in data["pci"]))
    for e in data.get("edit", []):
        _edit(p, e)
    p.files.setdefault("nvlink-e.txt", nvlink_errors_text(p.files.get("nvlink-s.txt", "")))
    if data.get("reset") == "heals":
        p = heal_on_reset(p, start)
    if data.get("reboot") == "heals":
        p = heal_on_reboot(p, start)
    elif data.get("reboot") == "persists":
        p = replace(p, sim_reboot=True)
    elif "reboot" in data:
        raise ValueError(f"{path.name}: reboot = {data['reboot']!r}: heals or persists")
    return p


# The one point a test replaces a reboot: shutdown's stand-in, given to ansible.builtin.reboot as
# its reboot_command (playbooks/remediate_reboot.yml's remediate_reboot_command). Like `shutdown -r`
# it takes arguments, returns, and then the host goes down: it SIGTERMs PID 1 of the simulated
# host's boot (its sshd, tests/fleet/fleetlib.py _boot_loop), which takes every process of that boot
# with it, and the fleet boots the host again: a new boot id, a fresh /proc/driver (the driver's
# state starts anew), the "ifreboot:" answers. It refuses outside such a boot (PID 1 would be the
# machine's init): the boot writes its PID namespace to $state/pidns. Named so it can never shadow a
# real tool.
SIM_REBOOT = r"""#!/bin/sh
state=${GPUFLEET_SIM_STATE:-/proc/driver/gpufleet-sim}
ns=$(readlink /proc/self/ns/pid)
if [ -z "$ns" ] || [ "$(cat "$state/pidns" 2>/dev/null)" != "$ns" ]; then
    echo "gpufleet-sim-reboot: not inside a simulated host's boot ($state/pidns is not $ns): refused" >&2
    exit 1
fi
# Detached as shutdown's request to init is: a new session (setsid -f forks, so the child is never
# a group leader), SIGHUP ignored. A background child that has not yet left the session dies in
# the hangup when an `ssh -tt` session (Ansible's) ends right after this script, and the host then
# never goes down; so the script returns only once the child has left (it writes $ready first).
ready="$state/reboot-detached.$$"
setsid -f sh -c 'trap "" HUP; : >"$1"; sleep 1; kill -TERM 1' sh "$ready" </dev/null >/dev/null 2>&1
i=0
while [ ! -e "$ready" ]; do
    i=$((i + 1))
    if [ "$i" -gt 100 ]; then echo "gpufleet-sim-reboot: the detached child never started" >&2; exit 1; fi
    sleep 0.05
done
echo "Reboot scheduled (simulated host; arguments: $*)"
"""

# What a reboot changes that the checks read, for a profile with reboot = "heals": the driver and
# the kernel log start anew, so nvidia-smi and dmesg answer as `healthy` (the base) from the boot
# after a reboot on ("ifreboot:" lines). reboot = "persists": the host reboots, nothing heals (the
# GPU asks again in every boot).
HEALED_BY_REBOOT = ("nvidia-smi", "dmesg")


def heal_on_reboot(p: Profile, healthy: Profile) -> Profile:
    """After a simulated reboot, nvidia-smi and dmesg answer as `healthy` (the base)."""
    files, index = dict(p.files), {k: list(v) for k, v in p.index.items()}
    for tool in HEALED_BY_REBOOT:
        healed = []
        for line in healthy.index[tool]:
            rc, out, err, pattern = [*line.split(" ", 3), ""][:4]
            if out != "-":
                files[f"rebooted-{out}"] = healthy.files.get(out, p.files[out])
                out = f"rebooted-{out}"
            healed.append(f"ifreboot:{rc} {out} {err} {pattern}")
        index[tool] = healed + index[tool]
    return replace(p, files=files, index=index, sim_reboot=True)


def heal_on_reset(p: Profile, healthy: Profile) -> Profile:
    """`nvidia-smi -r -i N` answers as nvidia-smi does and, from then on, nvidia-smi answers as
    `healthy` (the base: what the GPU reports once the reset cleared the fault).

    Output line: "GPU 00000000:14:00.0  was successfully reset." (a public capture of
    `nvidia-smi -r` on an 8-GPU host, two spaces as printed); one line for the reset GPU.
    """
    files, index = dict(p.files), {k: list(v) for k, v in p.index.items()}
    _head, blocks = q_blocks(healthy.files["q.txt"])
    resets = []
    for n, block in enumerate(blocks):
        bus = block.split()[1]
        files[f"reset-{n}.txt"] = f"GPU {bus}  was successfully reset.\n"
        resets += [f"reset reset-{n}.txt - -r -i {n}", f"reset reset-{n}.txt - -i {n} -r",
                   f"reset reset-{n}.txt - --gpu-reset -i {n}"]
    healed = []
    for line in healthy.index["nvidia-smi"]:
        rc, out, err, pattern = [*line.split(" ", 3), ""][:4]
        if out != "-":
            files[f"healed-{out}"] = healthy.files.get(out, p.files[out])
            out = f"healed-{out}"
        healed.append(f"ifreset:{rc} {out} {err} {pattern}")
    index["nvidia-smi"] = resets + healed + index["nvidia-smi"]
    return replace(p, files=files, index=index)


def nvlink_errors_text(status: str) -> str:
    """`nvidia-smi nvlink -e` for the links `nvlink -s` lists, every counter 0. The format is a
    third-party H100 capture (stas00/ml-engineering@62d4359e compute/accelerator/nvidia/
    debug.md); no `-e` was captured on the 2xH200, so the zero counts are an inference."""
    out = []
    for line in status.splitlines():
        if line.startswith("GPU "):
            out.append(line)
        elif (m := re.match(r"\s*Link ([0-9]+):", line)) is not None:
            out += [f"\t Link {m.group(1)}: {k} Errors: 0" for k in ("Replay", "Recovery", "CRC")]
    return "\n".join(out) + "\n" if out else ""


def profiles() -> list[Profile]:
    bases = {"h200x2": base_h200x2(), "h200x8": build_h200x8()}
    return [from_overlay(path, bases) for path in sorted(OVERLAYS.glob("*.toml"))]


# --------------------------------------------------------------------------- writing


def write(p: Profile, root: Path) -> None:
    base = root / p.name
    data = base / "bin" / ".data"
    data.mkdir(parents=True)
    (data / "replay").write_text(REPLAY)
    (data / "replay").chmod(0o755)
    (base / "ABOUT").write_text(p.about + "\n")
    # One boot per profile: the kernel draws a random UUID per boot (drivers/char/random.c);
    # here a fixed one per name (inference: any UUID is as real as another), read through
    # GPUFLEET_BOOT_ID so the goldens never hold this machine's boot.
    (base / "boot_id").write_text(f"{uuid.uuid5(uuid.NAMESPACE_URL, 'gpufleet:' + p.name)}\n")
    for name, text in sorted(p.files.items()):
        (data / name).write_text(text)
    for tool, lines in sorted(p.index.items()):
        (data / f"{tool}.index").write_text("\n".join(lines) + "\n")
        wrapper = base / "bin" / tool
        wrapper.write_text(WRAPPER.format(tool=tool))
        wrapper.chmod(0o755)
    if p.sim_reboot:
        (base / "bin" / "gpufleet-sim-reboot").write_text(SIM_REBOOT)
        (base / "bin" / "gpufleet-sim-reboot").chmod(0o755)
    if "nvidia-smi" in p.index:  # the driver package ships the bug report script beside it
        (base / "bin" / "nvidia-bug-report.sh").write_text(BUG_REPORT)
        (base / "bin" / "nvidia-bug-report.sh").chmod(0o755)
    if p.links:
        (data / "lib").mkdir()
        for link, target in sorted(p.links.items()):
            (data / "lib" / target).write_text("")
            os.symlink(target, data / "lib" / link)
    if p.proc_version is not None:
        (base / "proc_driver_nvidia").mkdir()
        (base / "proc_driver_nvidia" / "version").write_text(p.proc_version)
    if p.etc:
        (base / "etc").mkdir()
        for name, text in sorted(p.etc.items()):
            (base / "etc" / name).write_text(text)
    if p.boot:
        (base / "boot").mkdir()
        for release in p.boot:
            (base / "boot" / f"vmlinuz-{release}").write_text("")
    for address in p.pci:
        # The sysfs ABI's format (drivers/pci/pci-sysfs.c: "0x%04x\n", class "0x%06x\n");
        # device 0x2335: the capture's H200 (nvidia-smi -q "Device Id : 0x233510DE").
        dev = base / "sys_bus_pci_devices" / address
        dev.mkdir(parents=True)
        for attr, value in (("vendor", "0x10de"), ("class", "0x030200"), ("device", "0x2335")):
            (dev / attr).write_text(value + "\n")
    if p.setenv:
        (base / "sshd_setenv").write_text("".join(f"{k}={v}\n" for k, v in sorted(p.setenv.items())))


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


def _fingerprint() -> str:
    h = hashlib.sha256()
    for path in [Path(__file__), *sorted(OVERLAYS.glob("*.toml")), *sorted(CAPTURE.iterdir())]:
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def ensure_built(cache: Path | None = None) -> Path:
    """The built profiles tree for the current overlays and capture (built once, then reused).

    Built into a temporary sibling and renamed into place, so concurrent callers never see a
    half-written tree.
    """
    cache = cache or Path(os.environ.get("GPUFLEET_PROFILE_CACHE", "/tmp/gpufleet-profiles"))
    target = cache / _fingerprint()
    if target.is_dir():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=cache))
    try:
        build(tmp)
        try:
            tmp.rename(target)
        except OSError:  # another process finished first: use its tree
            shutil.rmtree(tmp, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def main(argv: list[str]) -> int:
    if argv and argv[0] not in ("--check",):
        out = Path(argv[0])
        build(out)
        print(out)
        return 0
    print(ensure_built())  # --check / no argument: every overlay applies cleanly
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
