"""Fixtures for the role tests: a real Debian 12 target over SSH and real ansible-playbook runs."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import roletarget as tg

from harness.plays import PlayResult, run_play
from paths import COLLECTION

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent


def ansible_env(config: Path | None = REPO / "ansible.cfg") -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
        PATH=f"{VENV_BIN}:{env.get('PATH', '')}",
        ANSIBLE_SSH_RETRIES="2",
    )
    env.pop("ANSIBLE_CONFIG", None)
    if config is not None:
        env["ANSIBLE_CONFIG"] = str(config)
    return env


def run_playbook(
    playbook: Path,
    inventory: Path,
    logdir: Path,
    name: str,
    *args: str,
    extra_vars: dict[str, object] | None = None,
    env: dict[str, str] | None = None,
    cwd: Path = REPO,
) -> PlayResult:
    argv = [str(VENV_BIN / "ansible-playbook"), "-i", str(inventory), str(playbook), *args]
    return run_play(argv, logdir=logdir, name=name, default_host="deb12", cwd=cwd,
                    env=env or ansible_env(), timeout=1500, extra_vars=extra_vars)


@dataclass
class RoleLab:
    """The target host, the mirror and how to run playbooks against them."""

    target: tg.Target
    mirror: tg.Mirror
    inventory: Path
    logdir: Path
    driver_version: str

    def play(
        self,
        playbook: str | Path,
        name: str,
        *args: str,
        extra_vars: dict[str, object] | None = None,
    ) -> PlayResult:
        path = Path(playbook)
        if not path.is_absolute():
            path = COLLECTION / path
        return run_playbook(path, self.inventory, self.logdir, name, *args, extra_vars=extra_vars)

    def converge_vars(self) -> dict[str, object]:
        return {
            "nvidia_driver_source": "distro",
            "nvidia_driver_branch": self.driver_version.split(".")[0],
            "nvidia_driver_version": self.driver_version,
            "nvidia_driver_kernel_modules": "proprietary",
            # The chroot runs on this machine's kernel, for which Debian has no headers.
            "nvidia_driver_kernel_headers_required": False,
            "container_runtime_engine": "docker",
            "container_runtime_source": "distro",
            "container_runtime_daemon_options": {
                "log-driver": "json-file",
                "log-opts": {"max-size": "10m", "max-file": "3"},
                "live-restore": True,
            },
            "nvidia_container_toolkit_source": "mirror",
            "nvidia_container_toolkit_mirror_url": self.mirror.url,
            "nvidia_container_toolkit_mirror_key_url": self.mirror.key_url,
            "nvidia_container_toolkit_version": "1.19.1",
            "pytorch_image": "pytorch/pytorch:2.1.2-cuda12.1-cudnn8-runtime",
            "pytorch_image_digest": "sha256:" + "ab" * 32,
        }


def _write_inventory(path: Path, t: tg.Target) -> None:
    inv = {
        "all": {
            "hosts": {
                "deb12": {
                    "ansible_host": t.addr,
                    "ansible_user": "root",
                    "ansible_python_interpreter": "/usr/bin/python3",
                    "ansible_ssh_private_key_file": str(t.key),
                    # Host keys stay verified: the chroot's own key is in this known_hosts.
                    "ansible_ssh_common_args": (
                        f"-o UserKnownHostsFile={t.known_hosts} -o StrictHostKeyChecking=yes "
                        "-o ControlMaster=auto -o ControlPersist=60s "
                        # A control socket per run: another run's master for the same
                        # root@address must never carry this run's commands.
                        f"-o ControlPath={t.workdir}/cp-%C"
                    ),
                }
            }
        }
    }
    path.write_text(json.dumps(inv, indent=2))


@pytest.fixture(scope="session")
def role_lab() -> Iterator[RoleLab]:
    if os.geteuid() != 0 or shutil.which("debootstrap") is None:
        pytest.fail("role tests need root and debootstrap (scripts/setup.sh installs it)")
    workdir = Path(f"/var/tmp/gpufleet-role-tests-{os.getpid()}")
    shutil.rmtree(workdir, ignore_errors=True)
    logdir = workdir / "logs"
    logdir.mkdir(parents=True)
    t: tg.Target | None = None
    mirror: tg.Mirror | None = None
    gnupg = workdir / "gnupg"
    try:
        addr = tg.free_address()
        mirror = tg.build_mirror(workdir / "mirror", gnupg, addr)
        tg.serve_mirror(mirror, logdir / "mirror-http.log")
        t = tg.prepare_target(workdir, addr)
        tg.seed_apt_cache(t)
        version = tg.probe_driver_version(t)
        tg.start_sshd(t, logdir / "sshd.log")
        inventory = workdir / "inventory.json"
        _write_inventory(inventory, t)
        yield RoleLab(t, mirror, inventory, logdir, version)
    finally:
        tg.stop_lab(t, mirror, gnupg)
        if t is not None:
            tg.release_address(t.addr)
        # Logs survive for CI artifacts; the 700 MB tree does not.
        keep = Path(os.environ.get("GPUFLEET_ROLE_TEST_LOGS", "/var/tmp/gpufleet-role-test-logs"))
        shutil.rmtree(keep, ignore_errors=True)
        if logdir.exists():
            shutil.copytree(logdir, keep)
        shutil.rmtree(workdir, ignore_errors=True)
