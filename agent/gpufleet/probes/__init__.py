"""Probes: one shipped POSIX sh script per host, parsed locally by pure parsers.

`collect()` is the only function here that touches a host (through the injected Transport).
"""

from gpufleet.probes.collect import collect, parse_probe_output, probe_args, probe_script
from gpufleet.probes.containers import (
    parse_containerd_version,
    parse_docker_info,
    parse_repo_digests,
    parse_toolkit_version,
)
from gpufleet.probes.fabric import (
    parse_fabric_manager,
    parse_lspci_nvswitch,
    parse_nvidia_smi_q_fabric,
)
from gpufleet.probes.gpus import (
    decode_throttle_mask,
    nvidia_smi_failure,
    parse_nvidia_smi_header,
    parse_nvidia_smi_list,
    parse_nvidia_smi_q,
    parse_query_gpu_csv,
)
from gpufleet.probes.kernel_log import parse_xid_lines
from gpufleet.probes.processes import parse_compute_apps
from gpufleet.probes.sections import Section, split_sections
from gpufleet.probes.system import (
    parse_ldconfig_nccl,
    parse_ldconfig_nvml,
    parse_os_release,
    parse_proc_driver_version,
    parse_uname,
)
from gpufleet.probes.topology import nvlink_count, parse_nvlink_status, parse_topo_m

__all__ = [
    "Section",
    "collect",
    "decode_throttle_mask",
    "nvidia_smi_failure",
    "nvlink_count",
    "parse_compute_apps",
    "parse_containerd_version",
    "parse_docker_info",
    "parse_fabric_manager",
    "parse_ldconfig_nccl",
    "parse_ldconfig_nvml",
    "parse_lspci_nvswitch",
    "parse_nvidia_smi_header",
    "parse_nvidia_smi_list",
    "parse_nvidia_smi_q",
    "parse_nvidia_smi_q_fabric",
    "parse_nvlink_status",
    "parse_os_release",
    "parse_probe_output",
    "parse_proc_driver_version",
    "parse_query_gpu_csv",
    "parse_repo_digests",
    "parse_toolkit_version",
    "parse_topo_m",
    "parse_uname",
    "parse_xid_lines",
    "probe_args",
    "probe_script",
    "split_sections",
]
