"""Without -i, the inventory is where ansible-playbook finds it: ANSIBLE_INVENTORY, else
ansible.cfg's `inventory =` (issue 37.2; reviews/newuser-2026-12-02.md, edge 5). Real CLI in a
subprocess (ansible-core reads its config per process), real ansible-core config manager."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port: int = s.getsockname()[1]
    s.close()  # nothing listens: the host is unreachable at once
    return port


def _gpufleet(cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("ANSIBLE_INVENTORY", "ANSIBLE_CONFIG")}
    return subprocess.run(
        [sys.executable, "-m", "gpufleet", "facts", "-l", "new01", "--connect-timeout", "2",
         "--format", "json"],
        capture_output=True, text=True, timeout=120, cwd=cwd, env=clean | env)


@pytest.mark.parametrize("where", ["ANSIBLE_INVENTORY", "ansible.cfg"])
def test_limit_without_i_uses_the_inventory_ansible_would(tmp_path: Path, where: str) -> None:
    (tmp_path / "hosts.ini").write_text(
        f"new01 ansible_host=127.0.0.1 ansible_port={_closed_port()} ansible_user=root\n")
    if where == "ansible.cfg":
        (tmp_path / "ansible.cfg").write_text("[defaults]\ninventory = hosts.ini\n")
        r = _gpufleet(tmp_path)
    else:
        r = _gpufleet(tmp_path, ANSIBLE_INVENTORY=str(tmp_path / "hosts.ini"))
    assert "needs an inventory" not in r.stderr
    assert r.returncode == 1, r.stderr  # judged: new01 is unreachable, not a usage error
    assert '"new01"' in r.stdout and '"unreachable"' in r.stdout


def test_without_any_inventory_a_limit_still_asks_for_one(tmp_path: Path) -> None:
    r = _gpufleet(tmp_path)
    assert r.returncode == 2
    assert "needs an inventory (-i, ANSIBLE_INVENTORY or ansible.cfg's inventory)" in r.stderr


_WITHOUT_ANSIBLE = """
import sys
sys.modules["ansible"] = None  # an agent-only node: ansible-core is not installed
from gpufleet.inventory import InventoryError, default_sources
try:
    print(default_sources())
except InventoryError as exc:
    print("error:", exc)
"""


@pytest.mark.parametrize("env", [{}, {"ANSIBLE_INVENTORY": "hosts.ini"}])
def test_without_ansible_core_no_inventory_is_this_machine_and_ansible_inventory_an_error(
        tmp_path: Path, env: dict[str, str]) -> None:
    """The lent H200 (agent and torch, no ansible-core) ran `gpufleet check` from the repository
    root, where ansible.cfg is: it crashed importing ansible (2026-12-03, session 9)."""
    (tmp_path / "ansible.cfg").write_text("[defaults]\nforks = 5\n")
    clean = {k: v for k, v in os.environ.items()
             if k not in ("ANSIBLE_INVENTORY", "ANSIBLE_CONFIG")}
    r = subprocess.run([sys.executable, "-c", _WITHOUT_ANSIBLE], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path, env=clean | {"HOME": str(tmp_path)} | env)
    assert r.returncode == 0, r.stderr
    if env:
        assert r.stdout.startswith("error: ANSIBLE_INVENTORY is set but ansible-core is not "
                                   "installed"), r.stdout
    else:
        assert r.stdout.strip() == "[]", r.stdout
