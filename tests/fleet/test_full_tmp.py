"""A host whose /tmp is full (issue 22), on real sshd hosts: full1's /tmp is a 64 KiB tmpfs
filled to the last byte (fleetlib full_tmp), peer1 is the same profile with room.

One finding names the path and the free space; the facts that could be read are kept (none
reported absent that was only unreadable, so no false drift against the peer); the smoke says
ENOSPC and where, instead of "the launcher exited 0 without a result".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fleetlib import make_fleet

pytestmark = [pytest.mark.fleet, pytest.mark.slow]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root: Path = tmp_path_factory.mktemp("full-tmp")
    with make_fleet(root, [("full1", "h200x2"), ("peer1", "h200x2")], full_tmp=["full1"]) as f:
        return f.check_json(level="quick")


def _mine(doc: dict[str, Any], host: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for f in doc["findings"]:
        if host in f["hosts"]:
            out.setdefault(f["rule"], []).append(f["message"])
    return out


def test_one_finding_names_the_path_and_the_free_space(report: dict[str, Any]) -> None:
    found = _mine(report, "full1")
    assert found["GF011"] == [
        "/tmp on full1: 0 B free, a file written there keeps no content (no space left on "
        "device); the probe went on in /dev/shm, the smoke test needs ~1 MiB there"]
    assert "GF011" not in _mine(report, "peer1")
    tmp = report["hosts"]["full1"]["facts"]["tmpdir"]
    assert tmp == {"path": "/tmp", "free_bytes": 0, "writable": False, "fallback": "/dev/shm"}


def test_the_facts_are_kept_and_nothing_is_absent(report: dict[str, Any]) -> None:
    full, peer = (report["hosts"][n]["facts"] for n in ("full1", "peer1"))
    assert full["errors"] == peer["errors"], "nothing unreadable on full1 that peer1 could read"
    for key in ("docker", "driver", "toolkit_version", "os", "gpus", "topology"):
        assert full[key] == peer[key], key
    found = _mine(report, "full1")
    assert not {"GF010", "GF101", "GF104", "GF105", "GF107", "GF205"} & set(found), found


def test_the_smoke_says_enospc_and_where(report: dict[str, Any]) -> None:
    smoke = report["hosts"]["full1"]["smoke"]
    assert smoke["status"] == "error"
    assert "cannot upload the smoke bundle to /tmp/gpufleet-smoke." in smoke["error"]
    assert "on full1: no space left on device (ENOSPC): /tmp has 0 B free, the smoke needs ~" \
        in smoke["error"]
