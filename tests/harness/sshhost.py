"""A simulated host reached over real OpenSSH, as the sshd fleet (tests/fleet/fleetlib.py,
netfleet.py) and the Slurm lab's nodes (tests/slurm/slurmlib.py) run one: its key pairs and
sshd_config, the controller's strict client argv, Ansible connection variables and environment,
and the boot loop that makes a host rebootable (tests/fleet/profiles/README.md, contract 7).
"""

from __future__ import annotations

import os
import pwd
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from harness.processes import descendants

REPO = Path(__file__).resolve().parents[2]
SSHD = "/usr/sbin/sshd"
# The replayed tools' state and the reboot stand-in's check live here, on the boot's own
# /proc/driver tmpfs (tests/fleet/profiles/build_profiles.py REPLAY and SIM_REBOOT).
SIM_STATE = "/proc/driver/gpufleet-sim"


def keygen(path: Path, comment: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip


def keygen_all(keys: Mapping[Path, str]) -> None:
    """Key pairs (path -> comment), made in parallel; RuntimeError with ssh-keygen's words."""
    jobs = [keygen(path, comment) for path, comment in keys.items()]
    for j in jobs:
        _, err = j.communicate()
        if j.returncode != 0:
            raise RuntimeError(f"ssh-keygen failed: {err.decode(errors='replace')}")


def public_key(path: Path) -> str:
    """"ssh-ed25519 AAAA…" of a key pair (the comment dropped), as known_hosts holds it."""
    return " ".join(path.with_suffix(".pub").read_text().split()[:2])


def sshd_config(address: str, host_key: Path, authorized_keys: Path, extra: str = "") -> str:
    return f"""\
ListenAddress {address}:22
HostKey {host_key}
PidFile none
AuthorizedKeysFile {authorized_keys}
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PermitUserRC no
PrintMotd no
X11Forwarding no
AcceptEnv LANG LC_*
MaxStartups 100:30:200
Subsystem sftp internal-sftp
{extra}# The non-root login user of the become test (test_become_fleet.py) brings its own key file:
# sshd reads authorized keys as the user, who cannot enter the fleet's root-only temp dir.
Match User gpufleet-become
    AuthorizedKeysFile .ssh/authorized_keys
"""


def client_argv(address: str, client_key: Path, known_hosts: Path, *remote: str) -> list[str]:
    """Plain OpenSSH argv for one host, strict host key checking against `known_hosts` only."""
    return [
        "ssh", "-F", "none", "-i", str(client_key), "-o", "BatchMode=yes",
        "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=yes",
        "-o", f"UserKnownHostsFile={known_hosts}", "-o", "ConnectTimeout=5",
        f"root@{address}", *remote,
    ]  # fmt: skip


def connection_vars(client_key: Path, known_hosts: Path, ssh_args: str = "") -> dict[str, str]:
    """Inventory variables for root over SSH with the lab's key and known_hosts."""
    return {
        "ansible_user": "root",
        "ansible_ssh_private_key_file": str(client_key),
        "ansible_ssh_common_args": f"-o UserKnownHostsFile={known_hosts} {ssh_args}".strip(),
        "ansible_python_interpreter": "/usr/bin/python3",
    }


def controller_env(home: Path) -> dict[str, str]:
    # Drop the developer's agent and ansible settings: the lab's key and files are the only ones.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SSH_", "ANSIBLE_", "PYTEST_"))}
    venv_bin = str(Path(sys.executable).parent)
    env.update(
        HOME=str(home),
        PATH=f"{venv_bin}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        PYTHONPATH=str(REPO / "agent"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_HOST_KEY_CHECKING="True",
        ANSIBLE_RETRY_FILES_ENABLED="False",
    )
    return env


def mask_bashrc(empty: Path) -> list[str]:
    """Namespace steps: root's ~/.bashrc here runs pyenv init on every session: it would put
    pyenv shims before the profile's bin on PATH and cost ~150 ms per command. A real GPU server
    has neither."""
    bashrc = Path(pwd.getpwnam("root").pw_dir) / ".bashrc"
    if not bashrc.exists():
        return []
    return [f"mount --bind {shlex.quote(str(empty))} {shlex.quote(str(bashrc))}"]


# ---------------------------------------------------------------------- rebootable hosts


def boot_loop(boot: Sequence[str], command: Sequence[str]) -> str:
    """sh text that boots a host again and again: each boot `boot` (an unshare of the host's
    namespaces) plus a new PID namespace whose PID 1 is `command` (its last exec: sshd). The
    reboot stand-in SIGTERMs that PID 1: sshd exits 0, the kernel kills every process of the
    boot (sessions, slurmd), and the loop boots the host again. Any other exit (sshd could not
    start) ends the loop, which the lab's readiness check reports. setpriv --pdeathsig and
    --kill-child take the boot down with the loop when the lab stops the host (the loop is the
    PID it tracks)."""
    one = ["setpriv", "--pdeathsig", "KILL", *boot, "--pid", "--kill-child", *command]
    return f"while {' '.join(shlex.quote(a) for a in one)}; do :; done; exit 1"


def pidns_steps() -> list[str]:
    """Namespace steps, run inside the boot's PID namespace: record it, so that the reboot
    stand-in takes down this boot's PID 1 and refuses anywhere else (PID 1 would be the
    machine's init). Needs the fresh /proc/driver tmpfs."""
    return [f"mkdir -p {SIM_STATE}", f"readlink /proc/self/ns/pid >{SIM_STATE}/pidns"]


def boot_steps(boots: Path, first_boot_id: Path) -> list[str]:
    """Namespace steps for this boot's identity: a boot count in `boots`/count, the first
    boot's id from `first_boot_id` (the profile's) and a new random one for each later boot,
    bind-mounted over /proc/sys/kernel/random/boot_id, and for a boot after a reboot the marker
    the replayed tools read ("ifreboot:" lines). Needs the fresh /proc/driver tmpfs."""
    q = shlex.quote
    return [
        f"boots={q(str(boots))}", 'mkdir -p "$boots"',
        'n=$(( $(cat "$boots/count" 2>/dev/null || echo 0) + 1 )); echo "$n" >"$boots/count"',
        f'if [ "$n" -eq 1 ]; then cp {q(str(first_boot_id))} "$boots/boot_id.1"; '
        'else cat /proc/sys/kernel/random/uuid >"$boots/boot_id.$n"; fi',
        'mount --bind "$boots/boot_id.$n" /proc/sys/kernel/random/boot_id',
        *pidns_steps(),
        f'if [ "$n" -gt 1 ]; then : >{SIM_STATE}/reboot; fi',
    ]


def boot_pid1(loop_pid: int) -> int | None:
    """The PID (as this process sees it) of the current boot's PID 1 under a boot loop, once it
    has exec'd sshd (its namespace is then complete); None while the host is down or booting."""
    for pid in descendants(loop_pid):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        nspid = next((ln.split()[1:] for ln in status.splitlines() if ln.startswith("NSpid:")), [])
        if len(nspid) >= 2 and nspid[-1] == "1":
            return pid if comm == "sshd" else None
    return None
