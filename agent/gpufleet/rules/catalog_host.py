"""The catalog's GF0xx (host state), GF1xx (desired state) and GF2xx (peer drift) rows."""

from __future__ import annotations

from gpufleet.rules.rule_info import _DRIFT, _SITE, _UPGRADE, RuleInfo

HOST_RULES: tuple[RuleInfo, ...] = (
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
             meaning="The host key differs from the one known_hosts lists, or is @revoked "
                     "(strict checking is the default)."),
    RuleInfo("GF008", "error", "SSH host key not yet known",
             "verify the fingerprint of {host}'s host key out of band (`ssh-keygen -lf "
             "/etc/ssh/ssh_host_ed25519_key.pub` on its console), then rerun with "
             "`--accept-new-host-keys` or add it with `ssh-keyscan {address} >> "
             "~/.ssh/known_hosts` (`-p PORT` off port 22); never turn host key checking off",
             meaning="known_hosts lists no key for the host (a new server); nothing is there "
                     "to remove."),
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
             meaning="Any other failure while checking the host; the error text says what. "
                     "Also a rule that raised on this host's data (an odd value the host "
                     "printed): the message names the rule function and the exception (shown "
                     "clean); the other hosts and rules are still judged."),
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
)
