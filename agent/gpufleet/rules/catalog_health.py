"""The catalog's GF3xx (compatibility, security floors) and GF4xx (hardware) rows."""

from __future__ import annotations

from gpufleet.rules.rule_info import _SITE, _UPGRADE, RuleInfo

HEALTH_RULES: tuple[RuleInfo, ...] = (
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
                     "the Xid current, `none` clears it (GF406) unless the Xid lasts: its "
                     "bucket or its own line (`RST: Yes`) asks for a reset, and only a boot "
                     "clears that. Evidence `decided_by` and "
                     "`source` name which one decided."),
    RuleInfo("GF406", "info", "Xid event (the application's, cleared, or outside the window)",
             "look it up in NVIDIA's Xid catalog (evidence `investigatory`); act if it repeats "
             "on {host} (GF430 counts repeats)",
             meaning="Any other Xid: one NVIDIA's catalog leaves to the application (restart "
                     "it) or ignores, one that does not last on a GPU whose driver reports "
                     "recovery action None now, or one outside the window that does not last."),
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
                     "`nvidia-smi nvlink -s` (`nvlink_link_gbps` in the SKU catalog "
                     "`agent/gpufleet/sku/skus.json`: 26.562 GB/s NVLink4 on H100/H200, 53.125 on "
                     "B200/GB200, 25 on A100). The expectation (GF504) is lowered by the slow "
                     "link, so bandwidth is not reported twice. GF408 (inactive links) likewise "
                     "counts against the catalog's `nvlink_links`: an H100 PCIe or H100 NVL with "
                     "12 of 18 links active is normal (Azure/azurehpc-health-checks#162)."),
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
             "(`ansible-playbook gpufleet.gpu.remediate_reboot -l {host}`), then reseat or RMA it "
             "if it stays "
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
             meaning="Over this run and the saved runs: a GPU asked for a reboot (Xids whose "
                     "catalog action is a reboot, or the driver's GPU Recovery Action Reboot) "
                     "in more than 2 boots within 7 days (gpud's DefaultRebootThreshold = 2: "
                     "HARDWARE_INSPECTION). A boot is a distinct `boot_id` of the runs that saw "
                     "the ask, however many asks one boot logged; an event of unknown boot "
                     "(journald) counts once on its own."),
    RuleInfo("GF433", "error", "Xid 74 again and again on the same NVLink",
             "drain {host}: NVLink {link} of the GPU at {bus} keeps failing. Reseat what that "
             "link runs through (baseboard connector or bridge), collect the bug report "
             "(`ansible-playbook gpufleet.gpu.collect_bug_report -l {host}`, then `gpufleet "
             "rma-bundle {host}`) and open an RMA case for the GPU or baseboard",
             meaning="Over this run and the saved runs: Xid 74 (NVLink error) naming the same "
                     "link (`link N(` in the message, fact `xid_events[].nvlink`) at least 3 "
                     "times within 24 h. NVIDIA's Xid catalog, WORKFLOW_NVLINK_ERR: the "
                     "ECC/parity bits \"if seen more than 2 times on the same link, report a "
                     "bug\". Such Xid 74s are counted here, not by GF430. The node is held "
                     "for RMA (GF906).",
             doc_fill={"link": "K"}),
    RuleInfo("GF434", "warning", "Xid 74 spread over several NVLinks of one GPU",
             "the links of the GPU at {bus} on {host} share the fault: reset that GPU "
             "(`ansible-playbook gpufleet.gpu.remediate_gpu_reset -l {host} -e "
             "remediate_gpu=GPU`); if Xid 74 comes back over several links, reboot "
             "(`ansible-playbook gpufleet.gpu.remediate_reboot -l {host}`) and check the "
             "fabric manager's log on an NVSwitch baseboard",
             meaning="Over this run and the saved runs: at least 3 Xid 74 on one GPU within 24 "
                     "h, over two or more links, none of them at GF433's limit. No one link "
                     "fails; what the links share does (the GPU's NVLink logic; on an NVSwitch "
                     "baseboard the switches and the fabric manager). Per-link repeats are "
                     "NVIDIA's (WORKFLOW_NVLINK_ERR); this reading of a spread is gpufleet's."),
    RuleInfo("GF435", "error", "the node keeps coming back from remediations",
             "stop remediating {host}: the resets, reboots and reinstalls do not hold. Collect "
             "the evidence (`ansible-playbook gpufleet.gpu.collect_bug_report -l {host}`, then "
             "`gpufleet rma-bundle {host}`) and open a case with the vendor",
             meaning="Over the saved runs: the node was re-tested after a remediation rung "
                     "(its Slurm lifecycle went from re-validating, GF903 or GF907) 5 times "
                     "within 7 days (NVIDIA NVSentinel's MultipleRemediations: 5 in 7 days -> "
                     "CONTACT_SUPPORT); `gpufleet_remediation_limit` sets the count. The node "
                     "is held for RMA (GF906)."),
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
    # GF46x: GPUDirect RDMA on the host (rules/fabric_gdr.py; the sysfs paths and their sources
    # in probes/gdr.py)
    RuleInfo("GF460", "warning", "no GPUDirect RDMA path on a host with GPUs and RDMA ports",
             "give {host}'s HCAs a way into GPU memory: the open GPU kernel modules on a 5.12+ "
             "kernel for DMA-BUF (NVIDIA's recommendation; inventory "
             "`nvidia_driver_kernel_modules: open`, then `ansible-playbook "
             "gpufleet.gpu.upgrade_driver -l {host}`), or MLNX_OFED/DOCA-OFED and `modprobe "
             "nvidia_peermem`; now: {why}",
             meaning="A host with GPUs and an ACTIVE RDMA port where neither GPUDirect RDMA path "
                     "exists: no peer-memory client registered with ib_core "
                     "(/sys/kernel/mm/memory_peers/nv_mem, what nvidia_peermem or nv_peer_mem "
                     "registers under MLNX_OFED; NCCL's ncclIbGdrSupport) and no DMA-BUF "
                     "(needs the open GPU kernel modules and Linux 5.12+). NCCL then stages "
                     "every network transfer through host memory; it still runs, slower.",
             doc_fill={"why": "what is missing"}),
    # GF461-GF462: a port's bit error rate as mlxlink reads it (rules/fabric.py)
    RuleInfo("GF461", "error", "RDMA port's effective bit error rate too high",
             "drain {host} from multi-host jobs and replace the cable or transceiver of {nic} "
             "(`mlxlink -d {dev} -m -c` names the module and its lanes); effective BER {ber}",
             meaning="mlxlink's Effective Physical BER (after FEC) of an ACTIVE port has a "
                     "negative exponent below 9 (1E-8 or worse): DeepOps' NHC check "
                     "check_ib_link_ber (NVIDIA/deepops roles/nhc/files/deepops.nhc) fails the "
                     "node at that exponent.",
             doc_fill={"nic": "the port", "dev": "DEV", "ber": "B"}),
    RuleInfo("GF462", "warning", "RDMA port's effective bit error rate above its threshold",
             "watch {nic} on {host}: `mlxlink -d {dev} -c` again after load, and plan the "
             "cable or transceiver swap; effective BER {ber}, threshold {threshold}",
             meaning="mlxlink's Effective Physical BER of an ACTIVE port is above 1E-12 but not "
                     "yet GF461's 1E-8: ibdiagnet's BER test threshold (10^-12 by default, "
                     "NVIDIA's ibdiagnet manual, Bit Error Rate), the IBTA rate NVSentinel's "
                     "symbol-error threshold comes from. The raw (pre-FEC) BER is recorded, "
                     "not judged: no published threshold for it was found. Inventory "
                     "`gpufleet_ib_ber_exponent` (N: 1E-N) moves the threshold.",
             doc_fill={"nic": "the port", "dev": "DEV", "ber": "B", "threshold": "1E-12"}),
)
