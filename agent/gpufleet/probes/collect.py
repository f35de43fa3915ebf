"""One probe round trip per host: ship probe.sh, parse its sections into Facts."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
from collections.abc import Callable
from importlib import resources
from typing import Any, TypeVar

from gpufleet import ncclconf
from gpufleet.model import DriverInfo, FabricInfo, Facts, Gpu, HostSpec, ImageInfo, OsInfo, Topology
from gpufleet.probes.containers import (
    docker_failure,
    merge_workspace_checks,
    parse_containerd_version,
    parse_containers,
    parse_docker_info,
    parse_image_env,
    parse_repo_digests,
    parse_toolkit_version,
    parse_workspace_checks,
)
from gpufleet.probes.fabric import (
    fabric_info,
    parse_lspci_nvswitch,
    parse_nvidia_smi_q_fabric,
)
from gpufleet.probes.gpus import (
    gpu_from_q,
    nvidia_smi_failure,
    nvml_library_version,
    parse_nvidia_smi_q,
    parse_nvidia_smi_q_header,
    parse_query_gpu_csv,
    query_gpu_driver_version,
)
from gpufleet.probes.kernel_log import parse_xid_lines
from gpufleet.probes.processes import parse_compute_apps
from gpufleet.probes.sections import NOT_FOUND_RC, Section, split_sections
from gpufleet.probes.system import (
    has_nccl,
    os_info,
    parse_ldconfig_nccl,
    parse_ldconfig_nvml,
    parse_proc_driver_version,
)
from gpufleet.probes.topology import parse_nvlink_status, parse_topo_m
from gpufleet.transport.base import Transport

DEFAULT_TOOL_TIMEOUT = 10.0
T = TypeVar("T")


@functools.cache
def probe_script() -> str:
    """The POSIX sh probe (agent/gpufleet/probes/probe.sh)."""
    return resources.files("gpufleet.probes").joinpath("probe.sh").read_text(encoding="utf-8")


def probe_args(spec: HostSpec, tool_timeout: float = DEFAULT_TOOL_TIMEOUT) -> list[str]:
    """argv for the remote shell; values travel as positional parameters, never as code."""
    args = ["sh", "-s", "--", f"tool_timeout={tool_timeout:g}"]
    if spec.expect.pytorch_image:
        args.append(f"image={spec.expect.pytorch_image}")
    return args


def collect(
    transport: Transport,
    spec: HostSpec,
    *,
    timeout: float = 60.0,
    raw_sink: Callable[[str], None] | None = None,
    tool_timeout: float | None = None,
) -> Facts:
    """Run the probe on one host (one transport.run) and parse it.

    tool_timeout bounds each tool on the host (default 10 s, less when `timeout` is short, so
    one hung tool still leaves time for the others). TransportError propagates: the caller
    maps it to the host's status.
    """
    if tool_timeout is None:
        tool_timeout = max(1.0, min(DEFAULT_TOOL_TIMEOUT, round(timeout / 6)))
    collected_at = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    result = transport.run(
        probe_args(spec, tool_timeout),
        stdin=probe_script().encode(),
        timeout=timeout,
    )
    if raw_sink is not None:
        raw_sink(result.stdout)
    facts = parse_probe_output(result.stdout, collected_at=collected_at)
    errors = dict(facts.errors)
    if result.timed_out:
        errors["probe"] = f"probe did not finish within {timeout:g} s; facts are partial"
    elif "probe" in errors and result.rc not in (0, None):
        last = result.stderr.strip().splitlines()[-1:] or [""]
        errors["probe"] = f"probe exited {result.rc}: {last[0]}".rstrip(": ")
    return dataclasses.replace(facts, errors=errors, probe_duration_s=round(result.duration_s, 3))


def tool_failure(tool: str, section: Section, tool_timeout: str) -> str:
    first = next((ln.strip() for ln in section.text.splitlines() if ln.strip()), "")
    if section.rc == NOT_FOUND_RC:
        return f"{tool}: not found"
    if section.hung:
        return f"{tool} hung (no answer in {tool_timeout} s)"
    return f"{tool} exited {section.rc}: {first}" if first else f"{tool} exited {section.rc}"


_SMI_FAMILIES = (
    ("nvidia_smi_q", "fabric"),
    ("topo", "topology"),
    ("nvlink", "nvlink"),
    ("compute_apps", "gpu_processes"),
)


def parse_probe_output(text: str, *, collected_at: str | None = None) -> Facts:
    """The probe's sectioned output -> Facts (pure). Missing or failed facts are None/empty
    with a sentence in Facts.errors[family]."""
    errors: dict[str, str] = {}

    def safe(family: str, default: Any, parse: Callable[..., T], *args: Any) -> T:
        """What `parse` read, or `default` and a "could not read" sentence: one odd line
        from a host costs that fact, never the host's whole fact set."""
        try:
            return parse(*args)
        except Exception as exc:  # a parser bug on odd host data costs one fact, not all
            errors[family] = f"could not read {family}: {type(exc).__name__}: {exc}"[:300]
            got: T = default
            return got

    s = safe("probe", {}, split_sections, text)
    meta = safe("probe", {}, _key_values, s["meta"].stdout) if "meta" in s else {}
    tt = meta.get("tool_timeout", "?")
    if not s:
        errors["probe"] = "probe printed nothing"
    elif "end" not in s:
        errors["probe"] = "probe output ended early (no end marker); facts are partial"

    def ok(name: str) -> str | None:
        section = s.get(name)
        return section.stdout if section is not None and section.ok else None

    def fail(family: str, name: str, tool: str) -> None:
        section = s.get(name)
        if section is not None and not section.ok:
            errors[family] = tool_failure(tool, section, tt)

    # -- OS, kernel, kernel module
    fail("os", "os_release", "cat /etc/os-release")
    fail("kernel", "uname", "uname")
    os_facts = safe("os", OsInfo(), os_info, ok("os_release"), ok("uname"))
    module_version, flavor = safe("kernel_module", (None, None), parse_proc_driver_version,
                                  ok("proc_driver_version") or "")
    proc = s.get("proc_driver_version")
    if proc is not None and not proc.ok:
        errors["kernel_module"] = (
            "/proc/driver/nvidia/version: not present (NVIDIA kernel module not loaded)"
            if "No such file" in proc.text
            else tool_failure("cat /proc/driver/nvidia/version", proc, tt)
        )
    elif proc is not None and module_version is None:
        errors["kernel_module"] = f"unrecognised /proc/driver/nvidia/version: {proc.stdout[:120]!r}"

    # -- nvidia-smi: a failure of the tool itself is reported once, as "nvidia_smi"
    first = s.get("query_gpu")
    smi_error: str | None = None
    if first is not None and not first.ok and "is not a valid field" not in first.text:
        smi_error = nvidia_smi_failure(first.rc, first.text, tt)
        errors["nvidia_smi"] = smi_error
    for name, family in _SMI_FAMILIES:
        section = s.get(name)
        if smi_error is None and section is not None and not section.ok:
            errors[family] = nvidia_smi_failure(section.rc, section.text, tt)
            if section.hung and "nvidia_smi" not in errors and "skipped" not in section.text:
                errors["nvidia_smi"] = f"nvidia-smi hung (no answer in {tt} s)"

    q_text = ok("nvidia_smi_q") or ""
    q_driver, q_cuda = safe("driver", (None, None), parse_nvidia_smi_q_header, q_text)
    gpus = safe("gpus", (), parse_query_gpu_csv, ok("query_gpu") or ok("query_gpu_basic") or "")
    if not gpus and q_text:  # both CSV queries failed: the full -q parse is the fallback
        gpus = safe("gpus", (), _gpus_from_q, q_text)
    if first is not None and not first.ok and smi_error is None and not gpus:
        errors["gpus"] = nvidia_smi_failure(first.rc, first.text, tt)

    libs = ok("ldconfig")
    driver = DriverInfo(
        version=(
            safe("driver", None, query_gpu_driver_version,
                 ok("query_gpu") or ok("query_gpu_basic") or "")
            or q_driver
            or safe("driver", None, parse_ldconfig_nvml, libs or "")
            or safe("driver", None, nvml_library_version, first.text if first is not None else "")
        ),
        kernel_module_version=module_version,
        kernel_module_flavor=flavor,
        cuda_version=q_cuda,
    )

    # -- topology, NVLink, fabric
    topology = None
    topo_text = ok("topo")
    if topo_text is not None:
        topology = safe("topology", Topology(), parse_topo_m, topo_text)
        if not topology.devices and "topology" not in errors:
            topology = None
            errors["topology"] = "nvidia-smi topo -m: no matrix in the output"
    nvlink = safe("nvlink", (), parse_nvlink_status, ok("nvlink") or "")
    fabric = safe("fabric", None, _fabric, s, q_text)

    # -- container stack
    toolkit = None
    if ok("toolkit") is not None:
        toolkit = safe("toolkit", None, parse_toolkit_version, ok("toolkit") or "")
        if toolkit is None and "toolkit" not in errors:
            errors["toolkit"] = "nvidia-ctk --version: no version in the output"
    fail("toolkit", "toolkit", "nvidia-ctk")
    docker = None
    info = s.get("docker_info")
    if info is not None:
        docker = safe("docker", None, parse_docker_info, info.stdout) if info.ok else None
        if info.rc == NOT_FOUND_RC or info.hung:
            errors["docker"] = tool_failure("docker", info, tt)
        elif docker is None and "docker" not in errors:
            errors["docker"] = docker_failure(info.text)
    containerd = safe("containerd", None, parse_containerd_version, ok("containerd") or "")
    fail("containerd", "containerd", "containerd")
    image = safe("image", None, _image, s.get("image"), meta.get("image") or None, errors, tt)
    # docker inspect exits 1 when one container vanished after `docker ps`: keep the others.
    section = s.get("containers")
    containers = safe("containers", (), parse_containers,
                      section.stdout if section is not None else "")
    if (checks := s.get("workspace_checks")) is not None:
        containers = safe("containers", containers, merge_workspace_checks, containers,
                          safe("containers", {}, parse_workspace_checks, checks.stdout))
    if not containers:
        fail("containers", "containers", "docker inspect")

    # -- libraries, kernel log, processes
    nccl = None
    if libs is not None:
        nccl = safe("nccl", None, parse_ldconfig_nccl, libs)
        if nccl is None and "nccl" not in errors:
            errors["nccl"] = (
                "libnccl is in the ldconfig cache but its version could not be resolved"
                if has_nccl(libs) else "no system libnccl in the ldconfig cache"
            )
    fail("nccl", "ldconfig", "ldconfig")
    xids = safe("xid", (), parse_xid_lines, ok("kernel_log") or "")
    fail("xid", "kernel_log", "dmesg")
    processes = safe("gpu_processes", (), parse_compute_apps, ok("compute_apps") or "")

    return Facts(
        collected_at=collected_at,
        os=os_facts,
        driver=driver,
        gpus=gpus,
        topology=topology,
        nvlink=nvlink,
        fabric=fabric,
        toolkit_version=toolkit,
        docker=docker,
        containerd_version=containerd,
        image=image,
        nccl_system_version=nccl,
        xid_events=xids,
        gpu_processes=processes,
        errors=errors,
        nccl_config=ncclconf.parse(ok("nccl_conf") or "") if ok("nccl_conf") is not None
        else None,
        containers=containers,
    )


