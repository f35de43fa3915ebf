"""Become over SSH (issue 10 item 7): a non-root login user with passwordless sudo, smoke test.

The run dir is made under sudo (root, 0700); the script must still get there. The user and its
sudoers entry are made for this module and removed after it.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from fleetlib import Fleet

pytestmark = [pytest.mark.fleet, pytest.mark.slow]

USER = "gpufleet-become"
SUDOERS = Path("/etc/sudoers.d/gpufleet-become-test")


@pytest.fixture(scope="module")
def sudo_user(fleet: Fleet) -> Iterator[str]:
    try:
        pwd.getpwnam(USER)
        made = False
    except KeyError:
        # "*", not useradd's "!": with UsePAM no, sshd refuses a locked account even for keys.
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", "--password", "*",
                        USER], check=True)
        made = True
    home = Path(pwd.getpwnam(USER).pw_dir)
    (home / ".ssh").mkdir(mode=0o700, exist_ok=True)
    (home / ".ssh" / "authorized_keys").write_text(
        Path(f"{fleet.client_key}.pub").read_text())
    for path in (home / ".ssh", home / ".ssh" / "authorized_keys"):
        os.chown(path, pwd.getpwnam(USER).pw_uid, pwd.getpwnam(USER).pw_gid)
    fd = os.open(SUDOERS, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o440)
    with os.fdopen(fd, "w") as f:
        f.write(f"{USER} ALL=(ALL) NOPASSWD: ALL\n")
    try:
        subprocess.run(["visudo", "-cf", str(SUDOERS)], check=True, capture_output=True)
        yield USER
    finally:
        SUDOERS.unlink(missing_ok=True)
        if made:
            subprocess.run(["userdel", "--remove", USER], check=False, capture_output=True)


def test_smoke_as_a_non_root_user_with_sudo(fleet: Fleet, sudo_user: str, tmp_path: Path) -> None:
    extra = tmp_path / "become.yml"
    extra.write_text(yaml.safe_dump({"all": {"hosts": {"cpu-1": {
        "ansible_user": sudo_user, "ansible_become": True}}}}))
    before = fleet.hosts["cpu-1"].log.read_text(errors="replace").count(
        f"Accepted publickey for {sudo_user}")
    proc = subprocess.run(
        [sys.executable, "-m", "gpufleet", "smoke", "-i", str(fleet.inventory), "-i", str(extra),
         "-l", "cpu-1", "--format", "json"],
        env=fleet.env, cwd=fleet.root, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        pytest.fail(f"no JSON report (exit {proc.returncode}); stderr:\n{proc.stderr[-3000:]}")
    host = report["hosts"]["cpu-1"]
    assert host["status"] == "ok", host
    smoke = host["smoke"]
    assert smoke["status"] == "pass", (smoke["error"], smoke["log_tail"])
    assert smoke["world_size"] == 2
    # It really logged in as the non-root user (and became root through sudo).
    after = fleet.hosts["cpu-1"].log.read_text(errors="replace").count(
        f"Accepted publickey for {sudo_user}")
    assert after > before, fleet.log_tail("cpu-1")
    assert proc.returncode == 0, proc.stderr[-2000:]
