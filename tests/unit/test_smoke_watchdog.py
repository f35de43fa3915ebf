"""The launcher's watchdog for real (gloo, 2 CPU ranks, local transport): a rank killed with
SIGKILL, a rank stopped with SIGSTOP and a rank that stops making progress each end the world
within the issue's targets (dead <= 5 s, stopped/hung <= 30 s at quick), with the exact cause
and the rank named, `timeout` never claimed, and no process of the run left.
"""

from __future__ import annotations

import os
import secrets
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from gpufleet.model import Expectations, Facts, HostSpec
from gpufleet.smoke import runner
from gpufleet.smoke.runner import MARKER, SmokeOptions, run_smoke
from gpufleet.transport.local import LocalTransport

pytestmark = pytest.mark.slow
RUN_PREFIX = f"gfsmoke-w{os.getpid()}-"


@pytest.fixture(autouse=True)
def _own_run_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "_new_run_id", lambda: RUN_PREFIX + secrets.token_hex(4))


def _ours() -> dict[int, dict[str, str]]:
    """pid -> environment of this test's smoke processes (others may run smoke tests too)."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            raw = (d / "environ").read_bytes()
        except OSError:
            continue
        env = dict(e.split("=", 1) for e in raw.decode(errors="replace").split("\0") if "=" in e)
        if env.get(MARKER, "").startswith(RUN_PREFIX):
            out[int(d.name)] = env
    return out


def _rank_pid(rank: int, timeout: float = 120) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid, env in _ours().items():
            if env.get("RANK") == str(rank) and "LOCAL_RANK" in env:
                return pid
        time.sleep(0.05)
    raise AssertionError(f"rank {rank} never started")


def _torch_loaded(pid: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if "libtorch" in Path(f"/proc/{pid}/maps").read_text():
                return
        except OSError:
            return  # gone already: the kill below finds no process and the test says so
        time.sleep(0.05)


def _run(opts: SmokeOptions, attack: tuple[int, float] | None) -> tuple[object, dict[str, float]]:
    """The quick smoke; `attack` = (signal, seconds after rank 1 appears) sent to rank 1."""
    spec = HostSpec(name="local", address="localhost", connection="local",
                    expect=Expectations(smoke_python=sys.executable))
    sent: dict[str, float] = {}

    def hit() -> None:
        assert attack is not None
        pid = _rank_pid(1)
        if attack[0] == signal.SIGKILL:
            # mid-run: once torch is loaded (a fixed delay raced a quick run on an idle machine)
            _torch_loaded(pid)
        time.sleep(attack[1])
        os.kill(pid, attack[0])
        sent["t"] = time.monotonic()

    if attack is not None:
        threading.Thread(target=hit, daemon=True).start()
    res = run_smoke(spec, LocalTransport(spec), Facts(), level="quick", timeout=240,
                    options=opts)
    sent["end"] = time.monotonic()
    return res, sent


def test_a_killed_rank_ends_the_world_within_5_s_with_its_signal() -> None:
    res, t = _run(SmokeOptions(pg_timeout=600), (signal.SIGKILL, 0.5))
    assert res.status == "error", res.error  # type: ignore[attr-defined]
    causes = res.causes  # type: ignore[attr-defined]
    assert causes["ranks"]["1"]["signal"] == "SIGKILL"
    assert causes["watchdog"][0]["kind"] == "exited"
    assert causes["deadline"]["local"]["fired"] is False  # exit 137, but no deadline fired
    assert "rank 1 (local, pid" in res.error and "was killed by SIGKILL" in res.error  # type: ignore[attr-defined]
    assert "exceeded its timeout" not in res.error  # type: ignore[attr-defined]
    # The verdict: the launcher saw the death and ended rank 0 (its watchdog time).
    assert causes["ranks"]["0"]["ended_by_watchdog"] is True
    assert causes["ranks"]["0"]["t_exit"] - causes["ranks"]["1"]["t_exit"] <= 5.0
    assert t["end"] - t["t"] <= 5.0 + 10.0, t  # plus the runner's cleanup round trip
    assert _ours() == {}


def test_a_stopped_rank_is_named_within_30_s() -> None:
    res, t = _run(SmokeOptions(pg_timeout=600), (signal.SIGSTOP, 1.0))
    assert res.status == "error", res.error  # type: ignore[attr-defined]
    assert res.hung_ranks == (1,)  # type: ignore[attr-defined]
    verdict = res.causes["watchdog"][0]  # type: ignore[attr-defined]
    assert verdict["kind"] == "stopped" and verdict["ranks"] == [1]
    assert "rank 1 (pid" in res.error and "is stopped (state T" in res.error  # type: ignore[attr-defined]
    assert t["end"] - t["t"] <= 30.0, t
    assert _ours() == {}


def test_a_rank_that_stops_making_progress_is_named_within_30_s() -> None:
    """The test switch makes rank 1 sleep before the exact all-reduce; rank 0 waits inside it.
    Its heartbeat goes on (the process is alive), so only the progress stall can catch it."""
    res, _ = _run(SmokeOptions(pg_timeout=600, test_hang_rank=1), None)
    assert res.status == "error", res.error  # type: ignore[attr-defined]
    assert res.hung_ranks == (1,)  # type: ignore[attr-defined]
    verdict = res.causes["watchdog"][0]  # type: ignore[attr-defined]
    assert verdict["kind"] == "hung" and verdict["ranks"] == [1]
    assert "made no progress for 15 s while rank(s) 0 waited" in res.error  # type: ignore[attr-defined]
    # From the hang (rank 1's last progress) to the verdict: the quick stall limit, 15 s.
    assert verdict["at"] - verdict["where"]["1"]["t"] <= 30.0, verdict
    assert _ours() == {}
