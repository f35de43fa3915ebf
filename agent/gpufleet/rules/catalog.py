"""Every rule id, its usual severity, title and remediation template. Ids never change meaning.

Families: GF0xx host state, GF1xx desired state (inventory variables), GF2xx peer drift,
GF3xx compatibility, GF4xx hardware health, GF5xx performance, GF6xx smoke test,
GF8xx workspace containers.
Templates are `str.format` strings; `{host}` is the Ansible limit (comma-joined host names).
docs/rules.md documents the same ids (a test keeps them in step).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpufleet.model import Severity


@dataclass(frozen=True)
class RuleInfo:
    id: str
    severity: Severity  # usual severity; a rule may report lower where its docs say so
    title: str
    remediation: str

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
             "fix ansible_host/ansible_port in the inventory if they are wrong"),
    RuleInfo("GF002", "error", "SSH authentication failed",
             "check ansible_user and the key for {host}: `ssh -i KEY USER@{address}`; "
             "install the key with ssh-copy-id"),
    RuleInfo("GF003", "error", "SSH host key mismatch",
             "verify the new host key of {host} out of band, then `ssh-keygen -R {address}` and "
             "reconnect; never turn host key checking off"),
    RuleInfo("GF004", "error", "host timed out",
             "a command hung on {host}: run `timeout 10 nvidia-smi` there and look for XIDs in "
             "`dmesg`; raise the timeout only if the host is merely slow"),
    RuleInfo("GF005", "warning", "host busy",
             "GPUs of {host} are in use by other processes (`nvidia-smi --query-compute-apps="
             "pid,name --format=csv`); drain the host in the scheduler and rerun"),
    RuleInfo("GF006", "error", "host check failed",
             "read the error for {host}; rerun `gpufleet check -l {host} -f 1` and watch stderr"),
    RuleInfo("GF010", "info", "fact not collected", "{hint}"),
    # ---------------------------------------------------------------- GF1xx desired state
    RuleInfo("GF101", "error", "driver version differs from nvidia_driver_version",
             _UPGRADE + " -e nvidia_driver_version={expected}"),
    RuleInfo("GF102", "error", "driver branch differs from nvidia_driver_branch",
             _UPGRADE + " -e nvidia_driver_branch={expected}"),
    RuleInfo("GF103", "warning", "kernel module flavour differs from nvidia_driver_kernel_modules",
             _UPGRADE + " -e nvidia_driver_kernel_modules={expected}"),
    RuleInfo("GF104", "error",
             "container toolkit version differs from nvidia_container_toolkit_version",
             _SITE + " --tags nvidia_container_toolkit -l {host}"),
    RuleInfo("GF105", "error", "image digest differs from pytorch_image_digest",
             _SITE + " --tags pytorch_image -l {host} (pulls {image}@{expected})"),
    RuleInfo("GF106", "error", "GPU count differs from gpufleet_expected_gpu_count",
             "compare `nvidia-smi -L` with `lspci -d 10de:` on {host} and look for XID 79 in "
             "`dmesg`; reseat or RMA a missing GPU, or correct gpufleet_expected_gpu_count"),
    RuleInfo("GF107", "error", "container engine from container_runtime_engine missing",
             _SITE + " --tags container_runtime -l {host}"),
    # ---------------------------------------------------------------- GF2xx peer drift
    RuleInfo("GF201", "warning", "driver version differs from peers",
             _DRIFT.replace("{tag}", "nvidia_driver")
             + "; or " + _UPGRADE + " -e nvidia_driver_version={majority}"),
    RuleInfo("GF202", "warning", "driver CUDA version differs from peers",
             _DRIFT.replace("{tag}", "nvidia_driver")),
    RuleInfo("GF203", "warning", "kernel differs from peers",
             "install the majority kernel ({majority}) on {host} and reboot: "
             "`ansible {host} -b -m ansible.builtin.reboot`"),
    RuleInfo("GF204", "warning", "container toolkit version differs from peers",
             _DRIFT.replace("{tag}", "nvidia_container_toolkit")),
    RuleInfo("GF205", "warning", "Docker version differs from peers",
             _DRIFT.replace("{tag}", "container_runtime")),
    RuleInfo("GF206", "warning", "image digest differs from peers",
             "pin pytorch_image_digest for the group, then "
             + _SITE + " --tags pytorch_image -l {host}"),
    RuleInfo("GF207", "warning", "system NCCL version differs from peers",
             "install the majority libnccl ({majority}) on {host} (apt/dnf pin), or let torch "
             "use its bundled NCCL"),
    RuleInfo("GF208", "warning", "VBIOS differs from peers",
             "update the VBIOS of {host} to {majority} with the vendor's firmware bundle "
             "(nvfwupd or the OEM tool)"),
    RuleInfo("GF209", "warning", "GPU count differs from peers",
             "compare `nvidia-smi -L` with `lspci -d 10de:` on {host} and look for XID 79 in "
             "`dmesg`; reseat or RMA a missing GPU, or set gpufleet_expected_gpu_count per host"),
    # ---------------------------------------------------------------- GF3xx compatibility
    RuleInfo("GF301", "error", "CUDA runtime needs a newer driver",
             _UPGRADE + " -e nvidia_driver_branch={branch} -e nvidia_driver_version=''"
             "; or use an image built for CUDA "
             "{driver_cuda} or older"),
    RuleInfo("GF302", "warning", "driver branch past end of life",
             _UPGRADE + " -e nvidia_driver_branch={branch} -e nvidia_driver_version=''"),
    RuleInfo("GF303", "error", "container toolkit below the security floor",
             _SITE + " --tags nvidia_container_toolkit -l {host} "
             "-e nvidia_container_toolkit_version={fixed}"),
    RuleInfo("GF304", "error", "NVML driver/library mismatch (kernel module != userspace)",
             "reload the kernel module on {host} (`systemctl stop nvidia-persistenced; "
             "rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia; modprobe nvidia`) or reboot: "
             "`ansible {host} -b -m ansible.builtin.reboot`"),
    RuleInfo("GF305", "error", "NCCL versions differ inside a multinode group",
             "NCCL >= 2.23.4 aborts on any version difference: pin the same "
             "pytorch_image_digest (or torch wheel) for every host of {group}, then "
             + _SITE + " --tags pytorch_image -l {host}"),
    RuleInfo("GF306", "info", "system libnccl differs from the NCCL torch loads",
             "nothing to do unless jobs LD_PRELOAD the system NCCL; torch uses its bundled one"),
    # ---------------------------------------------------------------- GF4xx hardware
    RuleInfo("GF401", "error", "torch sees fewer GPUs than nvidia-smi",
             "check CUDA_VISIBLE_DEVICES, `docker run --gpus all` and CDI (`nvidia-ctk cdi list`) "
             "on {host}"),
    RuleInfo("GF402", "error", "uncorrected ECC errors",
             "drain {host}, run `dcgmi diag -r 3`, reset the GPU (`nvidia-smi -r -i {gpu}`); "
             "RMA GPU {gpu} if errors return"),
    RuleInfo("GF403", "error", "row remap or page retirement pending",
             "drain {host} and reset GPU {gpu} (`nvidia-smi -r -i {gpu}`) or reboot to apply "
             "the remap"),
    RuleInfo("GF404", "error", "row remapping failed",
             "RMA GPU {gpu} of {host}: it has no spare rows left"),
    RuleInfo("GF405", "error", "critical XID in the time window",
             "{hint} ({host})"),
    RuleInfo("GF406", "info", "XID event (not critical, or outside the window)",
             "look it up in NVIDIA's XID catalogue; act if it repeats on {host}"),
    RuleInfo("GF407", "warning", "PCIe link below its maximum",
             "reseat GPU {gpu} / its riser on {host} and check the BIOS PCIe settings; "
             "re-read under load with `nvidia-smi -q -d PCIE -i {gpu}`"),
    RuleInfo("GF408", "error", "NVLink inactive",
             "`nvidia-smi nvlink -s -i {gpu}` on {host}; reset the GPU, check the fabric "
             "manager; RMA the baseboard if links stay down"),
    RuleInfo("GF409", "warning", "persistence mode off",
             "`nvidia-smi -pm 1` on {host} (GPUs {gpu}), or enable nvidia-persistenced: "
             + _SITE + " --tags nvidia_driver -l {host}"),
    RuleInfo("GF410", "warning", "MIG enabled where not expected",
             "`nvidia-smi -i {gpu} -mig 0` then reset the GPU on {host}, or set "
             "gpufleet_mig_expected: true for the host"),
    RuleInfo("GF411", "warning", "GPU clocks throttled",
             "check cooling and power on {host}: `nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER "
             "-i {gpu}`"),
    RuleInfo("GF412", "error", "NVSwitch fabric not completed",
             "`systemctl restart nvidia-fabricmanager` on {host} (its version must equal the "
             "driver's); check `nvidia-smi -q | grep -A2 Fabric`"),
    RuleInfo("GF413", "warning", "NVLink below its SKU's normal speed (downtrained)",
             "`nvidia-smi nvlink -s -i {gpu}` on {host}; reset the GPU "
             "(`nvidia-smi -r -i {gpu}`) and reseat or RMA the baseboard if the speed stays low"),
    # ---------------------------------------------------------------- GF5xx performance
    RuleInfo("GF501", "error", "bus bandwidth below gpufleet_min_busbw_gbps",
             "check NVLink (`nvidia-smi nvlink -s`), topology (`nvidia-smi topo -m`) and "
             "NCCL_P2P_DISABLE/NCCL_SHM_DISABLE in the environment of {host}; rerun "
             "`gpufleet check --level full -l {host}`"),
    RuleInfo("GF502", "warning", "bus bandwidth outlier against the fleet",
             "compare {host} with its peers: `nvidia-smi topo -m`, `nvidia-smi nvlink -s`, "
             "NCCL_DEBUG=INFO; rerun `gpufleet check --level full -l {host}`"),
    RuleInfo("GF503", "warning", "matmul TFLOP/s outlier against the fleet",
             "check clocks, power limit and throttling of GPU {gpu} on {host}: "
             "`nvidia-smi -q -d PERFORMANCE,CLOCK,POWER -i {gpu}`"),
    RuleInfo("GF504", "error", "bus bandwidth below the expectation from the host's own links",
             "{hint}; rerun `gpufleet check --level full -l {host}`"),
    # GF520-GF529: against the host's own history (gpufleet/history), with --save DIR.
    RuleInfo("GF520", "warning", "bus bandwidth drifted below the host's own baseline",
             "{host} lost {drop} of its busbw since its good run of {since}: see what changed with "
             "`gpufleet history --store DIR {host}`, check `nvidia-smi nvlink -s` and "
             "`nvidia-smi topo -m`; rerun `gpufleet check --level full -l {host}`"),
    RuleInfo("GF521", "warning", "matmul TFLOP/s drifted below the host's own baseline",
             "GPU {gpu} of {host} lost {drop} since its good run of {since}: check clocks, power "
             "and throttling: `nvidia-smi -q -d PERFORMANCE,CLOCK,POWER -i {gpu}`; see "
             "`gpufleet history --store DIR {host}`"),
    # ---------------------------------------------------------------- GF6xx smoke
    RuleInfo("GF601", "error", "smoke check failed",
             "{hint}; rerun `gpufleet smoke -l {host} --level full`"),
    RuleInfo("GF602", "error", "smoke test could not run",
             "read the log tail; run `gpufleet smoke -l {host}` and check gpufleet_smoke_runtime "
             "/ gpufleet_smoke_python for the host"),
    RuleInfo("GF603", "error", "smoke test timed out or ranks hung",
             "rerun with NCCL_DEBUG=INFO; check the firewall between hosts and "
             "gpufleet_smoke_interface (NCCL_SOCKET_IFNAME) for {host}"),
    # ---------------------------------------------------------------- GF53x deeper checks
    # (smoke/smoke_deep.py; {fix} is what the script chose from what it measured)
    RuleInfo("GF530", "warning", "pinned host-device bandwidth below the GPU's PCIe link",
             "{fix}" + _RERUN),
    RuleInfo("GF531", "warning", "concurrent host-device copies limited by the host",
             "{fix}" + _RERUN),
    RuleInfo("GF532", "warning", "DDP weak-scaling efficiency below its threshold",
             "{fix}" + _RERUN),
    RuleInfo("GF533", "warning", "a rank much slower than its peers",
             "{fix}" + _RERUN),
    RuleInfo("GF534", "info", "TF32 off by default for fp32 matmul",
             "where fp32 precision is not needed, jobs gain the measured speed-up with "
             "`torch.backends.cuda.matmul.allow_tf32 = True` or "
             "`torch.set_float32_matmul_precision('high')`; nothing to fix on {host}"),
    # ---------------------------------------------------------------- GF604-GF609 deeper smoke
    RuleInfo("GF604", "error", "silent data corruption: a GPU computed wrong results",
             "{fix}" + _RERUN),
    RuleInfo("GF605", "error", "cuDNN not available to torch", "{fix}" + _RERUN),
    RuleInfo("GF606", "error", "torch.compile failed", "{fix}" + _RERUN),
    RuleInfo("GF607", "error", "torch.compile result differs from eager", "{fix}" + _RERUN),
    RuleInfo("GF608", "warning", "torch.compile cannot build GPU kernels (no triton)",
             "{fix}" + _RERUN),
    RuleInfo("GF609", "warning", "an environment variable disables TF32 or torch.compile",
             "{fix}" + _RERUN),
    # ---------------------------------------------------------------- GF7xx configuration
    RuleInfo("GF701", "warning", "NCCL setting turns off a GPU transport (P2P, SHM)",
             "{fix} on {host}, then rerun `gpufleet check --level quick -l {host}`"),
    RuleInfo("GF702", "warning", "NCCL setting limits the network between hosts",
             "{fix} on {host} (keep it only if the hosts have no InfiniBand/RoCE or GPUDirect)"),
    RuleInfo("GF703", "warning", "NCCL debugging or tuning override caps bandwidth",
             "{fix} on {host}: NCCL's docs keep these for debugging, not production"),
    RuleInfo("GF704", "warning", "NCCL_CONF_FILE names a file that cannot be read",
             "create the file or unset NCCL_CONF_FILE for the ssh user on {host}"),
    # ---------------------------------------------------------------- GF8xx workspaces
    RuleInfo("GF801", "error", "workspace runs a digest other than the pinned one",
             _WS + " (recreates {workspace} on {expected})"),
    RuleInfo("GF802", "error", "GPU assigned to two workspaces",
             "give GPU {gpu} of {host} to one workspace in pytorch_workspaces (the role refuses "
             "a shared GPU), then " + _WS),
    RuleInfo("GF803", "warning", "workspace GPU used by a foreign container or process",
             "stop what else uses GPU {gpu} on {host} (`nvidia-smi --query-compute-apps=pid,"
             "name,gpu_uuid --format=csv`, `docker ps`), or move the workspace to another GPU"),
    RuleInfo("GF804", "error", "Jupyter of a workspace answers without a token",
             "set a jupyter_token (vaulted, >= 32 characters) for {workspace}, then " + _WS),
    RuleInfo("GF805", "error", "sshd of a workspace accepts passwords",
             _WS + " (its sshd_config has PasswordAuthentication no)"),
    RuleInfo("GF806", "warning", "workspace container without memory limit",
             "set memory for {workspace} (or pytorch_workspace_memory), then " + _WS),
    RuleInfo("GF807", "error", "workspace runs as root",
             "give {workspace} a non-root user and uid in pytorch_workspaces, then " + _WS),
    RuleInfo("GF808", "warning", "declared workspace not running",
             _WS + "; if it exits again, `docker logs gpufleet-ws-{workspace}` on {host}"),
    RuleInfo("GF809", "info", "workspace could not be checked from inside",
             "`docker exec gpufleet-ws-{workspace} python3 -V` on {host}: the checks need the "
             "image's python3"),
    # ---------------------------------------------------------------- GF9xx node-local (Slurm)
    RuleInfo("GF901", "warning", "circuit breaker tripped: node not drained",
             "too many nodes failed at once ({share} of the partition): look for a common cause "
             "(driver rollout, fabric, power) with `sinfo -R`; drain {host} by hand if it must "
             "go (`scontrol update NodeName={host} State=DRAIN Reason=...`)"),
    RuleInfo("GF902", "info", "node drained by gpufleet",
             "fix the finding named in the reason on {host}; the next health check resumes it"),
    RuleInfo("GF903", "info", "node resumed by gpufleet",
             "nothing to do: the drain gpufleet wrote on {host} was lifted"),
    RuleInfo("GF904", "info", "node drained by someone else: left alone",
             "gpufleet never changes a drain it did not write; resume {host} yourself when its "
             "work is done (`scontrol update NodeName={host} State=RESUME`)"),
    RuleInfo("GF905", "error", "Slurm could not be updated",
             "run `sinfo -N -n {host}` and `scontrol show node {host}` on the node; check "
             "SLURMD_NODENAME/--node and that the health check runs as root or SlurmUser"),
)

RULES: Mapping[str, RuleInfo] = {r.id: r for r in _RULES}

# Per fact family (Facts.errors key), what usually brings the fact back (GF010's {hint}).
FACT_HINTS: Mapping[str, str] = {
    "nvidia_smi": "install or repair the driver: " + _SITE + " --tags nvidia_driver -l {host}",
    "kernel_module": "load the driver (`modprobe nvidia`) or install it: "
    + _SITE + " --tags nvidia_driver -l {host}",
    "gpus": "run `nvidia-smi -q` on {host} and read its error",
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
