"""Container stack: NVIDIA Container Toolkit, docker, containerd, the pinned image (pure)."""

from __future__ import annotations

import json
import re
from typing import Any

from gpufleet.model import DockerInfo

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
    """`docker info --format '{{json .}}'` (or the probe's three-key subset) -> DockerInfo.

    None when the text holds no JSON object or no server version (daemon unreachable: the
    client still prints the template with empty values).
    """
    data = _json_object(text)
    if not data or not data.get("ServerVersion"):
        return None
    runtimes = data.get("Runtimes") or {}
    return DockerInfo(
        server_version=str(data["ServerVersion"]),
        runtimes=tuple(sorted(str(name) for name in runtimes)),
        default_runtime=data.get("DefaultRuntime") or None,
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
