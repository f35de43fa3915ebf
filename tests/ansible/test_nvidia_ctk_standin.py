"""The nvidia-ctk stand-in (tests/ansible/standin/nvidia-ctk) on the configs the roles meet, run as
the role runs it; the behaviour it must match is toolkit v1.19.1's (sources in the stand-in).

Issue 23 G15: a containerd config with keys but no `version` is version 1. nvidia-ctk v1.19.1 does
not refuse it: it writes the whole v1 config, the runtime added under the `cri` plugin, into the
drop-in path and leaves the top-level file alone, so Docker's containerd.io config.toml (CRI
disabled) lands in 99-nvidia.toml with `disabled_plugins = ["cri"]`: the M7 defect the
container_runtime role must prevent by fixing config.toml first."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import tomllib

STANDIN = Path(__file__).resolve().parent / "standin" / "nvidia-ctk"

# Docker's containerd.io config.toml (docker/containerd-packaging@6551934:common/containerd.toml),
# licence header and most commented-out defaults left out: no version, CRI disabled.
DOCKER_CONTAINERD_CONFIG = """disabled_plugins = ["cri"]

#root = "/var/lib/containerd"
#[grpc]
#  address = "/run/containerd/containerd.sock"
"""


def ctk(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(STANDIN), *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, check=False, timeout=30)  # fmt: skip


def test_a_config_without_version_is_written_whole_into_the_drop_in(tmp_path: Path) -> None:
    top = tmp_path / "config.toml"
    top.write_text(DOCKER_CONTAINERD_CONFIG)
    dropin = tmp_path / "conf.d" / "99-nvidia.toml"
    proc = ctk("runtime", "configure", "--runtime=containerd", f"--config={top}",
               f"--drop-in-config={dropin}", "--cdi.enabled")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert top.read_text() == DOCKER_CONTAINERD_CONFIG, "a v1 top-level file is never touched"
    written = tomllib.loads(dropin.read_text())
    assert written["version"] == 1, written
    assert written["disabled_plugins"] == ["cri"], "the whole v1 config, CRI still disabled"
    containerd = written["plugins"]["cri"]["containerd"]
    assert containerd["runtimes"]["nvidia"] == {
        "runtime_type": "io.containerd.runc.v2", "runtime_root": "", "runtime_engine": "",
        "privileged_without_host_devices": False,
        "options": {"BinaryName": "/usr/bin/nvidia-container-runtime",
                    "Runtime": "/usr/bin/nvidia-container-runtime"},
    }, written  # fmt: skip
    assert containerd["enable_cdi"] is True, written
    assert "imports" not in written and "io.containerd.grpc.v1.cri" not in written["plugins"]


def test_a_versioned_config_still_gets_a_drop_in_and_an_import(tmp_path: Path) -> None:
    top = tmp_path / "config.toml"
    top.write_text('version = 2\ndisabled_plugins = []\n')
    dropin = tmp_path / "conf.d" / "99-nvidia.toml"
    proc = ctk("runtime", "configure", "--runtime=containerd", f"--config={top}",
               f"--drop-in-config={dropin}")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert tomllib.loads(top.read_text())["imports"] == [f"{tmp_path}/conf.d/*.toml"]
    written = tomllib.loads(dropin.read_text())
    assert "disabled_plugins" not in written, written
    assert "nvidia" in written["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]

