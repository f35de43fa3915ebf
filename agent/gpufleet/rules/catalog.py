"""Every rule id, its usual severity, title and remediation template. Ids never change meaning.

Families: GF0xx host state, GF1xx desired state (inventory variables), GF2xx peer drift,
GF3xx compatibility, GF4xx hardware health, GF5xx performance, GF6xx smoke test,
GF8xx workspace containers.
Templates are `str.format` strings; `{host}` is the Ansible limit (comma-joined host names).
docs/rules.md is generated from this table and scripts/rules_doc.md.in: after an edit run
`python scripts/rules_doc.py` (tests/unit/test_rules_docs.py fails while the page is stale).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpufleet.model import Severity


@dataclass(frozen=True)
class RuleInfo:
    id: str
    severity: Severity  # usual severity; a rule may report lower where its meaning says so
    title: str
    remediation: str
    # When it fires, for docs/rules.md (generated from this table: scripts/rules_doc.py).
    meaning: str = ""
    # What docs/rules.md shows in place of the remediation's per-finding values ({fix}, {hint}).
    doc_fill: Mapping[str, str] = field(default_factory=dict)

    @property
    def family(self) -> str:
        return FAMILIES[self.id[:3] + "xx"]


FAMILIES: Mapping[str, str] = {
    "GF0xx": "host state",
    "GF1xx": "desired state",
    "GF2xx": "peer drift",
    "GF3xx": "compatibility",
    "GF4xx": "hardware",
    "GF5xx": "performance",
    "GF6xx": "smoke",
    "GF7xx": "configuration",
    "GF8xx": "workspaces",
    "GF9xx": "node-local (Slurm)",
}

_SITE = "ansible-playbook playbooks/site.yml"
# -i: the inventory the check ran on; an exact nvidia_driver_version there wins over a branch,
# so moving to a branch clears it on the command line.
_UPGRADE = "ansible-playbook -i INVENTORY gpufleet.gpu.upgrade_driver -l {host}"
_WS = _SITE + " --tags pytorch_workspace -l {host}"
_DRIFT = (
    "align {host} with the majority ({majority}): pin the variable in group_vars, then run "
    "`" + _SITE + " --tags {tag} -l {host}`"
)

_RERUN = " (on {host}); then rerun `gpufleet smoke -l {host} --level full`"

_RULES: tuple[RuleInfo, ...] = (
    # ---------------------------------------------------------------- GF0xx host state
    RuleInfo("GF001", "error", "host unreachable",
             "check that {host} is up and sshd listens: `ssh -v {address}`; "
             "fix ansible_host/ansible_port in the inventory if they are wrong",
             meaning="No TCP connection or SSH banner (refused, no route, DNS). Nothing else is "
                     "judged for the host."),
    RuleInfo("GF002", "error", "SSH authentication failed",
             "check ansible_user and the key for {host}: `ssh -i KEY USER@{address}`; "
             "install the key with ssh-copy-id",
             meaning="The server rejected every key/user offered."),
    RuleInfo("GF003", "error", "SSH host key mismatch",
             "verify the new host key of {host} out of band, then `ssh-keygen -R {address}` and "
             "reconnect; never turn host key checking off",
             meaning="The host key differs from known_hosts (strict checking is the default)."),
    RuleInfo("GF004", "error", "host timed out",
             "a command hung on {host}: run `timeout 10 nvidia-smi` there and look for XIDs in "
             "`dmesg`; raise the timeout only if the host is merely slow",
             meaning="The connection or a probe ran past its timeout (often a hung `nvidia-smi`)."),
    RuleInfo("GF005", "warning", "host busy",
             "GPUs of {host} are in use by other processes (`nvidia-smi --query-compute-apps="
             "pid,name --format=csv`); drain the host in the scheduler and rerun",
             meaning="The host's GPUs run other processes (host status `busy` or smoke status "
                     "`busy`); the smoke test was skipped so as not to disturb them. Evidence "
                     "lists the processes."),
    RuleInfo("GF006", "error", "host check failed",
             "read the error for {host}; rerun `gpufleet check -l {host} -f 1` and watch stderr",
             meaning="Any other failure while checking the host; the error text says what."),
    RuleInfo("GF007", "warning", "reboot pending: a newer kernel is installed",
             "drain {host} in the scheduler, then reboot it: "
             "`ansible {host} -b -m ansible.builtin.reboot`; gpufleet check it again before "
             "resuming",
             meaning="The running kernel (`uname -r`) is older than the newest "
                     "`/boot/vmlinuz-RELEASE`, or `/var/run/reboot-required` exists: kernel "
                     "security fixes are installed but not running. Evidence: running, newest, "
                     "installed."),
    RuleInfo("GF010", "info", "fact not collected", "{hint}",
             meaning="A fact family could not be read (`Facts.errors`); facts from it are unknown."
                     " Info when the tool is missing (the rules that need the fact say what is "
                     "wrong); **warning** when it hung or timed out."),
    RuleInfo("GF011", "error", "temporary directory full",
             "free space in {path} on {host} (`df -h {path}`; remove stale files, or give the "
             "probe and smoke another TMPDIR), then rerun `gpufleet check -l {host}`",
             meaning="A file written in the host's temporary directory ($TMPDIR or /tmp) kept "
                     "no content (no space left, ENOSPC): the probe went on in /dev/shm or "
                     "$HOME where it could, and the smoke test, which needs ~1 MiB in /tmp, "
                     "cannot run. Evidence: the path, its free bytes, where the probe went."),
    # ---------------------------------------------------------------- GF1xx desired state
    RuleInfo("GF101", "error", "driver version differs from nvidia_driver_version",
             _UPGRADE + " -e nvidia_driver_version={expected}",
             meaning="`nvidia_driver_version` is set and the userspace driver differs (or is "
                     "missing)."),
    RuleInfo("GF102", "error", "driver branch differs from nvidia_driver_branch",
             _UPGRADE + " -e nvidia_driver_branch={expected}",
             meaning="`nvidia_driver_branch` is set (and no exact version) and the driver is on "
                     "another branch."),
    RuleInfo("GF103", "warning", "kernel module flavour differs from nvidia_driver_kernel_modules",
             _UPGRADE + " -e nvidia_driver_kernel_modules={expected}",
             meaning="`nvidia_driver_kernel_modules` is `open` or `proprietary` and the loaded "
                     "module is the other flavour."),
    RuleInfo("GF104", "error",
             "container toolkit version differs from nvidia_container_toolkit_version",
             _SITE + " --tags nvidia_container_toolkit -l {host}",
             meaning="`nvidia_container_toolkit_version` is set and `nvidia-ctk --version` differs"
                     " or the toolkit is missing."),
    RuleInfo("GF105", "error", "image digest differs from pytorch_image_digest",
             _SITE + " --tags pytorch_image -l {host} (pulls {image}@{expected})",
             meaning="`pytorch_image_digest` is set and no local RepoDigest of the image has it."),
    RuleInfo("GF106", "error", "GPU count differs from gpufleet_expected_gpu_count",
             "compare `nvidia-smi -L` with `lspci -d 10de:` on {host} and look for XID 79 in "
             "`dmesg`; reseat or RMA a missing GPU, or correct gpufleet_expected_gpu_count",
             meaning="`gpufleet_expected_gpu_count` is set and `nvidia-smi` lists another number "
                     "of GPUs."),
    RuleInfo("GF107", "error", "container engine from container_runtime_engine missing",
             _SITE + " --tags container_runtime -l {host}",
             meaning="`container_runtime_engine` names docker or containerd and it is not "
                     "installed/running."),
    # ---------------------------------------------------------------- GF2xx peer drift
    RuleInfo("GF201", "warning", "driver version differs from peers",
             _DRIFT.replace("{tag}", "nvidia_driver")
             + "; or " + _UPGRADE + " -e nvidia_driver_version={majority}",
             meaning="No driver expectation set: the userspace driver differs from the majority of"
                     " the host's group and GPU model."),
    RuleInfo("GF202", "warning", "driver CUDA version differs from peers",
             _DRIFT.replace("{tag}", "nvidia_driver"),
             meaning="Same, for the CUDA version the driver supports (`nvidia-smi` header)."),
    RuleInfo("GF203", "warning", "kernel differs from peers",
             "install the majority kernel ({majority}) on {host} and reboot: "
             "`ansible {host} -b -m ansible.builtin.reboot`",
             meaning="Same, for the running kernel (`uname -r`)."),
    RuleInfo("GF204", "warning", "container toolkit version differs from peers",
             _DRIFT.replace("{tag}", "nvidia_container_toolkit"),
             meaning="No toolkit expectation set: NVIDIA Container Toolkit version differs from "
                     "peers (absence counts)."),
    RuleInfo("GF205", "warning", "Docker version differs from peers",
             _DRIFT.replace("{tag}", "container_runtime"),
             meaning="Docker server version differs from peers (absence counts)."),
    RuleInfo("GF206", "warning", "image digest differs from peers",
             "pin pytorch_image_digest for the group, then "
             + _SITE + " --tags pytorch_image -l {host}",
             meaning="No digest expectation set: the image digests present differ from peers."),
    RuleInfo("GF207", "warning", "system NCCL version differs from peers",
             "install the majority libnccl ({majority}) on {host} (apt/dnf pin), or let torch "
             "use its bundled NCCL",
             meaning="System libnccl version (ldconfig) differs from peers."),
    RuleInfo("GF208", "warning", "VBIOS differs from peers",
             "update the VBIOS of {host} to {majority} with the vendor's firmware bundle "
             "(nvfwupd or the OEM tool)",
             meaning="VBIOS version(s) differ from peers."),
    RuleInfo("GF209", "warning", "GPU count differs from peers",
             "compare `nvidia-smi -L` with `lspci -d 10de:` on {host} and look for XID 79 in "
             "`dmesg`; reseat or RMA a missing GPU, or set gpufleet_expected_gpu_count per host",
             meaning="No `gpufleet_expected_gpu_count` set: the number of GPUs nvidia-smi lists "
                     "differs from the majority of the host's group and GPU model (a host that "
                     "lost a GPU). Put hosts of different sizes in different groups or set the "
                     "variable."),
    # ---------------------------------------------------------------- GF3xx compatibility
    RuleInfo("GF301", "error", "CUDA runtime needs a newer driver",
             _UPGRADE + " -e nvidia_driver_branch={branch} -e nvidia_driver_version=''"
             "; or use an image built for CUDA "
             "{driver_cuda} or older",
             meaning="The CUDA runtime the host runs (smoke ranks' `torch.version.cuda`; without a"
                     " smoke run, parsed from the `pytorch_image` tag: `cuda12.8`, `cu130`) needs "
                     "a newer driver than installed (CUDA release notes, Tables 2-3). Error below "
                     "the major's minor-version-compatibility floor; **warning** between the floor"
                     " and the full-feature minimum (minor-version compatibility: runs, but PTX "
                     "newer than the driver cannot JIT); **info** when the smoke test passed "
                     "anyway (forward compatibility through cuda-compat, data-center GPUs only)."),
    RuleInfo("GF302", "warning", "driver branch past end of life",
             _UPGRADE + " -e nvidia_driver_branch={branch} -e nvidia_driver_version=''",
             meaning="The driver branch is past its end of life (R535 June 2026, R470-R575 "
                     "earlier; NVIDIA lifecycle pages). **Info** within 90 days before the date. "
                     "Branches newer than the table are not judged."),
    RuleInfo("GF303", "error", "container toolkit below the security floor",
             _SITE + " --tags nvidia_container_toolkit -l {host} "
             "-e nvidia_container_toolkit_version={fixed}",
             meaning="NVIDIA Container Toolkit below a floor of `rules/security_floors.yaml` "
                     "(NVIDIA's Container Toolkit bulletins): an **error** below a floor that "
                     "fixes a container escape (1.16.2, 1.17.1, 1.17.4, 1.17.8), a **warning** "
                     "below the others (1.17.0, 1.19.1). Evidence lists each bulletin, its date, "
                     "source and CVEs.", doc_fill={"fixed": "FIXED"}),
    RuleInfo("GF304", "error", "NVML driver/library mismatch (kernel module != userspace)",
             "reload the kernel module on {host} (`systemctl stop nvidia-persistenced; "
             "rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia; modprobe nvidia`) or reboot: "
             "`ansible {host} -b -m ansible.builtin.reboot`",
             meaning="`/proc/driver/nvidia/version` (kernel module) differs from the userspace "
                     "driver, or NVML said \"Driver/library version mismatch\": the package was "
                     "upgraded without reloading the module."),
    RuleInfo("GF305", "error", "NCCL versions differ inside a multinode group",
             "NCCL >= 2.23.4 aborts on any version difference: pin the same "
             "pytorch_image_digest (or torch wheel) for every host of {group}, then "
             + _SITE + " --tags pytorch_image -l {host}",
             meaning="The NCCL torch loads differs between hosts of a multinode smoke run (error: "
                     "NCCL >= 2.23.4 aborts on any difference of the full version code) or between"
                     " hosts of one inventory group (**warning**: they cannot run one job "
                     "together)."),
    RuleInfo("GF306", "info", "system libnccl differs from the NCCL torch loads",
             "nothing to do unless jobs LD_PRELOAD the system NCCL; torch uses its bundled one",
             meaning="The system libnccl differs from the NCCL torch loads. Info: torch uses its "
                     "own unless a job preloads the system one."),
    RuleInfo("GF307", "warning", "driver below the security floor of its branch",
             "{fix}",
             meaning="The driver is below the fixed version NVIDIA's GPU Display Driver bulletin "
                     "names for its branch (Linux, data center rows), or runs a branch the newest "
                     "bulletin no longer fixes (move branch). Floors, bulletins and CVEs: "
                     "`rules/security_floors.yaml`; the evidence names each bulletin.",
             doc_fill={"fix": _UPGRADE + " -e nvidia_driver_version=FIXED (same branch), or "
                              "-e nvidia_driver_branch=BRANCH when the branch gets no fix"}),
    RuleInfo("GF308", "error", "runc below the security floor",
             "{fix}",
             meaning="runc (docker info's RuncCommit) below a runc advisory's fixed version for "
                     "its release line: an **error** for container escapes (CVE-2024-21626, "
                     "CVE-2025-31133/52565/52881). **Info** for a distribution build "
                     "(`+ds`, `ubuntu`, `deb`, `el`): distributions backport fixes without "
                     "changing the upstream version, so their security tracker decides.",
             doc_fill={"fix": "upgrade containerd.io/runc on the host to FIXED or later"}),
    RuleInfo("GF309", "error", "Docker Engine below the security floor (AuthZ plugin in use)",
             "{fix}",
             meaning="Docker Engine below a moby advisory's fixed version for its release line, "
                     "judged only when `docker info` lists an authorization plugin (both AuthZ "
                     "bypass advisories affect nobody else): **error** for CVE-2024-41110 "
                     "(CVSS 9.9), **warning** for CVE-2026-34040. **Info** for a distribution "
                     "build.",
             doc_fill={"fix": _SITE + " --tags container_runtime -l {host} (Docker FIXED or "
                              "later)"}),
    RuleInfo("GF310", "info", "image CUDA toolkit below a CUDA Toolkit bulletin",
             "rebuild or re-pin pytorch_image on a CUDA {fixed} base (pytorch_image_digest), then "
             + _SITE + " --tags pytorch_image -l {host}",
             meaning="The pinned image's CUDA_VERSION predates the fix of a CUDA Toolkit "
                     "bulletin. Info: the affected parts are developer tools (cuobjdump, "
                     "nvdisasm, Nsight, nvJPEG), rarely run on a GPU server.",
             doc_fill={"fixed": "FIXED"}),
    # ---------------------------------------------------------------- GF4xx hardware
    RuleInfo("GF401", "error", "torch sees fewer GPUs than nvidia-smi",
             "check CUDA_VISIBLE_DEVICES, `docker run --gpus all` and CDI (`nvidia-ctk cdi list`) "
             "on {host}",
             meaning="The smoke test's `torch.cuda.device_count()` is below the number of GPUs "
                     "`nvidia-smi` lists."),
    RuleInfo("GF402", "error", "uncorrected ECC errors",
             "drain {host}, run `dcgmi diag -r 3`, reset the GPU (`nvidia-smi -r -i {gpu}`); "
             "RMA GPU {gpu} if errors return",
             meaning="Uncorrected ECC errors: volatile (since the last reset) is an error, "
                     "aggregate only (lifetime) a **warning**."),
    RuleInfo("GF403", "error", "row remap or page retirement pending",
             "drain {host} and reset GPU {gpu} (`nvidia-smi -r -i {gpu}`) or reboot to apply "
             "the remap",
             meaning="A row remap (or, on older GPUs, a page retirement) is pending until the GPU "
                     "is reset."),
    RuleInfo("GF404", "error", "row remapping failed",
             "RMA GPU {gpu} of {host}: it has no spare rows left",
             meaning="Row remapping failed: the GPU has no spare rows left."),
    RuleInfo("GF405", "error", "Xid that needs a reset, reboot or inspection, still current",
             "{hint} ({host})",
             meaning="An Xid whose action, by NVIDIA's Xid catalog (immediate resolution bucket; "
                     "`agent/gpufleet/rules/xid_catalog.json`), is a GPU reset, a reboot "
                     "(**error**) or an inspection (**warning**), and that is still current: "
                     "inside the last 24 h (uptime-stamped dmesg lines are this boot), or of any "
                     "age when its effect lasts until a reset or reboot and it is in this boot's "
                     "kernel ring buffer (fell off the bus two days ago and nobody rebooted). "
                     "Where the driver reports the GPU's recovery action (`nvidia-smi -q`) it "
                     "decides instead, whatever the Xid's age: `gpu_reset`, `node_reboot` make "
                     "the Xid current, `none` clears it (GF406). Evidence `decided_by` and "
                     "`source` name which one decided."),
    RuleInfo("GF406", "info", "Xid event (the application's, cleared, or outside the window)",
             "look it up in NVIDIA's Xid catalog (evidence `investigatory`); act if it repeats "
             "on {host} (GF430 counts repeats)",
             meaning="Any other Xid: one NVIDIA's catalog leaves to the application (restart "
                     "it) or ignores, one on a GPU whose driver reports recovery action None "
                     "now, or one outside the window that does not last."),
    RuleInfo("GF407", "warning", "PCIe link below its maximum",
             "reseat GPU {gpu} / its riser on {host} and check the BIOS PCIe settings; "
             "re-read under load with `nvidia-smi -q -d PCIE -i {gpu}`",
             meaning="PCIe link width below its maximum, or generation below its maximum; a "
                     "generation drop on an idle GPU (power saving) is only **info**."),
    RuleInfo("GF408", "error", "NVLink inactive",
             "`nvidia-smi nvlink -s -i {gpu}` on {host}; reset the GPU, check the fabric "
             "manager; RMA the baseboard if links stay down",
             meaning="At least one NVLink of a GPU is inactive."),
    RuleInfo("GF409", "warning", "persistence mode off",
             "`nvidia-smi -pm 1` on {host} (GPUs {gpu}), or enable nvidia-persistenced: "
             + _SITE + " --tags nvidia_driver -l {host}",
             meaning="Persistence mode is off on a GPU."),
    RuleInfo("GF410", "warning", "MIG enabled where not expected",
             "`nvidia-smi -i {gpu} -mig 0` then reset the GPU on {host}, or set "
             "gpufleet_mig_expected: true for the host",
             meaning="MIG mode is enabled and `gpufleet_mig_expected` is not true."),
    RuleInfo("GF411", "warning", "GPU clocks throttled",
             "check cooling and power on {host}: `nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER "
             "-i {gpu}`",
             meaning="Active clock event reasons include HW slowdown, SW/HW thermal slowdown or HW"
                     " power brake (decoded from the NVML mask when the probe gave only the mask)."
                     " Idle, power cap and application clocks are not findings."),
    RuleInfo("GF412", "error", "NVSwitch fabric not completed",
             "`systemctl restart nvidia-fabricmanager` on {host} (its version must equal the "
             "driver's); check `nvidia-smi -q | grep -A2 Fabric`",
             meaning="On an NVSwitch host: a GPU's fabric state is not `Completed` (or its status "
                     "not `Success`), or nvidia-fabricmanager is not running."),
    RuleInfo("GF413", "warning", "NVLink below its SKU's normal speed (downtrained)",
             "`nvidia-smi nvlink -s -i {gpu}` on {host}; reset the GPU "
             "(`nvidia-smi -r -i {gpu}`) and reseat or RMA the baseboard if the speed stays low",
             meaning="An active NVLink runs below the speed its GPU model normally shows in "
                     "`nvidia-smi nvlink -s` (table `SKUS` in `agent/gpufleet/bandwidth.py`: "
                     "26.562 GB/s NVLink4 on H100/H200, 53.125 on B200/GB200, 25 on A100, 25.781 "
                     "on V100). The expectation (GF504) is lowered by the slow link, so bandwidth "
                     "is not reported twice. GF408 (inactive links) likewise counts against the "
                     "SKU's normal link count: an H100 PCIe with 12 of 18 links active is normal "
                     "(Azure/azurehpc-health-checks#162)."),
    RuleInfo("GF414", "warning", "ECC memory protection disabled",
             "`nvidia-smi -i {gpu} -e 1` on {host}, then reset the GPUs (`nvidia-smi -r -i {gpu}`) "
             "or reboot: `ansible {host} -b -m ansible.builtin.reboot`; the mode is pending until "
             "then",
             meaning="`nvidia-smi` reports ECC mode `Disabled` on a GPU that has ECC memory: "
                     "memory errors go undetected and uncorrected (GF402-GF404 cannot see them). "
                     "GPUs without ECC report `N/A` and are not judged."),
    RuleInfo("GF415", "error", "nvidia-smi hung: GPU or driver wedged",
             "drain {host}; read `dmesg | grep -i -e xid -e nvrm` there, then reset the GPU "
             "(`nvidia-smi -r`) or reboot; rerun `gpufleet check -l {host}`",
             meaning="nvidia-smi gave no answer within the probe's tool timeout and was killed. "
                     "NVML hanging with the driver loaded is a wedged GPU or driver (fallen off "
                     "the bus, stuck in a reset): drain-worthy. The smoke test does not start "
                     "there (it cannot count the GPUs; a guessed world size failed phantom "
                     "ranks)."),
    RuleInfo("GF420", "error", "the driver asks for a GPU recovery action",
             "{fix} (GPU {gpu} of {host})",
             meaning="`nvidia-smi -q` \"GPU Recovery Action\" (NVML/DCGM field 1523) is not "
                     "`None`: the driver itself says the GPU needs a reset (`gpu_reset`, "
                     "`drain_and_reset`: **error**), a node reboot (`node_reboot`: **error**) or "
                     "its peer-to-peer traffic drained (`drain_p2p`: **warning**), and no Xid "
                     "on that GPU is in the kernel log (with one, GF405 reports the Xid with "
                     "the driver's verdict). Source: "
                     "docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/"
                     "error-recovery-and-response-flags.html.",
             doc_fill={"fix": "the fix for the action (reset: `nvidia-smi -r -i GPU` after "
                              "draining; reboot: reboot the node)"}),
    RuleInfo("GF421", "error", "a GPU on the PCI bus is not enumerated by the driver",
             "drain {host}; the GPU at {bus} fell off the bus or failed to initialise: reboot "
             "(`ansible {host} -b -m ansible.builtin.reboot`), then reseat or RMA it if it stays "
             "missing",
             meaning="sysfs lists more NVIDIA display/3D controllers (`pci_gpus`) than "
                     "`nvidia-smi` enumerates: the node lost a GPU, told from its own evidence "
                     "(no expected count needed). The evidence names the missing addresses and "
                     "this boot's Xids on them."),
    RuleInfo("GF430", "error", "the same Xid on the same GPU, again and again",
             "drain {host} and open a case with NVIDIA for the GPU at {bus}: collect "
             "`nvidia-bug-report.sh` on it; a reset will not fix "
             "what keeps coming back",
             meaning="Over this run and the saved runs (`--save DIR`): an Xid that needs more "
                     "than an application restart logged on one GPU at least 5 times within "
                     "24 h (NVIDIA NVSentinel's RepeatedXIDErrorOnSameGPU: CONTACT_SUPPORT). Each "
                     "kernel log line counts once however many runs show it."),
    RuleInfo("GF431", "warning", "Xid 13 on the same GPC/TPC, or Xid 31 on the same GPU, repeats",
             "drain {host} and run the deep diagnostic on the GPU at {bus}: `dcgmi diag -r 3` "
             "(or `gpufleet check --level full -l {host}`); RMA it if the unit fails again",
             meaning="Xid 13 (graphics exception) on the same GPC and TPC, or Xid 31 (page fault) "
                     "on the same GPU, at least twice within 24 h: a job's bug moves around, a "
                     "bad SM does not (NVSentinel RepeatedXID13OnSameGPCAndTPC and "
                     "RepeatedXID31OnSameGPU: RUN_DCGMEUD)."),
    RuleInfo("GF432", "error", "the GPU still asks for a reboot after the reboot limit",
             "stop rebooting {host}: drain it, collect `nvidia-bug-report.sh` and send the GPU "
             "at {bus} for inspection/RMA",
             meaning="Over this run and the saved runs: a GPU logged Xids whose catalog action "
                     "is a reboot more than 2 times within 7 days (each distinct event is one "
                     "time it asked; gpud's DefaultRebootThreshold = 2: HARDWARE_INSPECTION)."),
    # GF45x: the RDMA fabric (GF450-GF452 rules/fabric.py; GF455-GF459 rules/fabric_delta.py,
    # with the thresholds and their sources)
    RuleInfo("GF450", "error", "RDMA port down",
             "check the cable, transceiver and switch port of {nic} on {host} (`ibstat {dev} "
             "{port}`, `mlxlink -d {dev}`); keep {host} out of multi-host jobs until it is "
             "ACTIVE/LinkUp",
             meaning="An InfiniBand or RoCE port in /sys/class/infiniband is not `ACTIVE` or "
                     "its physical state is not `LinkUp`: traffic on that rail falls back or "
                     "stops.",
             doc_fill={"nic": "the port", "dev": "DEV", "port": "PORT"}),
    RuleInfo("GF451", "warning", "RDMA port below the rate of its peers",
             "reseat or replace the cable/transceiver of {nic} on {host} and check the switch "
             "port's speed (`mlxlink -d {dev}`): it trained at {rate} Gb/s, its peers at "
             "{expected} Gb/s",
             meaning="A port's rate is below the fastest port of the same link layer on the "
                     "same host (a link that trained at a lower width or speed: HDR on an NDR "
                     "fabric, 2X instead of 4X).",
             doc_fill={"nic": "the port", "dev": "DEV", "rate": "R", "expected": "E"}),
    RuleInfo("GF452", "warning", "PKey differs inside an inventory group",
             "align the partition of {host} with its group {group} (the subnet manager's "
             "partitions.conf, or the SR-IOV/VF PKey): most hosts have {majority}",
             meaning="Hosts in one inventory group whose RDMA ports carry different PKey sets: "
                     "a job across them cannot open queue pairs in one partition (ClusterMAX's "
                     "IB PKey criterion).",
             doc_fill={"group": "GROUP", "majority": "the majority's PKeys"}),
    RuleInfo("GF455", "error", "fatal RDMA counter rose between runs",
             "drain {host} from multi-host jobs; check {nic}'s cable, transceiver and switch "
             "port (`mlxlink -d {dev} -c`, `perfquery`); the counter {counter} rose by {delta}",
             meaning="Between two saved runs a counter NVSentinel treats as fatal rose at all: "
                     "`link_downed`, `local_link_integrity_errors`, "
                     "`excessive_buffer_overrun_errors` or `rnr_nak_retry_err` (Δ>0).",
             doc_fill={"nic": "the port", "dev": "DEV", "counter": "COUNTER", "delta": "N"}),
    RuleInfo("GF456", "error", "RDMA symbol errors above the IBTA rate",
             "replace the cable or transceiver of {nic} on {host} (`mlxlink -d {dev} -c` shows "
             "the BER): {rate} symbol errors/h, threshold {threshold}/h",
             meaning="`symbol_error` rose faster than 120 per hour between two saved runs "
                     "(NVSentinel's symbol_error_fatal: the IBTA bit error rate of 1e-12 at "
                     "line rate).",
             doc_fill={"nic": "the port", "dev": "DEV", "rate": "R", "threshold": "120"}),
    RuleInfo("GF457", "warning", "RDMA error counter rate above its threshold",
             "check {nic} on {host} and its switch port (`perfquery`, `mlxlink -d {dev}`): "
             "{counter} at {rate} {unit}, threshold {threshold} {unit}",
             meaning="The average rate of a non-fatal error counter between two saved runs is "
                     "above NVSentinel's threshold: `link_error_recovery` >5/min, "
                     "`port_rcv_errors` >10/s, `port_xmit_discards` >100/s, "
                     "`local_ack_timeout_err` >1/s.",
             doc_fill={"nic": "the port", "dev": "DEV", "counter": "COUNTER", "rate": "R",
                       "unit": "per s|min", "threshold": "T"}),
    RuleInfo("GF458", "error", "RDMA link flapping",
             "drain {host} from multi-host jobs and check {nic}'s cable and switch port: "
             "{flaps} link losses in {hours} h (threshold {threshold} per 24 h)",
             meaning="A RoCE netdev lost carrier 5 times or more in 24 hours between two saved "
                     "runs (`carrier_changes` counts each loss and each return; Azure's "
                     "check_ib_link_flapping: 5 in 24 h).",
             doc_fill={"nic": "the port", "flaps": "N", "hours": "H", "threshold": "5"}),
    RuleInfo("GF459", "warning", "NVLink error counters rising",
             "watch GPU {gpu} link {link} on {host} ({words}): `nvidia-smi nvlink -e -i {gpu}` "
             "again after load; rising recovery errors or Xid 74 mean drain and reseat or RMA "
             "the GPU/baseboard (`nvidia-smi nvlink -s -i {gpu}`)",
             meaning="Between two saved runs an NVLink's replay, recovery or CRC counter "
                     "(`nvidia-smi nvlink -e`) rose: replays are the link retrying corrupted "
                     "packets, recoveries are the link retraining. Error when recoveries rose. "
                     "Threshold Δ>0, Meta GCM's default of 0 tolerated errors.",
             doc_fill={"gpu": "N", "link": "K", "words": "the counters that rose"}),
    # ---------------------------------------------------------------- GF5xx performance
    RuleInfo("GF501", "error", "bus bandwidth below gpufleet_min_busbw_gbps",
             "check NVLink (`nvidia-smi nvlink -s`), topology (`nvidia-smi topo -m`) and "
             "NCCL_P2P_DISABLE/NCCL_SHM_DISABLE in the environment of {host}; rerun "
             "`gpufleet check --level full -l {host}`",
             meaning="`gpufleet_min_busbw_gbps` is set and the all-reduce busbw at the largest "
                     "message size measured is below it. GF5xx judge GPU (NCCL) runs only, never "
                     "gloo runs on CPU ranks."),
    RuleInfo("GF502", "warning", "bus bandwidth outlier against the fleet",
             "compare {host} with its peers: `nvidia-smi topo -m`, `nvidia-smi nvlink -s`, "
             "NCCL_DEBUG=INFO; rerun `gpufleet check --level full -l {host}`",
             meaning="busbw at the largest size all peers measured is below median - 3 x 1.4826 x "
                     "MAD and at least 10 % below the median of hosts with the same GPU model, "
                     "topology (GPU count and link types) and world size; needs >= 3 hosts."),
    RuleInfo("GF503", "warning", "matmul TFLOP/s outlier against the fleet",
             "check clocks, power limit and throttling of GPU {gpu} on {host}: "
             "`nvidia-smi -q -d PERFORMANCE,CLOCK,POWER -i {gpu}`",
             meaning="A GPU's matmul TFLOP/s is an outlier (same test) among all GPUs of its "
                     "model; needs >= 3 GPUs."),
    RuleInfo("GF504", "error", "bus bandwidth below the expectation from the host's own links",
             "{hint}; rerun `gpufleet check --level full -l {host}`",
             meaning="The smoke test's all-reduce busbw at some size >= 64 MiB is below 80 % of "
                     "what the host's own links should give (docs/smoke.md, \"Expected "
                     "bandwidth\": active NVLinks x speed, NVSwitch or direct, PCIe gen x width, "
                     "NICs for multinode, times ratios calibrated against nccl-tests). Evidence: "
                     "measured, expected, ratio, the link inventory and the calibration used; when "
                     "an NCCL setting that cuts bandwidth is in effect (GF701-GF703) the finding "
                     "names it and its file as the likely cause. A missing measurement fails the "
                     "check.",
             doc_fill={"hint": "remove the named NCCL setting from its file, or check `nvidia-smi "
                               "nvlink -s`, `nvidia-smi topo -m` and NCCL_DEBUG=INFO"}),
    # GF540-GF559: against the SKU catalog (rules/perf.py, gpufleet/sku; docs/expectations.md).
    RuleInfo("GF540", "error", "GEMM TFLOP/s below the SKU's expectation",
             "{hint}; then rerun `gpufleet check --level full -l {host}`",
             meaning="A GPU's GEMM TFLOP/s for some dtype (the quick matmul check's bf16, the "
                     "full level's gemm check per dtype) is below the floor of its SKU's "
                     "expectation: datasheet peak x the arch's measured efficiency ratio "
                     "(skus.json) x 0.85. Evidence: measured, expected, floor, ratio, source, "
                     "and the likely cause from the run's nvidia-smi sample (other processes, "
                     "clock event reasons, power limit below default, clocks held, MIG) and the "
                     "facts. A warning where the SKU's arch has no measured ratio (borrowed).",
             doc_fill={"hint": "the named cause's fix (stop the other process, restore the power "
                               "limit or clocks), else `dcgmi diag -r 3 -i GPU`"}),
    RuleInfo("GF541", "error", "HBM bandwidth below the SKU's expectation",
             "{hint}; then rerun `gpufleet check --level full -l {host}`",
             meaning="The full level's device-local copy (membw, bytes counted once as "
                     "nvbandwidth's device_local_copy) is below its SKU's floor: datasheet HBM "
                     "GB/s x the measured ratio x 0.85. Evidence and causes as GF540.",
             doc_fill={"hint": "the named cause's fix, else `dcgmi diag -r 3 -i GPU` (memory "
                               "bandwidth plugin)"}),
    RuleInfo("GF542", "info", "GPU model not in the SKU catalog: no reference",
             "add the SKU to agent/gpufleet/sku/skus.json with a source per number "
             "(docs/expectations.md, \"Adding a SKU\")",
             meaning="No catalog model matches the GPU's PCI device id or name; gpufleet never "
                     "guesses an expectation from a neighbour, so compute and HBM are judged "
                     "against the fleet (GF503) and the host's history (GF521) only."),
    RuleInfo("GF543", "warning", "another process used the GPU during the smoke run",
             "find the process (`nvidia-smi --query-compute-apps=pid,process_name,used_memory "
             "--format=csv` on {host}) and stop it or wait for it before trusting the numbers",
             meaning="The nvidia-smi sample taken under the full level's GEMM load lists compute "
                     "processes on a GPU other than the smoke's own rank (a run with --force on a "
                     "busy host, or a process that started meanwhile). Evidence: each process's "
                     "pid, name and memory."),
    # GF520-GF529: against the host's own history (rules/history.py), with --save DIR.
    RuleInfo("GF520", "warning", "bus bandwidth drifted below the host's own baseline",
             "{host} lost {drop} of its busbw since its good run of {since}: see what changed with "
             "`gpufleet history --store DIR {host}`, check `nvidia-smi nvlink -s` and "
             "`nvidia-smi topo -m`; rerun `gpufleet check --level full -l {host}`",
             meaning="Needs a run store (`--save DIR`). The all-reduce busbw at the largest size "
                     "this run measured is more than 10 % below the median of the host's own last "
                     "(up to 10) known-good runs measured alike (same backend and world size), "
                     "even when it is above `gpufleet_min_busbw_gbps` and the fleet median. A run "
                     "is known-good for a host when it was reachable, its smoke test passed and no"
                     " warning or error named it. Gloo runs are not judged."),
    RuleInfo("GF521", "warning", "matmul TFLOP/s drifted below the host's own baseline",
             "GPU {gpu} of {host} lost {drop} since its good run of {since}: check clocks, power "
             "and throttling: `nvidia-smi -q -d PERFORMANCE,CLOCK,POWER -i {gpu}`; see "
             "`gpufleet history --store DIR {host}`",
             meaning="As GF520, for each GPU's matmul TFLOP/s against the same GPU in the host's "
                     "known-good runs."),
    # ---------------------------------------------------------------- GF6xx smoke
    RuleInfo("GF601", "error", "smoke check failed",
             "{hint}; rerun `gpufleet smoke -l {host} --level full`",
             meaning="A smoke check failed (versions, device_count, matmul, allreduce_exact, ddp, "
                     "amp, busbw) or the run failed without naming one; evidence holds the check's"
                     " detail and data."),
    RuleInfo("GF602", "error", "smoke test could not run",
             "read the log tail; run `gpufleet smoke -l {host}` and check gpufleet_smoke_runtime "
             "/ gpufleet_smoke_python for the host",
             meaning="The smoke test could not run (status `error`), e.g. torch missing or the "
                     "image not pullable; evidence holds the error and the log tail (secrets "
                     "redacted)."),
    RuleInfo("GF603", "error", "smoke test timed out or ranks hung",
             "rerun with NCCL_DEBUG=INFO; check the firewall between hosts and "
             "gpufleet_smoke_interface (NCCL_SOCKET_IFNAME) for {host}",
             meaning="The smoke test timed out (status `timeout`: the host-side deadline or the "
                     "controller's timeout really fired, recorded by the launch wrapper) or the "
                     "launcher's watchdog ended the world because ranks hung or were stopped "
                     "(status `error` with `hung_ranks`). Evidence `causes` holds each rank's exit"
                     " (code or signal, OOM-killer hint), last phase and collective, the watchdog "
                     "verdict, new XID lines and the deadline record (docs/smoke.md, \"Failure "
                     "causes\")."),
    # GF62x: the transport the smoke world really used (rules/fabric.py)
    RuleInfo("GF620", "error", "multinode world fell back to sockets",
             "make the HCAs reach the ranks on {host} ({cause}); then rerun `gpufleet smoke "
             "--multinode -l {host}` and check that its transport record says NET/IB",
             meaning="A multinode NCCL world whose hosts have RDMA ports up ran its network "
                     "connections over `NET/Socket` (NCCL's own init log, recorded per "
                     "connection): it still passes, at a fraction of the speed. The likely "
                     "cause is named: NCCL_IB_DISABLE or NCCL_NET=Socket in a file or the "
                     "environment, or no IB device visible to the ranks.",
             doc_fill={"cause": "the cause found"}),
    RuleInfo("GF621", "warning", "NVLink GPUs talked through shared memory",
             "find what disabled peer-to-peer on {host} (NCCL_P2P_DISABLE or NCCL_P2P_LEVEL in "
             "`gpufleet facts -l {host}`' nccl_config, an IOMMU/ACS setting), then rerun "
             "`gpufleet smoke -l {host}`",
             meaning="In a one-host multi-GPU run NCCL connected GPUs that `nvidia-smi topo -m` "
                     "shows joined by NVLink through `SHM` instead of `P2P`: about a tenth of "
                     "the bandwidth (27 vs 346 GB/s on the captured 2xH200, "
                     "tests/fixtures/h200x2-2026-11-30/README.md)."),
    # ---------------------------------------------------------------- GF53x deeper checks
    # (smoke/remote/deep.py; {fix} is what the script chose from what it measured)
    RuleInfo("GF530", "warning", "pinned host-device bandwidth below the GPU's PCIe link",
             "{fix}" + _RERUN,
             meaning="A GPU's pinned 1 GiB H2D or D2H copy, alone, is below 85 % of its link's "
                     "expectation: PCIe generation x width (maximum, from `nvidia-smi` read under "
                     "load) x 0.879 (pinned copies reach 55.4 of 63.0 GB/s on an H200's Gen5 x16)."
                     " The message names the GPU (index, bus id, UUID) and its link now and at "
                     "maximum; the fix differs for a degraded link (reseat, BIOS) and a link at "
                     "its maximum (other traffic, IOMMU, CPU socket). Without link data: below 80 "
                     "% of its peers' median."),
    RuleInfo("GF531", "warning", "concurrent host-device copies limited by the host",
             "{fix}" + _RERUN,
             meaning="All GPUs copying at once reach less than 75 % of the sum of their single "
                     "rates (H2D or D2H): the host's root complex/PCIe switch, NUMA placement or "
                     "memory bandwidth is the bottleneck. Evidence has each GPU's NUMA node and "
                     "the NUMA nodes its rank's CPUs span."),
    RuleInfo("GF532", "warning", "DDP weak-scaling efficiency below its threshold",
             "{fix}" + _RERUN,
             meaning="The same transformer-block step (same per-GPU batch) under DDP on all N GPUs"
                     " runs at less than 0.85 of N x the 1-GPU throughput (the 2xH200 NVLink "
                     "anchor is 0.954; `GPUFLEET_SMOKE_MIN_SCALING` overrides). GPU runs only; CPU"
                     " ranks are recorded, not judged."),
    RuleInfo("GF533", "warning", "a rank much slower than its peers",
             "{fix}" + _RERUN,
             meaning="Every rank stepping alone at the same time, without communication: a rank "
                     "more than 1.2x slower than the fastest (CPU ranks: 3x, on the CPU time of "
                     "their steps) is named with its GPU."),
    RuleInfo("GF534", "info", "TF32 off by default for fp32 matmul",
             "where fp32 precision is not needed, jobs gain the measured speed-up with "
             "`torch.backends.cuda.matmul.allow_tf32 = True` or "
             "`torch.set_float32_matmul_precision('high')`; nothing to fix on {host}",
             meaning="GPU runs: torch's default leaves TF32 off for fp32 matmul; at full level the"
                     " message gives fp32 and TF32 TFLOP/s."),
    # ---------------------------------------------------------------- GF604-GF609 deeper smoke
    RuleInfo("GF604", "error", "silent data corruption: a GPU computed wrong results",
             "{fix}" + _RERUN,
             meaning="A deterministic GEMM or reduction differs from the other devices of the same"
                     " model (majority; with two, the exact checks decide), from the CPU reference"
                     " where the arithmetic is exact, or from its own first result in the repeat "
                     "loop. Names the GPU."),
    RuleInfo("GF605", "error", "cuDNN not available to torch", "{fix}" + _RERUN,
             meaning="`torch.backends.cudnn.is_available()` (or `.enabled`) is false on a GPU "
                     "rank."),
    RuleInfo("GF606", "error", "torch.compile failed", "{fix}" + _RERUN,
             meaning="`torch.compile` of a small MLP raised; the fix follows the error (C/C++ "
                     "compiler, triton/ptxas, other)."),
    RuleInfo("GF607", "error", "torch.compile result differs from eager", "{fix}" + _RERUN,
             meaning="The compiled MLP's output differs from eager by more than 1e-4 relative "
                     "(fp32, TF32 off)."),
    RuleInfo("GF608", "warning", "torch.compile cannot build GPU kernels (no triton)",
             "{fix}" + _RERUN,
             meaning="A GPU rank's torch has no `triton` module."),
    RuleInfo("GF609", "warning", "an environment variable disables TF32 or torch.compile",
             "{fix}" + _RERUN,
             meaning="`NVIDIA_TF32_OVERRIDE=0`, `TORCH_COMPILE_DISABLE` or `TORCHDYNAMO_DISABLE` "
                     "is set for the ranks."),
    # ---------------------------------------------------------------- GF7xx configuration
    RuleInfo("GF701", "warning", "NCCL setting turns off a GPU transport (P2P, SHM)",
             "{fix} on {host}, then rerun `gpufleet check --level quick -l {host}`",
             meaning="A setting from the table above, rule GF701, is in effect on a GPU host; "
                     "evidence names the variable, value and source (file path or `environment`).",
             doc_fill={"fix": "remove the line from its file (or unset the variable where the ssh "
                              "environment is set: ~/.ssh/environment, /etc/environment, sshd "
                              "SetEnv)"}),
    RuleInfo("GF702", "warning", "NCCL setting limits the network between hosts",
             "{fix} on {host} (keep it only if the hosts have no InfiniBand/RoCE or GPUDirect)",
             meaning="A GF702 setting is in effect on a GPU host that shares a named group with "
                     "other hosts.",
             doc_fill={"fix": "remove it"}),
    RuleInfo("GF703", "warning", "NCCL debugging or tuning override caps bandwidth",
             "{fix} on {host}: NCCL's docs keep these for debugging, not production",
             meaning="A GF703 setting is in effect on a GPU host.",
             doc_fill={"fix": "remove it"}),
    RuleInfo("GF704", "warning", "NCCL_CONF_FILE names a file that cannot be read",
             "create the file or unset NCCL_CONF_FILE for the ssh user on {host}",
             meaning="`NCCL_CONF_FILE` is set in the ssh environment but the file is absent or "
                     "unreadable."),
    # ---------------------------------------------------------------- GF8xx workspaces
    RuleInfo("GF801", "error", "workspace runs a digest other than the pinned one",
             _WS + " (recreates {workspace} on {expected})",
             meaning="The workspace's image (as created) is not `repository@` the workspace's "
                     "`image_digest`, else `pytorch_image_digest`; a container created by tag "
                     "counts as not pinned."),
    RuleInfo("GF802", "error", "GPU assigned to two workspaces",
             "give GPU {gpu} of {host} to one workspace in pytorch_workspaces (the role refuses "
             "a shared GPU), then " + _WS,
             meaning="Two running workspaces request the same GPU (indices and UUIDs matched "
                     "through the host's GPU list; `--gpus all` is every GPU)."),
    RuleInfo("GF803", "warning", "workspace GPU used by a foreign container or process",
             "stop what else uses GPU {gpu} on {host} (`nvidia-smi --query-compute-apps=pid,"
             "name,gpu_uuid --format=csv`, `docker ps`), or move the workspace to another GPU",
             meaning="A workspace's GPU is also requested by a container that is not a workspace, "
                     "or used by a compute process (nvidia-smi) that is none of the workspaces' "
                     "processes (`docker top`)."),
    RuleInfo("GF804", "error", "Jupyter of a workspace answers without a token",
             "set a jupyter_token (vaulted, >= 32 characters) for {workspace}, then " + _WS,
             meaning="Inside the container, `GET /api/contents` on the workspace's Jupyter port "
                     "without a token answered 2xx."),
    RuleInfo("GF805", "error", "sshd of a workspace accepts passwords",
             _WS + " (its sshd_config has PasswordAuthentication no)",
             meaning="The running sshd's effective config has PasswordAuthentication or "
                     "KbdInteractiveAuthentication yes."),
    RuleInfo("GF806", "warning", "workspace container without memory limit",
             "set memory for {workspace} (or pytorch_workspace_memory), then " + _WS,
             meaning="`HostConfig.Memory` is 0: one workspace can exhaust the host."),
    RuleInfo("GF807", "error", "workspace runs as root",
             "give {workspace} a non-root user and uid in pytorch_workspaces, then " + _WS,
             meaning="The workspace user is root, its uid 0, or Jupyter runs as uid 0."),
    RuleInfo("GF808", "warning", "declared workspace not running",
             _WS + "; if it exits again, `docker logs gpufleet-ws-{workspace}` on {host}",
             meaning="`pytorch_workspaces` of the host declares it (state present) and no running "
                     "container carries its label."),
    RuleInfo("GF809", "info", "workspace could not be checked from inside",
             "`docker exec gpufleet-ws-{workspace} python3 -V` on {host}: the checks need the "
             "image's python3",
             meaning="`docker exec` of the check failed or found no sshd/Jupyter answer; "
                     "GF804/GF805/GF807 could not judge it."),
    RuleInfo("GF810", "error", "workspace reaches GPUs it was not given",
             "ansible-playbook playbooks/site.yml --tags pytorch_workspace -l {host} (recreates "
             "{workspace} with --env NVIDIA_VISIBLE_DEVICES=void or --gpus of its own GPUs only)",
             meaning="The GPUs a workspace container really has (its device requests; without "
                     "any, under the nvidia runtime, its `NVIDIA_VISIBLE_DEVICES`, which CUDA "
                     "images set to `all`) include one that its `gpufleet.workspace.gpus` label, "
                     "the role's assignment, does not list."),
    # ---------------------------------------------------------------- GF9xx node-local (Slurm)
    RuleInfo("GF901", "warning", "circuit breaker tripped: node not drained",
             "too many nodes failed at once ({share} of the partition): look for a common cause "
             "(driver rollout, fabric, power) with `sinfo -R`; drain {host} by hand if it must "
             "go (`scontrol update NodeName={host} State=DRAIN Reason=...`)",
             meaning="The node has a finding at or above `--fail-on`, but gpufleet already drained"
                     " its partition's share (`--breaker-share`) within `--breaker-window`; the "
                     "node stays in service. Evidence lists the drained nodes and the limit per "
                     "partition."),
    RuleInfo("GF902", "info", "node drained by gpufleet",
             "fix the finding named in the reason on {host}; the next health check resumes it",
             meaning="The node was drained (or stays drained) with reason `gpufleet: GFxxx "
                     "message`."),
    RuleInfo("GF903", "info", "node resumed by gpufleet",
             "nothing to do: the drain gpufleet wrote on {host} was lifted",
             meaning="The node is healthy again and its drain reason was gpufleet's: it was "
                     "resumed."),
    RuleInfo("GF904", "info", "node drained by someone else: left alone",
             "gpufleet never changes a drain it did not write; resume {host} yourself when its "
             "work is done (`scontrol update NodeName={host} State=RESUME`)",
             meaning="The node is drained with a reason gpufleet did not write; it is neither "
                     "resumed nor re-labelled."),
    RuleInfo("GF905", "error", "Slurm could not be updated",
             "run `sinfo -N -n {host}` and `scontrol show node {host}` on the node; check "
             "SLURMD_NODENAME/--node and that the health check runs as root or SlurmUser",
             meaning="`sinfo`/`scontrol` failed, or Slurm knows no node of that name."),
    RuleInfo("GF906", "warning", "node held for RMA",
             "replace or repair the GPU named in the reason of {host}, then resume it yourself: "
             "`scontrol update NodeName={host} State=RESUME`",
             meaning="The node's drain reason is `gpufleet: RMA GF43x …` (GF430 or GF432 drained "
                     "it): the hardware keeps failing, and gpufleet never resumes such a node, "
                     "even when a later check looks healthy."),
    RuleInfo("GF907", "info", "node's lifecycle step: drain reason updated",
             "nothing to do on {host}: the evidence `lifecycle` says the step (re-test failed "
             "after a remediation: drained again; or on to RMA)",
             meaning="A node gpufleet drained changed lifecycle state: the re-test after a "
                     "remediation (`gpufleet: re-validating …`) found it still faulty, or an "
                     "escalation (GF430/GF432) sends it to RMA; the reason is rewritten."),
)

RULES: Mapping[str, RuleInfo] = {r.id: r for r in _RULES}

# Per fact family (Facts.errors key), what usually brings the fact back (GF010's {hint}).
FACT_HINTS: Mapping[str, str] = {
    "nvidia_smi": "install or repair the driver: " + _SITE + " --tags nvidia_driver -l {host}",
    "kernel_module": "load the driver (`modprobe nvidia`) or install it: "
    + _SITE + " --tags nvidia_driver -l {host}",
    "gpus": "run `nvidia-smi -q` on {host} and read its error",
    "kernels": "list /boot on {host} (`ls -l /boot`) and read the error",
    "toolkit": "install the container toolkit: " + _SITE
    + " --tags nvidia_container_toolkit -l {host}",
    "docker": "install and start the engine: " + _SITE + " --tags container_runtime -l {host}",
    "containerd": "install and start the engine: " + _SITE + " --tags container_runtime -l {host}",
    "image": "pull the image: " + _SITE + " --tags pytorch_image -l {host}",
    "nccl": "nothing to do unless jobs use the system NCCL: torch brings its own",
    "probe": "rerun `gpufleet facts -l {host}` and read stderr; raise --timeout if the host is "
    "slow",
}
FACT_HINT_DEFAULT = ("install the missing tool on {host} or fix its permissions; the facts it "
                     "gives are unknown until then")

# Per smoke check, the likely cause (GF601's {hint}).
SMOKE_HINTS: Mapping[str, str] = {
    "versions": "torch could not report CUDA/NCCL versions: the image or python lacks a CUDA build",
    "device_count": "torch sees a different GPU count than nvidia-smi: check CUDA_VISIBLE_DEVICES "
    "and `docker run --gpus all`",
    "matmul": "a GPU computed a wrong matmul: drain the host and run `dcgmi diag -r 3`",
    "allreduce_exact": "all-reduce returned wrong values: check NVLink/PCIe (XIDs, "
    "`nvidia-smi nvlink -s`) and NCCL_P2P_DISABLE",
    "ddp": "DDP parameters diverged across ranks: check the all-reduce and the NCCL versions",
    "amp": "the mixed-precision step failed: check the torch/CUDA build of the image",
    "busbw": "the bandwidth sweep failed: run with NCCL_DEBUG=INFO",
    "readiness": "a readiness check crashed: read the traceback in the check's data",
    "hostdev_bw": "the host-device copy check crashed: read the traceback in the check's data",
    "scaling": "the scaling check crashed: read the traceback in the check's data",
    "sdc": "the silent-data-corruption check crashed: read the traceback in the check's data",
}
