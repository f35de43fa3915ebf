"""The whole chain, CLI to sshd: inventory connection variables, jump host, become, JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sshdlab import PORT, Lab


def test_facts_through_a_jump_host_with_become_from_an_ini_inventory(lab: Lab,
                                                                     tmp_path: Path) -> None:
    lab.known_hosts(lab.target, lab.jump)
    inv = tmp_path / "hosts.ini"
    inv.write_text(
        "[gpu]\n"
        f"behind ansible_host={lab.target.address} ansible_port={PORT} ansible_user=root "
        f"ansible_ssh_private_key_file={lab.client_key} ansible_become=true "
        f"ansible_ssh_common_args='-o ProxyJump=root@{lab.jump.address}:{PORT}'\n"
        "[other]\n"
        f"stranger ansible_host={lab.target.address} ansible_port={PORT} ansible_user=root "
        f"ansible_ssh_private_key_file={lab.stranger_key}\n"
    )
    # The jump host's key comes from ~/.ssh/config, as OpenSSH would find it.
    (lab.home / ".ssh" / "config").write_text(f"Host {lab.jump.address}\n"
                                              f"  IdentityFile {lab.client_key}\n")
    before = lab.jump.log.read_text().count("direct-tcpip")
    r = subprocess.run([sys.executable, "-m", "gpufleet", "facts", "-i", str(inv), "--format",
                        "json", "--connect-timeout", "5"], capture_output=True, text=True,
                       timeout=120, env=os.environ.copy())
    assert r.returncode == 1, r.stderr  # one host is not ok
    hosts = json.loads(r.stdout)["hosts"]
    assert hosts["behind"]["status"] == "ok", hosts["behind"]["error"]
    assert hosts["behind"]["facts"]["os"]["kernel"] == os.uname().release
    assert hosts["stranger"]["status"] == "auth_failed"
    assert lab.jump.log.read_text().count("direct-tcpip") > before