def _gpus_from_q(q_text: str) -> tuple[Gpu, ...]:
    query = parse_nvidia_smi_q(q_text)
    return tuple(gpu_from_q(i, values) for i, values in enumerate(query.gpus))


def _fabric(s: dict[str, Section], q_text: str) -> FabricInfo | None:
    states, status = parse_nvidia_smi_q_fabric(q_text)
    lspci = s.get("lspci")
    count = parse_lspci_nvswitch(lspci.stdout) if lspci is not None and lspci.ok else 0
    manager = s.get("fabric_manager")
    return fabric_info(states, status, manager.stdout if manager else None, count)


def _image(
    section: Section | None, ref: str | None, errors: dict[str, str], tt: str
) -> ImageInfo | None:
    if section is None:
        return None
    if section.ok:
        return ImageInfo(ref=ref, digests=parse_repo_digests(section.stdout),
                         env=parse_image_env(section.stdout))
    if "No such image" in section.text:
        return ImageInfo(ref=ref, digests=())
    errors["image"] = (
        tool_failure("docker", section, tt)
        if section.rc == NOT_FOUND_RC or section.hung else docker_failure(section.text)
    )
    return None


def _key_values(text: str) -> dict[str, str]:
    pairs = (line.partition("=") for line in text.splitlines())
    return {key.strip(): value.strip() for key, sep, value in pairs if sep}
