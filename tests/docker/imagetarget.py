"""A debootstrap target (tests/ansible/roletarget.py) that reaches a DockerLab's engine, and the
two ways the tests drive things there: real ansible-playbook runs and the real gpufleet CLI.

One tree, one sshd listening on two loopback addresses: inventory hosts `img-a` and `img-b`
(a two-host world for the multinode smoke test; both are the same machine, as in the sshd fleet).
The engine is the lab's: its socket, pidfile and config dir are bind-mounted into the target's
mount namespace at /run/docker.sock, /run/docker.pid and /etc/docker, so the roles and the agent
on the target see an engine as on any Docker host without systemd.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from dockerlib import DOCKER, DockerLab, free_address

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ansible"))
sys.path.append(str(Path(__file__).resolve().parents[1]))  # tests/: the shared harness
import roletarget as tg

from harness.plays import PlayResult, run_play
from paths import COLLECTION

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
HOSTS = ("img-a", "img-b")
@dataclass
class ImageTarget:
    target: tg.Target
    mirror: tg.Mirror
    lab: DockerLab
    addresses: tuple[str, str]
    inventory: Path
    logdir: Path

    def host_vars(self) -> dict[str, object]:
        """Desired state for the target: the lab's image pinned by digest, docker, the mirror."""
        return {
            "container_runtime_engine": "docker",
            "container_runtime_source": "distro",
            "container_runtime_daemon_options": {"live-restore": True, "log-driver": "json-file",
                                                 "log-opts": {"max-size": "10m"}},
            "nvidia_container_toolkit_source": "mirror",
            "nvidia_container_toolkit_mirror_url": self.mirror.url,
            "nvidia_container_toolkit_mirror_key_url": self.mirror.key_url,
            "nvidia_container_toolkit_version": "1.19.1",
            "pytorch_image": self.lab.ref,
            "pytorch_image_digest": self.lab.digest,
            "pytorch_image_registry_insecure": True,
        }  # fmt: skip

    def play(
        self, playbook: str, name: str, *args: str,
        extra_vars: dict[str, object] | None = None, local: bool = False,
    ) -> PlayResult:  # fmt: skip
        """ansible-playbook against img-a over SSH, or (local) this machine with the lab's
        DOCKER_HOST, as a controller that is itself the Docker host."""
        env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
               "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}",
               "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}  # fmt: skip
        if local:
            env.update(self.lab.env)
            env["PATH"] = f"{VENV_BIN}:{os.environ.get('PATH', '')}"
            inv = ["-i", "localhost,", "-c", "local", "-e",
                   f"ansible_python_interpreter={sys.executable}"]  # fmt: skip
        else:
            inv = ["-i", str(self.inventory), "-l", HOSTS[0]]
        argv = [str(VENV_BIN / "ansible-playbook"), *inv, str(COLLECTION / playbook), *args]
        return run_play(argv, logdir=self.logdir, name=name, default_host=HOSTS[0], cwd=REPO,
                        env=env, timeout=900, extra_vars=extra_vars)

    def cli(self, *args: str, env: dict[str, str] | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:  # fmt: skip
        """The gpufleet CLI against the target's inventory (stdout = the report)."""
        return subprocess.run([sys.executable, "-m", "gpufleet", *args, "-i", str(self.inventory)],
                              cwd=self.logdir, env={**self.cli_env(), **(env or {})},
                              capture_output=True, text=True, timeout=timeout,
                              check=False)  # fmt: skip

    def cli_env(self) -> dict[str, str]:
        """The CLI's environment: no agent, no docker client settings of this machine."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("SSH_", "DOCKER_", "GPUFLEET_", "PYTEST_"))}  # fmt: skip
        env["PYTHONPATH"] = str(REPO / "agent")
        return env

    def ssh(self, *remote: str, host: int = 0) -> subprocess.CompletedProcess[str]:
        t = self.target
        return subprocess.run(
            ["ssh", "-F", "none", "-i", str(t.key), "-o", "BatchMode=yes",
             "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={t.known_hosts}",
             f"root@{self.addresses[host]}", *remote],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip


def _inventory(path: Path, t: tg.Target, addresses: tuple[str, str], lab: DockerLab) -> None:
    # A control socket of this run's own: a master connection of another run to the same
    # address would be reused without checking this target's host key.
    hosts = {name: {"ansible_host": addr} for name, addr in zip(HOSTS, addresses, strict=True)}
    path.write_text(json.dumps({"all": {"hosts": hosts, "vars": {
        "ansible_user": "root",
        "ansible_python_interpreter": "/usr/bin/python3",
        "ansible_ssh_private_key_file": str(t.key),
        "ansible_ssh_common_args": (f"-o UserKnownHostsFile={t.known_hosts} "
                                    "-o StrictHostKeyChecking=yes -o ControlMaster=auto "
                                    f"-o ControlPersist=60s -o ControlPath={path.parent}/cp-%C"),
        "container_runtime_engine": "docker",
        "pytorch_image": lab.ref,
        "pytorch_image_digest": lab.digest,
        "gpufleet_smoke_runtime": "docker",
    }}}, indent=2))  # fmt: skip


@contextlib.contextmanager
def start_image_target(workdir: Path, lab: DockerLab) -> Iterator[ImageTarget]:
    logdir = workdir / "logs"
    logdir.mkdir(parents=True)
    t: tg.Target | None = None
    mirror: tg.Mirror | None = None
    gnupg = workdir / "gnupg"
    try:
        # This harness's own range (tests/ansible's targets take 127.0.0.70-99), reserved.
        first = free_address((22, tg.MIRROR_PORT))
        second = free_address((22,))
        mirror = tg.build_mirror(workdir / "mirror", gnupg, first)
        tg.serve_mirror(mirror, logdir / "mirror-http.log")
        t = tg.prepare_target(workdir, first)
        with (t.root / "etc/ssh/sshd_config_gpufleet").open("a") as f:
            f.write(f"ListenAddress {second}\n")
        line = t.known_hosts.read_text().split(None, 1)[1]
        with t.known_hosts.open("a") as f:
            f.write(f"{second} {line}")
        tg.seed_apt_cache(t)
        binds = [(str(lab.socket), "/run/docker.sock"), (str(lab.pidfile), "/run/docker.pid"),
                 (str(lab.config_dir), "/etc/docker"), ("/tmp", "/tmp")]  # fmt: skip
        tg.start_sshd(t, logdir / "sshd.log", binds)
        tg.wait_port(second, 22)
        inventory = workdir / "inventory.json"
        _inventory(inventory, t, (first, second), lab)
        yield ImageTarget(t, mirror, lab, (first, second), inventory, logdir)
    finally:
        tg.stop_lab(t, mirror, gnupg)


__all__ = ["DOCKER", "HOSTS", "ImageTarget", "PlayResult", "start_image_target"]
