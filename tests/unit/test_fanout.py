"""fan_out and the facts sweep: one result per host, bounded concurrency, failure as data."""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import gpufleet.probes
from gpufleet.model import Facts, HostResult, HostSpec, OsInfo, SmokeResult
from gpufleet.smoke import runner
from gpufleet.sweep import sweep as fleet
from gpufleet.sweep.fanout import default_forks, fan_out
from gpufleet.transport import Transport, TransportError

SPECS = [HostSpec(name=f"h{i:02d}", address=f"h{i:02d}", connection="local") for i in range(12)]


def test_one_result_per_host_in_inventory_order_whatever_work_does() -> None:
    def work(spec: HostSpec) -> HostResult:
        n = int(spec.name[1:])
        time.sleep((12 - n) * 0.002)  # finish in reverse order
        if n % 4 == 1:
            raise RuntimeError(f"boom {n}")
        if n % 4 == 2:
            raise SystemExit(3)  # not an Exception: still one result, never a dead sweep
        if n % 4 == 3:
            return HostResult(name="wrong-name", status="unreachable", error="down")
        return HostResult(name=spec.name, status="ok")

    results = fan_out(SPECS, work, forks=4, progress=False)
    assert list(results) == [s.name for s in SPECS]
    assert all(results[name].name == name for name in results)
    assert results["h01"].status == "error"
    assert "RuntimeError: boom 1" in (results["h01"].error or "")
    assert results["h02"].status == "error" and "SystemExit" in (results["h02"].error or "")
    assert results["h03"].status == "unreachable"
    assert results["h00"].status == "ok" and results["h00"].duration_s is not None


def test_concurrency_bound_is_respected_and_reached() -> None:
    lock = threading.Lock()
    running = peak = 0

    def work(spec: HostSpec) -> HostResult:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.03)
        with lock:
            running -= 1
        return HostResult(name=spec.name, status="ok")

    fan_out(SPECS, work, forks=3, progress=False)
    assert peak == 3


def test_default_forks_scale_with_cpus_and_hosts() -> None:
    assert default_forks(1) == 1
    assert 1 < default_forks(1000) <= 256


def test_empty_fleet() -> None:
    assert fan_out([], lambda s: HostResult(name=s.name, status="ok"), progress=False) == {}


def test_progress_bar_goes_to_stderr_only(capsys: pytest.CaptureFixture[str]) -> None:
    fan_out(SPECS[:3], lambda s: HostResult(name=s.name, status="ok"), progress=True)
    out, _ = capsys.readouterr()
    assert out == ""


# --------------------------------------------------------------------------- the facts sweep


class Recorder:
    def __init__(self, behaviour: Callable[[HostSpec], Facts]) -> None:
        self.behaviour = behaviour
        self.transports: list[Transport] = []

    def __call__(self, transport: Transport, spec: HostSpec, *, timeout: float,
                 raw_sink: Callable[[str], None] | None = None) -> Facts:
        self.transports.append(transport)
        uname = transport.run(["uname", "-r"], timeout=timeout)
        if raw_sink is not None:
            raw_sink(f"raw for {spec.name}\n")
        facts = self.behaviour(spec)
        return Facts(os=OsInfo(kernel=uname.stdout.strip()), errors=facts.errors)


