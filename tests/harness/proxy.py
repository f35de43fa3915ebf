"""A real HTTP proxy for the role tests: Debian's tinyproxy (scripts/setup.sh installs
tinyproxy-bin, the binary without the package's init script), started in the foreground by PID on
one 127.0.0.x address, stopped on every exit path (the context manager's finally, which Ctrl-C
runs too; PR_SET_PDEATHSIG when this process is killed outright).

It forwards only to 127.0.0.0/8 (a filter, default deny), so a test that routes a role through it
reaches nothing beyond this machine; its log names every request ("Request (file descriptor N):
GET http://... HTTP/1.1", tinyproxy 1.11's Connect-level line), which is what the tests read.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.processes import die_with_parent, stop_pid


@dataclass(frozen=True)
class HttpProxy:
    url: str
    log: Path

    def requests(self) -> list[str]:
        """The request lines tinyproxy logged ("GET http://host:port/path HTTP/1.1")."""
        marker = "]: Request (file descriptor "
        return [line.split("): ", 1)[1] for line in self.log.read_text().splitlines()
                if marker in line]  # fmt: skip


def _free_port(addr: str) -> int:
    with socket.socket() as s:
        s.bind((addr, 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def start_http_proxy(workdir: Path, addr: str) -> Iterator[HttpProxy]:
    binary = shutil.which("tinyproxy")
    if binary is None:
        raise RuntimeError("tinyproxy not found: scripts/setup.sh installs tinyproxy-bin")
    workdir.mkdir(parents=True, exist_ok=True)
    port = _free_port(addr)
    log = workdir / "tinyproxy.log"
    (workdir / "filter").write_text("^127\\.[0-9]+\\.[0-9]+\\.[0-9]+$\n")
    conf = workdir / "tinyproxy.conf"
    conf.write_text(
        f'Port {port}\nListen {addr}\nTimeout 60\nLogFile "{log}"\nLogLevel Connect\n'
        "MaxClients 20\nAllow 127.0.0.0/8\nDisableViaHeader Yes\n"
        f'Filter "{workdir / "filter"}"\nFilterType ere\nFilterDefaultDeny Yes\n'
    )
    with (workdir / "tinyproxy.err").open("wb") as err:
        proc = subprocess.Popen([binary, "-d", "-c", str(conf)], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err, start_new_session=True,
                                preexec_fn=die_with_parent)  # fmt: skip
    try:
        deadline = time.monotonic() + 15
        while True:
            with socket.socket() as s:
                s.settimeout(0.5)
                if s.connect_ex((addr, port)) == 0:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                err_text = (workdir / "tinyproxy.err").read_text()
                raise RuntimeError(f"tinyproxy did not listen on {addr}:{port} "
                                   f"(exit {proc.poll()}): {err_text}")  # fmt: skip
            time.sleep(0.05)
        yield HttpProxy(url=f"http://{addr}:{port}", log=log)
    finally:
        stop_pid(proc)
