"""verify.yml over a directory inventory of two files (issue 37.2; reviews/newuser-2026-12-02.md,
edge 2): every inventory source of the play reaches gpufleet check, and a play host the report
does not list fails the play by name. Real ansible-playbook; no target host is needed (the one
command runs on the controller), so the hosts are 127.0.0.1 ports where nothing listens."""

from __future__ import annotations

import json
import socket
import stat
import sys
from pathlib import Path

from conftest import REPO, PlayResult, run_playbook
from paths import COLLECTION

VERIFY = COLLECTION / "playbooks" / "verify.yml"


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port: int = s.getsockname()[1]
    s.close()
    return port


def _two_file_inventory(tmp_path: Path) -> Path:
    inv = tmp_path / "inventory"
    inv.mkdir()
    port = _closed_port()
    for name in ("a", "b"):  # new01 in a.ini, new02 in b.ini: inventory_file differs per host
        n = "01" if name == "a" else "02"
        (inv / f"{name}.ini").write_text(
            f"[gpu]\nnew{n} ansible_host=127.0.0.1 ansible_port={port} ansible_user=root\n")
    return inv


def _verify_with_gpufleet(inv: Path, tmp_path: Path, name: str, *args: str) -> PlayResult:
    """verify.yml over `inv` (and `args`) with this checkout's gpufleet, facts level."""
    cli = Path(sys.executable).parent / "gpufleet"
    return run_playbook(VERIFY, inv, tmp_path, name, *args,
                        extra_vars={"gpufleet_cli": str(cli),
                                    "gpufleet_check_args": ["--level", "facts",
                                                            "--connect-timeout", "2"]},
                        cwd=REPO)


def test_a_directory_inventory_checks_the_hosts_of_every_file(tmp_path: Path) -> None:
    inv = _two_file_inventory(tmp_path)
    res = _verify_with_gpufleet(inv, tmp_path, "verify-dir")
    assert res.rc != 0, res.tail()
    # Both hosts were checked (both unreachable), none is missing: before, only a.ini was
    # passed, new02 matched no host and gpufleet exited 2 naming none of them.
    assert "gpufleet check exited 1 (findings at or above --fail-on)" in res.flat, res.tail()
    assert "failing hosts: new01, new02;" in res.flat, res.tail()
    assert "missing from the report (never checked): none." in res.flat, res.tail()


def test_a_play_host_missing_from_the_report_fails_the_play(tmp_path: Path) -> None:
    inv = _two_file_inventory(tmp_path)
    # A stand-in CLI that exits 0 with a report of one host only (the report-v1 shape of
    # agent/gpufleet/schema/report-v1.json, reduced to the fields the play reads).
    report = {"schema": "gpufleet.report/v1", "hosts": {"new01": {"status": "ok"}},
              "findings": []}
    cli = tmp_path / "gpufleet-one-host"
    cli.write_text(f"#!/bin/sh\ncat <<'EOF'\n{json.dumps(report)}\nEOF\n")
    cli.chmod(cli.stat().st_mode | stat.S_IXUSR)
    res = run_playbook(VERIFY, inv, tmp_path, "verify-missing",
                       extra_vars={"gpufleet_cli": str(cli)}, cwd=REPO)
    assert res.rc != 0, res.tail()
    assert "gpufleet check exited 0 (no findings)" in res.flat, res.tail()
    assert "missing from the report (never checked): new02." in res.flat, res.tail()


def test_two_inventory_options_check_the_hosts_of_both(tmp_path: Path) -> None:
    inv = _two_file_inventory(tmp_path)
    res = _verify_with_gpufleet(inv / "a.ini", tmp_path, "verify-two-i", "-i", str(inv / "b.ini"))
    assert res.rc != 0, res.tail()
    assert "failing hosts: new01, new02;" in res.flat, res.tail()
    assert "missing from the report (never checked): none." in res.flat, res.tail()
