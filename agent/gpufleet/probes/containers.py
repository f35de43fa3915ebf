"""Container stack: NVIDIA Container Toolkit, docker, containerd, the pinned image (pure)."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from gpufleet.model import ContainerInfo, DockerInfo, ImageInfo
from gpufleet.probes.sections import NOT_FOUND_RC, Family, ProbeOutput, Section, tool_failure

_VERSION = re.compile(r"\bv?(\d+\.\d+\.\d+(?:[-+~][0-9A-Za-z.+~-]+)?)")


def parse_toolkit_version(text: str) -> str | None:
    """`nvidia-ctk --version`: "NVIDIA Container Toolkit CLI version 1.17.8" -> "1.17.8"."""
    match = re.search(r"version\s+v?(\d+\.\d+\.\d+\S*)", text)
    return match.group(1) if match else None


def parse_containerd_version(text: str) -> str | None:
    """`containerd --version`: "containerd containerd.io 1.7.27 05044ec..." -> "1.7.27"."""
    match = _VERSION.search(text)
    return match.group(1) if match else None


def parse_docker_info(text: str) -> DockerInfo | None:
    """`docker info --format '{{json .}}'` (or the probe's five-key subset) -> DockerInfo.

    None when the text holds no JSON object or no server version (daemon unreachable: the
    client still prints the template with empty values).
    """
    data = _json_object(text)
    if not data or not data.get("ServerVersion"):
        return None
    runtimes = data.get("Runtimes") or {}
    runc = data.get("RuncCommit")
    commit = runc.get("ID") if isinstance(runc, dict) else None
    plugins = data.get("Plugins")
    authz = data.get("Authz", plugins.get("Authorization") if isinstance(plugins, dict) else None)
    return DockerInfo(
        server_version=str(data["ServerVersion"]),
        runtimes=tuple(sorted(str(name) for name in runtimes)),
        default_runtime=data.get("DefaultRuntime") or None,
        runc_commit=str(commit) if isinstance(commit, str) and commit else None,
        authz_plugins=tuple(str(p) for p in authz) if isinstance(authz, list) else (),
    )


def parse_repo_digests(text: str) -> tuple[str, ...]:
    """`docker image inspect --format '{{json .RepoDigests}}' IMAGE` -> ("repo@sha256:...", ...)."""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("["):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, list):
                return tuple(str(v) for v in value)
    return ()


def parse_image_env(text: str) -> tuple[str, ...] | None:
    """The `env=[...]` line of the probe's image query (the image's Config.Env) -> ("K=V", ...).

    None when the line is missing (an older probe, a stand-in that does not answer it); an
    image without Env gives ().
    """
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("env="):
            try:
                value = json.loads(line[4:])
            except ValueError:
                return None
            if value is None:
                return ()
            if isinstance(value, list):
                return tuple(str(v) for v in value if "=" in str(v))
    return None


def docker_failure(text: str) -> str:
    """The docker client's own sentence ("Cannot connect to the Docker daemon at ...")."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    telling = [
        line for line in lines
        if any(w in line.lower() for w in ("cannot connect", "permission denied", "error"))
    ]
    chosen = (telling or lines or ["failed without output"])[0]
    return f"docker: {chosen}"


def _json_object(text: str) -> dict[str, Any] | None:
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    return None


# --------------------------------------------------------------------------- running containers

WORKSPACE_LABEL = "gpufleet.workspace"
_DIGEST = re.compile(r"@(sha256:[0-9a-f]{64})$")


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _ports(bindings: Any) -> tuple[str, ...]:
    """HostConfig.PortBindings {"8888/tcp": [{"HostIp": "127.0.0.1", "HostPort": "28000"}]}."""
    found = []
    if isinstance(bindings, dict):
        for inside, hosts in sorted(bindings.items()):
            for b in hosts if isinstance(hosts, list) else []:
                if isinstance(b, dict):
                    ip = str(b.get("HostIp") or "0.0.0.0")  # noqa: S104  (docker's "all")
                    found.append(f"{ip}:{b.get('HostPort') or '?'}->{inside}")
    return tuple(found)


