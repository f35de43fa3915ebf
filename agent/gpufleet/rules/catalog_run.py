"""The catalog's GF5xx (performance), GF6xx (smoke), GF7xx (configuration), GF8xx (workspaces)
and GF9xx (node-local, Slurm) rows."""

from __future__ import annotations

from gpufleet.rules.rule_info import _RERUN, _WS, RuleInfo

RUN_RULES: tuple[RuleInfo, ...] = (
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
                     "names it and its file as the likely cause. Judged here, once, from the "
                     "values the host records (the host judges nothing); a missing measurement "
                     "at a judged size is a finding, never a pass.",
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
    RuleInfo("GF544", "error", "GPU<->GPU copies below the SKU's NVLink expectation",
             "{hint}; then rerun `gpufleet check --level full -l {host}`",
             meaning="The full level's copy matrix (every ordered GPU pair, as nvbandwidth's "
                     "device_to_device_memcpy_read_ce: the reading GPU's copy engine, 512 MiB, "
                     "bytes counted once) has pairs below their floor, or pairs it could not "
                     "measure. A pair's expectation: the SKU's NVLinks x per-link rate x the "
                     "p2p ratio (skus.json) x 0.76 for the floor, on every pair of an NVSwitch "
                     "host and on the NVLink pairs `topo -m` shows elsewhere (sku/p2p.py). "
                     "Evidence: the slowest pair's measured, expected, floor, ratio and source, "
                     "every slow or missing pair, the one GPU they all involve (the subject) and "
                     "the likely cause: no peer access (P2P disabled: staged through host "
                     "memory), a PCIe path where NVLink was expected, NVLinks down or slow, the "
                     "NVSwitch fabric not set up, other processes, clocks or MIG. A warning "
                     "where the SKU's arch has no measured p2p ratio (borrowed).",
             doc_fill={"hint": "the named cause's fix (e.g. `nvidia-smi topo -p2p r`, "
                               "`nvidia-smi nvlink -s`), else nvbandwidth against a healthy "
                               "host of the SKU"}),
    RuleInfo("GF545", "warning", "fewer RDMA ports at the SKU's rate than it expects",
             "check each slow or missing port on {host}: `ibstat`, `mlxlink -d DEV` (speed, "
             "cable, FEC); reseat or replace the cable or HCA, then rerun `gpufleet check -l "
             "{host}`",
             meaning="From the facts alone (every level): the SKU catalog's RDMA expectation "
                     "(skus.json gpud-ib-ports: A100 >= 1 port at 200 Gb/s; H100, H200, B200, "
                     "GB200 one port per GPU, up to 8, at 400 Gb/s) and the host's ports' "
                     "negotiated rates (/sys/class/infiniband/*/ports/*/rate). The slowest of "
                     "the N fastest ports is below the rate, or the host has fewer than N ports "
                     "with a rate (then measured is 0). A host with no RDMA port is not judged. "
                     "GF451 compares a port with its peers on the same host; this one with the "
                     "SKU. Override: gpufleet_perf_floors nic_gbps."),
    RuleInfo("GF546", "warning", "a measured value fell below the host's own known-good runs",
             "{host}'s {line} lost {drop} since its good run of {since}: see what changed with "
             "`gpufleet history --store DIR {host}`; check clocks, power and links: "
             "`nvidia-smi -q -d PERFORMANCE,CLOCK,POWER -i {gpu}`; rerun "
             "`gpufleet check --level full -l {host}`",
             meaning="Needs a run store (`--save DIR`; rules/lkg.py). A line of "
                     "hosts.<name>.expectations other than busbw (GF520) and the bf16 matmul "
                     "(GF521): GEMM per dtype, HBM, host<->device copies, NVLink per-link rate, "
                     "P2P copies, NIC rate. Its measured value is more than 10 % below the median "
                     "of the same line in the host's last (up to 10) known-good runs measured "
                     "alike, whether or not it is above the SKU floor. Evidence: measured, "
                     "baseline, drop, the SKU floor and expected, the runs.",
             doc_fill={"line": "LINE", "drop": "N %", "since": "DATE", "gpu": "GPU"}),
    RuleInfo("GF549", "error", "one cause slowed several measurements",
             "{fix}",
             meaning="The judge's last step (rules/one_cause.py): two or more performance "
                     "findings of one host that one named cause explains (GF540, GF541, GF544 "
                     "and GF543 carrying the same cause: the same other processes by pid, a "
                     "clock event reason, a lowered power limit, held clocks, a PCIe link below "
                     "its max, MIG; and GF521/GF546 drops of a GPU that cause covers) are "
                     "reported as this one finding. Evidence: the cause(s), the GPUs, and each "
                     "folded measurement (its rule, metric, dtype, GPU, measured, expected, "
                     "floor or baseline). Its severity is the worst of the folded findings, so "
                     "drains and exit codes read it as they read them; a cause explaining a "
                     "single finding leaves that finding as it is.",
             doc_fill={"fix": "the cause's fix (stop the other process, restore the power limit "
                              "or clocks); then rerun `gpufleet check --level full -l HOST`"}),
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
                     "amp) or the run failed without naming one; evidence holds the check's"
                     " detail and data. Measured busbw values are GF501/GF504's, never GF601's."),
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
    RuleInfo("GF622", "error", "GPUDirect RDMA bandwidth of an HCA below its floor",
             "check {hca} on {host}: its port rate and PCIe link (`mlxlink -d {dev}`, `lspci "
             "-vv`), that GPU {gpu} and the HCA share a PCIe switch (`nvidia-smi topo -m`) and "
             "ACS is off on it; then rerun `gpufleet smoke -l {host} --level full`: "
             "{gbps} Gb/s, floor {floor} Gb/s ({basis})",
             meaning="The full level's `gdr` check (a NUMA-pinned loopback `ib_write_bw "
                     "--use_cuda` per ACTIVE HCA, smoke/remote/gdr.py) measured less than the "
                     "floor: the published per-HCA GPUDirect floors (Azure's "
                     "azurehpc-health-checks: H100 > 380, H200 > 360, A100 > 180 Gb/s), never "
                     "above 0.9 x the port's rate.",
             doc_fill={"hca": "the HCA", "dev": "DEV", "gpu": "N", "gbps": "B", "floor": "F",
                       "basis": "the floor's basis"}),
    RuleInfo("GF623", "error", "multinode world used InfiniBand without GPUDirect RDMA",
             "find what keeps NCCL off GPUDirect on {host} ({cause}); then rerun `gpufleet "
             "smoke --multinode -l {host}` and check that its NET/IB connections say GDRDMA",
             meaning="A multinode NCCL world ran NET/IB connections without `/GDRDMA` although "
                     "every host of it has a GPUDirect RDMA path (a peer-memory client "
                     "registered with ib_core, or DMA-BUF). The likely cause is named: "
                     "NCCL_NET_GDR_LEVEL or NCCL_DMABUF_ENABLE=0 in a file or the environment, "
                     "else the GPU and HCA farther apart on PCIe than NCCL_NET_GDR_LEVEL "
                     "allows (default PXB).",
             doc_fill={"cause": "the cause found"}),
    RuleInfo("GF624", "warning", "GPUDirect RDMA bandwidth test failed on an HCA",
             "run the loopback by hand on {host}: `ib_write_bw -d {dev} --use_cuda={gpu} "
             "--report_gbits` and the same with `localhost` in a second shell; {error}",
             meaning="The `gdr` check's `ib_write_bw --use_cuda` loopback on an ACTIVE HCA "
                     "did not report a bandwidth (the client could not connect, the CUDA "
                     "buffer could not be registered, or it did not finish): that HCA's "
                     "GPUDirect bandwidth is unknown.",
             doc_fill={"dev": "DEV", "gpu": "N", "error": "the tool's last line"}),
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
             "ansible-playbook gpufleet.gpu.site --tags pytorch_workspace -l {host} (recreates "
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
             meaning="The node has a finding at or above `--fail-on` whose drain policy drains, "
                     "but gpufleet already drained its partition's share (`--breaker-share`) "
                     "within `--breaker-window` for the same drain class (hardware, driver, "
                     "software: docs/slurm.md); the node stays in service. Evidence lists the "
                     "drained nodes, the limit per partition and `drain_class`."),
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
             meaning="The node's drain reason is `gpufleet: RMA GF43x …` (GF430, GF432 or GF433 "
                     "drained it): the hardware keeps failing, and gpufleet never resumes such a "
                     "node, "
                     "even when a later check looks healthy."),
    RuleInfo("GF907", "info", "node's lifecycle step: drain reason updated",
             "nothing to do on {host}: the evidence `lifecycle` says the step (re-test failed "
             "after a remediation: drained again; or on to RMA)",
             meaning="A node gpufleet drained changed lifecycle state: the re-test after a "
                     "remediation (`gpufleet: re-validating …`) found it still faulty, or an "
                     "escalation (GF430/GF432/GF433) sends it to RMA; the reason is rewritten."),
)
