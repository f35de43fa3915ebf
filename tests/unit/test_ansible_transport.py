"""transport/ansible.py over a stand-in for the action's `_low_level_execute_command` that runs
the command line with /bin/sh here, as Ansible's local connection does."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from gpufleet.transport.ansible import AnsibleTransport
from gpufleet.transport.base import TransportError


def execute(cmd: str, in_data: bytes | None) -> Mapping[str, Any]:
    proc = subprocess.run(cmd, shell=True, input=in_data, capture_output=True, timeout=30,
                          check=False)
    return {"rc": proc.returncode, "stdout": proc.stdout.decode(),
            "stderr": proc.stderr.decode()}


def test_timeout_is_enforced_on_the_host() -> None:
    res = AnsibleTransport("n1", execute).run(["sleep", "300"], timeout=1)
    assert res.timed_out and res.rc is None
    # Ended by the host-side timeout, not by the 300 s sleep nor execute()'s own 30 s limit.
    assert res.duration_s < 25


def test_arguments_env_and_stdin_arrive_unchanged() -> None:
    res = AnsibleTransport("n1", execute).run(
        ["sh", "-c", 'printf "%s|%s|" "$1" "$GF_X"; cat', "sh", "a b;$(x)"], timeout=10,
        stdin=b"in", env={"GF_X": "y z"})
    assert (res.rc, res.stdout, res.timed_out) == (0, "a b;$(x)|y z|in", False)


def test_put_writes_through_the_connection(tmp_path: Path) -> None:
    target = tmp_path / "it's here"
    AnsibleTransport("n1", execute).put(b"data", str(target), 0o600)
    assert target.read_bytes() == b"data" and target.stat().st_mode & 0o777 == 0o600
    with pytest.raises(TransportError, match=r"n1: cannot write .* through Ansible"):
        AnsibleTransport("n1", execute).put(b"x", str(tmp_path / "no" / "dir"))