def _gpus(requests: Any) -> tuple[str, ...]:
    """HostConfig.DeviceRequests of the gpu capability: device IDs, or "all" (Count -1)."""
    found: list[str] = []
    for r in requests if isinstance(requests, list) else []:
        if not isinstance(r, dict):
            continue
        caps = r.get("Capabilities") or []
        if r.get("Driver") == "cdi":
            # `--device nvidia.com/gpu=UUID`: the docker CLI sends CDI names as a request of
            # the "cdi" driver (docker/cli cli/command/container/opts.go; moby daemon/cdi.go).
            found += [str(i).split("=", 1)[1] for i in r.get("DeviceIDs") or []
                      if str(i).startswith("nvidia.com/gpu=")]
            continue
        if not any("gpu" in c for c in caps if isinstance(c, list)) and r.get("Driver") != "nvidia":
            continue
        ids = [str(i) for i in r.get("DeviceIDs") or []]
        found += ids if ids else (["all"] if r.get("Count") == -1 else [])
    return tuple(found)


def _gpu_env(entries: Any) -> str | None:
    """probe.sh's GpuEnv: the NVIDIA_VISIBLE_DEVICES=… entries of Config.Env (the last wins, as
    in the process environment), then a null the template ends the list with."""
    found = [str(e).partition("=")[2] for e in entries if isinstance(e, str)] if isinstance(
        entries, list) else []
    return found[-1] if found else None


def parse_containers(text: str) -> tuple[ContainerInfo, ...]:
    """`docker inspect --format '{"Id":…}' IDS` (probe.sh's ctr_format, one JSON per line)."""
    found = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line.startswith("{"):
            continue
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if not isinstance(data, dict) or not isinstance(data.get("Id"), str):
            continue
        raw_labels = data.get("Labels")
        labels: dict[str, Any] = raw_labels if isinstance(raw_labels, dict) else {}
        image = str(data["Image"]) if data.get("Image") else None
        digest = _DIGEST.search(image) if image else None
        uid = str(labels.get(f"{WORKSPACE_LABEL}.uid", ""))
        assigned = str(labels.get(f"{WORKSPACE_LABEL}.gpus") or "")
        found.append(ContainerInfo(
            id=data["Id"],
            name=str(data.get("Name") or "").lstrip("/"),
            image=image,
            image_digest=digest.group(1) if digest else None,
            workspace=str(labels[WORKSPACE_LABEL]) if labels.get(WORKSPACE_LABEL) else None,
            user=str(labels.get(f"{WORKSPACE_LABEL}.user") or data.get("User") or "") or None,
            uid=int(uid) if uid.isdigit() else None,
            gpus=_gpus(data.get("DeviceRequests")),
            ports=_ports(data.get("PortBindings")),
            memory_bytes=_int(data.get("Memory")),
            nano_cpus=_int(data.get("NanoCpus")),
            assigned_gpus=tuple(g.strip() for g in assigned.split(",") if g.strip()),
            runtime=str(data["Runtime"]) if data.get("Runtime") else None,
            gpu_env=_gpu_env(data.get("GpuEnv")),
        ))  # fmt: skip
    return tuple(found)


def parse_workspace_checks(text: str) -> dict[str, dict[str, Any]]:
    """probe.sh's workspace_checks: `container=ID rc=N` then the inside check's JSON line.

    -> {id: fields for ContainerInfo (jupyter_status, jupyter_uids, ssh_password_auth,
    ssh_root_login, check_error, pids: host PIDs from `docker top ID -eo pid`)}."""
    found: dict[str, dict[str, Any]] = {}
    current: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        head = re.fullmatch(r"container=([0-9a-f]{12,64}) rc=(\d+)", line)
        if head:
            current = head.group(1)
            rc = int(head.group(2))
            found[current] = {"check_error": None if rc == 0 else f"check exited {rc}"}
            continue
        if current is not None and line.startswith("pids="):
            found[current]["pids"] = tuple(int(x) for x in line[5:].split() if x.isdigit())
            continue
        if current is None or not line.startswith("{"):
            continue
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if not isinstance(data, dict):
            continue
        out = found[current]
        status = data.get("jupyter_status")
        out["jupyter_status"] = status if isinstance(status, int) else None
        uids = data.get("jupyter_uids")
        out["jupyter_uids"] = tuple(u for u in uids if isinstance(u, int)) if isinstance(
            uids, list) else ()
        sshd = data.get("sshd_T") if isinstance(data.get("sshd_T"), dict) else None
        if sshd is not None and data.get("sshd_T_rc") == 0:
            out["ssh_password_auth"] = (sshd.get("passwordauthentication") == "yes"
                                        or sshd.get("kbdinteractiveauthentication") == "yes")
            out["ssh_root_login"] = str(sshd.get("permitrootlogin") or "") or None
        problems = [f"jupyter: {data['jupyter_error']}" if data.get("jupyter_error") else "",
                    "" if sshd is not None else "no running sshd found"]
        out["check_error"] = "; ".join(p for p in problems if p) or out["check_error"]
    return found


