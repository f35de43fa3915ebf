"""A Debian 12 target where systemd really is PID 1: a privileged container of a DockerLab engine
(dockerlib.py, the hand-started dockerd), reached over SSH with strict host keys.

What this kernel and Docker 20.10 need (found on the CI-like machine, hybrid cgroup v1 + v2):
every capability this machine holds (`--cap-add ALL` minus those missing from its bounding set:
`--privileged` asks for all and fails here without CAP_SYS_RESOURCE), seccomp, AppArmor and the
masked /proc paths off (the simulated driver binds files over /proc), the cgroup mounts remounted
read-write by the entry point before systemd starts,
`--cgroupns=private` (systemd gets a cgroup tree of its own, writable), tmpfs on /run and /run/lock
(systemd refuses a persistent /run; /run is where the CDI spec and the simulated driver state live,
so a container restart is a reboot), `container=docker` (systemd's virtualization detection: units
with ConditionVirtualization=!container stay off) and SIGRTMIN+3 as the stop signal (systemd's
halt request). The container shares the machine's network namespace: sshd listens only on the
127.0.0.x address reserved for this run, the engine inside runs with `bridge: none` and
`iptables: false`, and the units that would touch the machine rather than the container (udev,
sysctl, module loading, getty, apt timers) are masked before the first boot.

The tree is the debootstrap minbase cache of tests/ansible/roletarget.py with systemd, dbus and
docker.io added by apt in a chroot (tests/ansible/rootfs.py, cached and keyed on its inputs);
everything of one run (host key, client key, sshd config, stand-ins) is copied into the created
container before it starts, so nothing listens anywhere else even for a moment.
Stand-ins (sources cited in each): tests/ansible/standin/systemd/ (the NVIDIA kernel driver, DCGM)
and the toolkit packages of roletarget's mirror (nvidia-ctk, the CDI refresh units).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from dockerlib import LABEL, DockerLab, LabError, free_address, make_lab

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ansible"))
sys.path.append(str(Path(__file__).resolve().parents[1]))  # tests/: the shared harness
import roletarget as tg
import rootfs

from harness.plays import PlayResult, run_play
from paths import COLLECTION

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
STANDIN = REPO / "tests/ansible/standin/systemd"
# Added by apt to the role tests' cached minbase tree (rootfs.derived_tarball).
EXTRA = ["systemd", "systemd-sysv", "dbus", "docker.io"]
HOST = "sd1"
# Units that act on the machine, not the container (host network, privileged).
MASKED = [
    "systemd-udevd.service", "systemd-udevd-control.socket", "systemd-udevd-kernel.socket",
    "systemd-udev-trigger.service", "systemd-udev-settle.service", "systemd-sysctl.service",
    "systemd-modules-load.service", "kmod-static-nodes.service", "systemd-remount-fs.service",
    "getty.target", "console-getty.service", "getty@tty1.service", "systemd-logind.service",
    "sys-kernel-debug.mount", "sys-kernel-tracing.mount", "sys-kernel-config.mount",
    "sys-fs-fuse-connections.mount", "dev-hugepages.mount", "dev-mqueue.mount",
    "proc-sys-fs-binfmt_misc.automount", "systemd-binfmt.service", "systemd-firstboot.service",
    "systemd-random-seed.service", "systemd-hwdb-update.service", "systemd-journald-audit.socket",
    "apt-daily.timer", "apt-daily-upgrade.timer", "fstrim.timer", "e2scrub_all.timer",
]  # fmt: skip
# The inner engine: no bridge and no iptables in the machine's network namespace; a tmpfs data
# root (overlay2 does not stack on the container's own overlay root).
INNER_DAEMON_JSON = {"bridge": "none", "iptables": False, "ip-masq": False, "live-restore": True}


@dataclass
class SystemdTarget:
    lab: DockerLab
    container: str
    addr: str
    key: Path
    known_hosts: Path
    inventory: Path
    logdir: Path
    mirror: tg.Mirror

    def ssh(self, *remote: str, check: bool = True,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:  # fmt: skip
        """One command on the target as root (argv joined by the remote shell: pass constants
        or shlex.quote'd text only)."""
        proc = subprocess.run(
            ["ssh", "-F", "none", "-i", str(self.key), "-o", "BatchMode=yes",
             "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={self.known_hosts}",
             f"root@{self.addr}", *remote],
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
        if check and proc.returncode != 0:
            raise AssertionError(f"ssh {' '.join(remote)} exited {proc.returncode}:\n"
                                 f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")  # fmt: skip
        return proc

    def play(self, playbook: Path, name: str, *args: str,
             extra_vars: dict[str, object] | None = None) -> PlayResult:  # fmt: skip
        env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
               "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}",
               "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}  # fmt: skip
        argv = [str(VENV_BIN / "ansible-playbook"), "-i", str(self.inventory), str(playbook), *args]
        return run_play(argv, logdir=self.logdir, name=name, default_host=HOST, cwd=REPO,
                        env=env, timeout=900, extra_vars=extra_vars)

    def journal(self, *units: str) -> str:
        """The units' status and journal of this boot, for a failure message."""
        argv = ["sh", "-c", " ".join(
            f"systemctl status --no-pager {u} 2>&1; journalctl -b --no-pager -n 40 -u {u} 2>&1;"
            for u in units)]  # fmt: skip
        return self.lab.docker("exec", self.container, *argv, check=False).stdout[-6000:]

    def reboot(self) -> None:
        """docker restart: a new boot (tmpfs /run empty), the same disk."""
        self.lab.docker("restart", "-t", "20", self.container, timeout=120)
        wait_booted(self)


# Everything --privileged gives that systemd and the simulated driver need, without asking for
# capabilities this machine's bounding set lacks (--privileged requests all of them: runc then fails
# "unable to apply caps: operation not permitted" where e.g. CAP_SYS_RESOURCE is not held, as on
# this 2-core machine).
CONFINEMENT = ["--cap-add", "ALL", "--security-opt", "seccomp=unconfined",
               "--security-opt", "apparmor=unconfined", "--security-opt", "systempaths=unconfined"]
# Capability numbers (linux/include/uapi/linux/capability.h).
CAPABILITIES = (  # noqa: SIM905 - the header's names in bit order, readable
    "CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP LINUX_IMMUTABLE "
    "NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER SYS_MODULE SYS_RAWIO "
    "SYS_CHROOT SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE SYS_RESOURCE SYS_TIME "
    "SYS_TTY_CONFIG MKNOD LEASE AUDIT_WRITE AUDIT_CONTROL SETFCAP MAC_OVERRIDE MAC_ADMIN SYSLOG "
    "WAKE_ALARM BLOCK_SUSPEND AUDIT_READ PERFMON BPF CHECKPOINT_RESTORE"
).split()
# Without --privileged the engine mounts the cgroup file systems read-only; systemd must write its
# own (private) cgroup tree, so the entry point remounts them read-write, then execs systemd.
INIT = """#!/bin/sh
# gpufleet tests (tests/docker/systemdtarget.py): cgroups writable for systemd, then systemd.
# (the per-hierarchy mounts are bind mounts: their read-only flag goes with remount,bind,rw)
for m in /sys/fs/cgroup /sys/fs/cgroup/*; do
  mountpoint -q "$m" || continue
  mount -o remount,bind,rw "$m" 2>/dev/null || mount -o remount,rw "$m" \\
    || echo "gpufleet-init: $m stays read-only" >&2
done
exec /sbin/init
"""


def missing_capabilities() -> list[str]:
    """--cap-drop for every capability up to the kernel's last that this process cannot grant."""
    bounding = 0
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapBnd:"):
            bounding = int(line.split()[1], 16)
    last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    return [arg for bit, name in enumerate(CAPABILITIES[: last + 1]) if not bounding >> bit & 1
            for arg in ("--cap-drop", name)]  # fmt: skip


def _image(lab: DockerLab) -> str:
    tarball = rootfs.derived_tarball(EXTRA)
    tag = f"gpufleet/systemd-target:{hashlib.sha256(tarball.name.encode()).hexdigest()[:12]}"
    lab.docker("import", "--change", 'CMD ["/sbin/init"]', str(tarball), tag, timeout=600)
    return tag


def _stage(stage: Path, addr: str, workdir: Path) -> tg.Target:
    """The run's own files, laid out as they go into the container's tree."""
    for d in ("etc/systemd/system/multi-user.target.wants", "etc/systemd/system/ssh.service.d",
              "etc/systemd/system/sysinit.target.wants", "etc/docker", "usr/sbin", "usr/bin",
              "usr/local/sbin", "root", "etc/ssh"):  # fmt: skip
        (stage / d).mkdir(parents=True, exist_ok=True)
    t = tg.ssh_access(tg.Target(root=stage, workdir=workdir, addr=addr))
    systemd = stage / "etc/systemd/system"
    # Debian's ssh.service runs `sshd -D $SSHD_OPTS` on /etc/ssh/sshd_config (every address).
    (systemd / "ssh.service.d/gpufleet.conf").write_text(
        "[Service]\nExecStartPre=\nExecStart=\n"
        "ExecStart=/usr/sbin/sshd -D -e -f /etc/ssh/sshd_config_gpufleet\n"
    )
    for unit in MASKED:
        (systemd / unit).symlink_to("/dev/null")
    (stage / "etc/docker/daemon.json").write_text(json.dumps(INNER_DAEMON_JSON, indent=2) + "\n")
    if not Path("/proc/modules").exists() and shutil.which("gcc"):
        # A kernel without module support: nothing to bind over; a preloaded shim opens the
        # simulated list where programs open /proc/modules (standin/systemd/procmodules.c).
        (stage / "usr/local/lib").mkdir(parents=True, exist_ok=True)
        tg.run(["gcc", "-shared", "-fPIC", "-O2", "-o",
                str(stage / "usr/local/lib/gpufleet-procmodules.so"),
                str(STANDIN / "procmodules.c"), "-ldl"])  # fmt: skip
        (stage / "etc/ld.so.preload").write_text("/usr/local/lib/gpufleet-procmodules.so\n")
    (stage / "usr/local/sbin/gpufleet-init").write_text(INIT)
    (stage / "usr/local/sbin/gpufleet-init").chmod(0o755)
    shutil.copy(STANDIN / "simdriver", stage / "usr/local/sbin/gpufleet-sim-driver")
    shutil.copy(STANDIN / "nv-hostengine", stage / "usr/bin/nv-hostengine")
    for tool in ("usr/sbin/modprobe", "usr/bin/nvidia-smi"):
        (stage / tool).symlink_to("/usr/local/sbin/gpufleet-sim-driver")
    for unit, target in (("nvidia-dcgm.service", "multi-user"),
                         ("gpufleet-sim-boot.service", "sysinit")):  # fmt: skip
        shutil.copy(STANDIN / unit, systemd / unit)
        (systemd / f"{target}.target.wants" / unit).symlink_to(f"/etc/systemd/system/{unit}")
    for f in (stage / "usr/local/sbin/gpufleet-sim-driver", stage / "usr/bin/nv-hostengine"):
        f.chmod(0o755)
    return t


def wait_booted(t: SystemdTarget, timeout: float = 60) -> None:
    """systemd finished starting (running, or degraded: a unit failed, which tests name) and
    sshd answers on the run's address."""
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        proc = t.lab.docker("exec", t.container, "systemctl", "is-system-running", check=False,
                            timeout=30)  # fmt: skip
        state = proc.stdout.strip()
        if state in ("running", "degraded"):
            break
        time.sleep(0.3)
    else:
        raise LabError(f"systemd in {t.container[:12]} not up after {timeout}s: {state!r}\n"
                       f"{t.lab.docker('logs', t.container, check=False).stdout[-3000:]}")
    tg.wait_port(t.addr, 22, timeout=max(1.0, deadline - time.monotonic()))
    sim = t.lab.docker("exec", t.container, "systemctl", "is-active", "gpufleet-sim-boot",
                       check=False).stdout.strip()  # fmt: skip
    if sim != "active":
        raise LabError(f"the simulated driver did not boot ({sim}):\n"
                       f"{t.journal('gpufleet-sim-boot')}")  # fmt: skip


def _inventory(path: Path, addr: str, key: Path, known_hosts: Path) -> None:
    path.write_text(json.dumps({"all": {"hosts": {HOST: {"ansible_host": addr}}, "vars": {
        "ansible_user": "root",
        "ansible_python_interpreter": "/usr/bin/python3",
        "ansible_ssh_private_key_file": str(key),
        "ansible_ssh_common_args": (f"-o UserKnownHostsFile={known_hosts} "
                                    "-o StrictHostKeyChecking=yes -o ControlMaster=auto "
                                    f"-o ControlPersist=60s -o ControlPath={path.parent}/cp-%C"),
    }}}, indent=2))  # fmt: skip


@contextlib.contextmanager
def start_systemd_target(workdir: Path) -> Iterator[SystemdTarget]:
    """One engine, one booted container, the toolkit mirror on the same address; all stopped by
    PID / removed on every exit path (the lab removes its containers when it closes)."""
    logdir = workdir / "logs"
    logdir.mkdir(parents=True)
    gnupg = workdir / "gnupg"
    mirror: tg.Mirror | None = None
    times: dict[str, float] = {}
    t0 = time.monotonic()
    with make_lab() as lab:
        try:
            image = _image(lab)
            times["image"] = time.monotonic() - t0
            addr = free_address((22, tg.MIRROR_PORT))
            mirror = tg.build_mirror(workdir / "mirror", gnupg, addr)
            tg.serve_mirror(mirror, logdir / "mirror-http.log")
            stage = workdir / "stage"
            target = _stage(stage, addr, workdir)
            container = lab.docker(
                "create", *CONFINEMENT, *missing_capabilities(), "--network", "host",
                "--cgroupns", "private", "--entrypoint", "/usr/local/sbin/gpufleet-init",
                "--tmpfs", "/run:exec,mode=0755", "--tmpfs", "/run/lock", "--tmpfs", "/tmp",
                "--tmpfs", "/var/lib/docker", "--tmpfs", "/var/lib/containerd",
                "-e", "container=docker", "--stop-signal", "SIGRTMIN+3",
                "--label", f"{LABEL}=systemd-target", image,
            ).stdout.strip()  # fmt: skip
            lab.docker("cp", f"{stage}/.", f"{container}:/", timeout=60)
            lab.docker("start", container)
            inventory = workdir / "inventory.json"
            _inventory(inventory, addr, target.key, target.known_hosts)
            st = SystemdTarget(lab, container, addr, target.key, target.known_hosts, inventory,
                               logdir, mirror)  # fmt: skip
            wait_booted(st)
            times["boot"] = time.monotonic() - t0 - times["image"]
            print(f"\n[systemd_target] image import {times['image']:.1f}s, mirror + boot "
                  f"{times['boot']:.1f}s", file=sys.stderr)  # fmt: skip
            yield st
        finally:
            if mirror is not None:
                mirror.stop()
            if gnupg.exists():
                subprocess.run(["gpgconf", "--homedir", str(gnupg), "--kill", "gpg-agent"],
                               check=False)  # fmt: skip


def play_path(name: str) -> Path:
    return REPO / "tests/ansible/playbooks" / name


__all__ = ["COLLECTION", "HOST", "PlayResult", "SystemdTarget", "start_systemd_target"]