def test_gather_facts_uses_the_transport_and_saves_raw(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    collect = Recorder(lambda s: Facts())
    monkeypatch.setattr(gpufleet.probes, "collect", collect)
    specs = [SPECS[0], HostSpec(name="odd/name", address="localhost", connection="local")]
    results = fleet.gather_facts(specs, raw_dir=tmp_path / "raw", progress=False)
    assert [r.status for r in results.values()] == ["ok", "ok"]
    assert results["h00"].facts is not None and results["h00"].facts.os.kernel
    assert (tmp_path / "raw" / "h00.txt").read_text() == "raw for h00\n"
    assert (tmp_path / "raw" / "odd%2Fname.txt").exists()  # unique, reversible names


def test_gather_facts_turns_transport_errors_into_statuses(monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    def behaviour(spec: HostSpec) -> Facts:
        if spec.name == "h01":
            raise TransportError("unreachable", "h01: connection lost (EOF)")
        if spec.name == "h02":
            raise KeyError("parser bug")
        return Facts()

    monkeypatch.setattr(gpufleet.probes, "collect", Recorder(behaviour))
    results = fleet.gather_facts(SPECS[:3], progress=False)
    assert (results["h00"].status, results["h01"].status) == ("ok", "unreachable")
    assert results["h01"].error == "h01: connection lost (EOF)"
    assert results["h02"].status == "error" and "KeyError" in (results["h02"].error or "")


def test_unreachable_host_never_reaches_collect(monkeypatch: pytest.MonkeyPatch) -> None:
    collect = Recorder(lambda s: Facts())
    monkeypatch.setattr(gpufleet.probes, "collect", collect)
    ssh = HostSpec(name="nowhere", address="no-such-host.invalid", port=22)
    results = fleet.gather_facts([ssh, SPECS[0]], connect_timeout=2, progress=False)
    assert results["nowhere"].status == "unreachable"
    assert "does not resolve" in (results["nowhere"].error or "")
    assert results["h00"].status == "ok" and len(collect.transports) == 1


def test_check_runs_smoke_only_where_facts_are_ok(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpufleet.probes, "collect", Recorder(lambda s: Facts()))
    calls: list[str] = []

    def run_smoke(spec: HostSpec, transport: Transport, facts: Facts | None, *, level: str,
                  timeout: float, force: bool) -> SmokeResult:
        calls.append(spec.name)
        if spec.name == "h01":
            raise ValueError("runner bug")
        return SmokeResult(status="pass", level=level)

    monkeypatch.setattr(runner, "run_smoke", run_smoke)
    ssh = HostSpec(name="nowhere", address="no-such-host.invalid", port=22)
    results = fleet.run_check([SPECS[0], SPECS[1], ssh], smoke_level="quick", connect_timeout=2,
                              progress=False)
    assert sorted(calls) == ["h00", "h01"]
    assert results["h00"].smoke == SmokeResult(status="pass", level="quick")
    smoke01 = results["h01"].smoke
    assert smoke01 is not None and smoke01.status == "error"
    assert "runner bug" in (smoke01.error or "")
    assert results["h01"].facts is not None  # the facts survive a smoke failure
    assert results["nowhere"].smoke is None


def test_hosts_without_nvidia_smi_can_skip_the_smoke(monkeypatch: pytest.MonkeyPatch) -> None:
    no_gpu = Facts(errors={"nvidia_smi": "nvidia-smi: not found"})
    monkeypatch.setattr(gpufleet.probes, "collect", Recorder(lambda s: no_gpu))

    def run_smoke(*args: object, **kwargs: object) -> SmokeResult:
        raise AssertionError("the smoke test must not run on a host without GPUs here")

    monkeypatch.setattr(runner, "run_smoke", run_smoke)
    results = fleet.run_check(SPECS[:1], smoke_level="quick", progress=False,
                              smoke_without_gpu=False)
    smoke = results["h00"].smoke
    assert smoke is not None and smoke.status == "skipped"
    assert smoke.error == "no NVIDIA GPU (nvidia-smi: not found): nothing to smoke-test"


def test_multinode_gets_every_reachable_host_with_open_transports(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(gpufleet.probes, "collect", Recorder(lambda s: Facts()))
    seen: list[tuple[str, bool]] = []

    def run_multinode(members: list[tuple[HostSpec, Transport, Facts | None]], *, level: str,
                      timeout: float) -> dict[str, SmokeResult]:
        for spec, transport, facts in members:
            # Each member's connection is still open while the world runs.
            alive = transport.run(["true"], timeout=5).rc == 0 and facts is not None
            seen.append((spec.name, alive))
        names = tuple(m[0].name for m in members)
        return {n: SmokeResult(status="pass", level=level, hosts=names) for n in names[:1]}

    monkeypatch.setattr(runner, "run_multinode", run_multinode)
    ssh = HostSpec(name="nowhere", address="no-such-host.invalid", port=22)
    results = fleet.run_check([SPECS[0], ssh, SPECS[1]], smoke_level="quick", multinode=True,
                              connect_timeout=2, progress=False)
    assert seen == [("h00", True), ("h01", True)]
    assert results["h00"].smoke is not None and results["h00"].smoke.status == "pass"
    missing = results["h01"].smoke
    assert missing is not None and missing.status == "error"  # no silent gap
    assert results["nowhere"].smoke is None and results["nowhere"].status == "unreachable"


def test_rich_progress_renders_to_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    err = Tty()
    monkeypatch.setattr("sys.stderr", err)
    fan_out(SPECS[:2], lambda s: HostResult(name=s.name, status="ok"), progress=None)
    assert "hosts" in err.getvalue() and "2/2" in err.getvalue()


def test_probe_that_runs_out_of_time_is_timeout_with_partial_facts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def collect(transport: Transport, spec: HostSpec, *, timeout: float,
                raw_sink: Callable[[str], None] | None = None) -> Facts:
        r = transport.run(["sleep", "5"], timeout=0.3)
        assert r.timed_out
        return Facts(os=OsInfo(kernel="6.1"), errors={"probe": "probe did not finish"})

    def run_smoke(*args: object, **kwargs: object) -> SmokeResult:
        raise AssertionError("no smoke test on a host that timed out")

    monkeypatch.setattr(gpufleet.probes, "collect", collect)
    monkeypatch.setattr(runner, "run_smoke", run_smoke)
    for results in (fleet.gather_facts(SPECS[:1], progress=False),
                    fleet.run_check(SPECS[:1], smoke_level="quick", progress=False)):
        h = results["h00"]
        assert (h.status, h.error) == ("timeout", "h00: probe did not finish")
        assert h.facts is not None and h.facts.os.kernel == "6.1" and h.smoke is None
