"""Real OpenSSH sshd daemons on 127.0.0.200+ for the transport tests, stopped by PID.

Addresses 127.0.0.2-60 belong to the shared test fleet; these stay out of its way.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # tests/: the shared harness
from harness.processes import die_with_parent, stop_pid

SSHD = "/usr/sbin/sshd"
PORT = 2222


def keygen(path: Path, kind: str = "ed25519") -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", path.name, "-f", str(path)],
                   check=True)
    return path


@dataclass
class Sshd:
    address: str
    port: int
    host_key: Path
    log: Path
    proc: subprocess.Popen[bytes]

    @property
    def host_key_line(self) -> str:
        """The known_hosts line OpenSSH would record for this server."""
        kind, blob = self.host_key.with_suffix(".pub").read_text().split()[:2]
        name = self.address if self.port == 22 else f"[{self.address}]:{self.port}"
        return f"{name} {kind} {blob}\n"

    def stop(self) -> None:
        stop_pid(self.proc, grace=5.0)


def start_sshd(base: Path, address: str, authorized: Path, extra: str = "",
               port: int = PORT, sftp: bool = True) -> Sshd:
    base.mkdir(parents=True, exist_ok=True)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation directory
    host_key = keygen(base / "host_ed25519")
    config = base / "sshd_config"
    log = base / "sshd.log"
    config.write_text(
        f"ListenAddress {address}:{port}\n"
        f"HostKey {host_key}\n"
        f"PidFile {base / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {authorized}\n"
        "UsePAM no\nStrictModes no\nPermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "AllowTcpForwarding yes\nLogLevel DEBUG1\n"
        "MaxStartups 100:30:200\n"
        + ("Subsystem sftp internal-sftp\n" if sftp else "")
        + extra
    )
    proc = subprocess.Popen([SSHD, "-D", "-f", str(config), "-E", str(log)],
                            preexec_fn=die_with_parent)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection((address, port), timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(
                    f"sshd on {address}:{port} did not start: {log.read_text()}") from None
            time.sleep(0.05)
    return Sshd(address, port, host_key, log, proc)


@dataclass
class Lab:
    root: Path
    client_key: Path  # authorized on every server
    stranger_key: Path  # authorized nowhere
    target: Sshd  # 127.0.0.200
    jump: Sshd  # 127.0.0.201
    home: Path

    def known_hosts(self, *servers: Sshd) -> Path:
        path = self.home / ".ssh" / "known_hosts"
        path.write_text("".join(s.host_key_line for s in servers))
        return path