def merge_workspace_checks(
    containers: tuple[ContainerInfo, ...], checks: dict[str, dict[str, Any]]
) -> tuple[ContainerInfo, ...]:
    return tuple(dataclasses.replace(c, **checks[c.id]) if c.id in checks else c
                 for c in containers)  # fmt: skip


# --------------------------------------------------------------------------- the families


def build_toolkit(out: ProbeOutput) -> dict[str, Any]:
    toolkit = None
    if (text := out.ok("toolkit")) is not None:
        toolkit = out.safe("toolkit", None, parse_toolkit_version, text)
        if toolkit is None and "toolkit" not in out.errors:
            out.errors["toolkit"] = "nvidia-ctk --version: no version in the output"
    out.fail("toolkit", "toolkit", "nvidia-ctk")
    return {"toolkit_version": toolkit}


def build_docker(out: ProbeOutput) -> dict[str, Any]:
    docker = None
    info = out.get("docker_info")
    if info is not None:
        docker = out.safe("docker", None, parse_docker_info, info.stdout) if info.ok else None
        if info.rc == NOT_FOUND_RC or info.hung:
            out.errors["docker"] = tool_failure("docker", info, out.tool_timeout)
        elif docker is None and "docker" not in out.errors:
            out.errors["docker"] = docker_failure(info.text)
    return {"docker": docker}


def build_containerd(out: ProbeOutput) -> dict[str, Any]:
    version = out.safe("containerd", None, parse_containerd_version, out.ok("containerd") or "")
    out.fail("containerd", "containerd", "containerd")
    return {"containerd_version": version}


def _image(out: ProbeOutput, section: Section | None) -> ImageInfo | None:
    ref = out.meta.get("image") or None
    if section is None:
        return None
    if section.ok:
        return ImageInfo(ref=ref, digests=parse_repo_digests(section.stdout),
                         env=parse_image_env(section.stdout))
    if "No such image" in section.text:
        return ImageInfo(ref=ref, digests=())
    out.errors["image"] = (
        tool_failure("docker", section, out.tool_timeout)
        if section.rc == NOT_FOUND_RC or section.hung else docker_failure(section.text)
    )
    return None


def build_image(out: ProbeOutput) -> dict[str, Any]:
    """The pinned image (meta `image=`, from pytorch_image): its local digests and Env."""
    return {"image": out.safe("image", None, _image, out, out.get("image"))}


def build_containers(out: ProbeOutput) -> dict[str, Any]:
    # docker inspect exits 1 when one container vanished after `docker ps`: keep the others.
    section = out.get("containers")
    containers = out.safe("containers", (), parse_containers,
                          section.stdout if section is not None else "")
    if (checks := out.get("workspace_checks")) is not None:
        containers = out.safe("containers", containers, merge_workspace_checks, containers,
                              out.safe("containers", {}, parse_workspace_checks, checks.stdout))
    if not containers:
        out.fail("containers", "containers", "docker inspect")
    return {"containers": containers}


TOOLKIT = Family("toolkit", sections=("toolkit",), errors=("toolkit",),
                 fields=("toolkit_version",), build=build_toolkit)
DOCKER = Family("docker", sections=("docker_info",), errors=("docker",), fields=("docker",),
                build=build_docker)
CONTAINERD = Family("containerd", sections=("containerd",), errors=("containerd",),
                    fields=("containerd_version",), build=build_containerd)
IMAGE = Family("image", sections=("image",), errors=("image",), fields=("image",),
               build=build_image)
CONTAINERS = Family("containers", sections=("containers", "workspace_checks"),
                    errors=("containers",), fields=("containers",), build=build_containers)
