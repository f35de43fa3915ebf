"""Fixtures: two real sshd daemons (target 127.0.0.200, jump 127.0.0.201) and a throwaway HOME."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from sshdlab import Lab, Sshd, keygen, start_sshd


@pytest.fixture(scope="session")
def sshd_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    root = tmp_path_factory.mktemp("sshd-lab")
    client = keygen(root / "id_client")
    stranger = keygen(root / "id_stranger")
    authorized = root / "authorized_keys"
    shutil.copy(client.with_suffix(".pub"), authorized)
    servers: list[Sshd] = []
    try:
        servers.append(start_sshd(root / "target", "127.0.0.200", authorized))
        servers.append(start_sshd(root / "jump", "127.0.0.201", authorized))
        yield Lab(root, client, stranger, servers[0], servers[1], root / "home")
    finally:
        for server in servers:
            server.stop()


@pytest.fixture()
def lab(sshd_lab: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Lab:
    """The lab with a fresh, empty HOME (so ~/.ssh/config and known_hosts are the test's)."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("USER", "root")
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    sshd_lab.home = home
    return sshd_lab
