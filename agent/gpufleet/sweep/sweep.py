"""The sweep: connect to every host, collect facts, optionally run the smoke test, one result each.

One SSH connection per host carries the probe and the smoke test; multinode runs keep the
connections of all reachable hosts open until the world has finished.
"""

from __future__ import annotations

import dataclasses
import threading
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from gpufleet import probes
from gpufleet.model import Facts, HostResult, HostSpec, SmokeResult
from gpufleet.redact import redact
from gpufleet.sweep.fanout import fan_out
from gpufleet.transport import Transport, TransportError, connect
from gpufleet.transport.watched import Watched


def _raw_sink(raw_dir: Path | None, name: str) -> Callable[[str], None] | None:
    if raw_dir is None:
        return None
    safe = raw_file_name(name)

    def sink(text: str) -> None:
        raw_dir.mkdir(parents=True, exist_ok=True)
        (raw_dir / safe).write_text(redact(text), encoding="utf-8")

    return sink


def raw_file_name(host: str) -> str:
    """A file name per host, unique and reversible (urllib.parse.unquote): gpu/1 → gpu%2F1.txt."""
    return urllib.parse.quote(host, safe="") + ".txt"


def probe(transport: Transport, spec: HostSpec, probe_timeout: float,
          raw_dir: Path | None = None) -> HostResult:
    """The host's facts; a probe that ran out of time keeps its partial facts as "timeout"."""
    watched = Watched(transport)
    facts = probes.collect(watched, spec, timeout=probe_timeout,
                           raw_sink=_raw_sink(raw_dir, spec.name))
    if watched.timed_out:
        why = facts.errors.get("probe") or f"probe did not finish within {probe_timeout:g} s"
        return HostResult(name=spec.name, status="timeout", error=f"{spec.name}: {why}",
                          facts=facts)
    return HostResult(name=spec.name, status="ok", facts=facts)


def connect_and_probe(spec: HostSpec, *, connect_timeout: float, accept_new_host_keys: bool,
                      probe_timeout: float, raw_dir: Path | None = None,
                      ) -> tuple[HostResult, Transport | None]:
    """Connect to `spec` and collect its facts: the result and, when the probe ran, the open
    transport, which the caller holds for the smoke test (or a world) and closes.

    A host that cannot be reached, or a connection lost mid-probe, is a result with its status
    and no transport (closed here).
    """
    try:
        transport = connect(spec, connect_timeout=connect_timeout,
                            accept_new_host_keys=accept_new_host_keys)
    except TransportError as exc:
        return HostResult(name=spec.name, status=exc.status, error=exc.message), None
    try:
        return probe(transport, spec, probe_timeout, raw_dir), transport
    except TransportError as exc:
        transport.close()
        return HostResult(name=spec.name, status=exc.status, error=exc.message), None


def gather_facts(
    specs: Sequence[HostSpec],
    *,
    forks: int | None = None,
    connect_timeout: float = 10.0,
    probe_timeout: float = 60.0,
    accept_new_host_keys: bool = False,
    raw_dir: Path | None = None,
    progress: bool | None = None,
) -> dict[str, HostResult]:
    """Facts for every host; a host that cannot be reached is a result with its status."""

    def work(spec: HostSpec) -> HostResult:
        probed, transport = connect_and_probe(
            spec, connect_timeout=connect_timeout, accept_new_host_keys=accept_new_host_keys,
            probe_timeout=probe_timeout, raw_dir=raw_dir)
        if transport is not None:
            transport.close()
        return probed

    return fan_out(specs, work, forks=forks, progress=progress, label="facts")


def run_check(
    specs: Sequence[HostSpec],
    *,
    smoke_level: str | None,
    multinode: bool = False,
    force: bool = False,
    forks: int | None = None,
    connect_timeout: float = 10.0,
    probe_timeout: float = 60.0,
    smoke_timeout: float = 600.0,
    accept_new_host_keys: bool = False,
    raw_dir: Path | None = None,
    progress: bool | None = None,
    smoke_without_gpu: bool = True,
) -> dict[str, HostResult]:
    """Facts, then the smoke test at `smoke_level` (None: none) on every host whose status is ok.

    Single-node: each host runs its own smoke on the connection that collected its facts.
    Multinode: every reachable host joins one world (gpufleet.smoke.runner.run_multinode).
    smoke_without_gpu=False skips hosts without nvidia-smi (the no-inventory "this machine"
    case: a laptop or CI box has nothing to smoke-test); otherwise they run CPU/gloo ranks.
    """
    if smoke_level is None:
        return gather_facts(specs, forks=forks, connect_timeout=connect_timeout,
                            probe_timeout=probe_timeout,
                            accept_new_host_keys=accept_new_host_keys, raw_dir=raw_dir,
                            progress=progress)
    from gpufleet.smoke import runner  # noqa: PLC0415  # torch-side code only when smoking

    level = smoke_level
    held: dict[str, Transport] = {}
    lock = threading.Lock()

    def work(spec: HostSpec) -> HostResult:
        probed, transport = connect_and_probe(
            spec, connect_timeout=connect_timeout, accept_new_host_keys=accept_new_host_keys,
            probe_timeout=probe_timeout, raw_dir=raw_dir)
        if transport is None:
            return probed
        keep = False
        try:
            facts = probed.facts
            if probed.status != "ok" or facts is None:
                return probed
            reason = None if smoke_without_gpu else _no_gpu(facts)
            if reason:
                skipped = SmokeResult(status="skipped", level=level, error=reason)
                return dataclasses.replace(probed, smoke=skipped)
            if multinode:
                keep = True
                with lock:
                    held[spec.name] = transport
                return probed
            smoke = _smoke_guarded(level, lambda: runner.run_smoke(
                spec, transport, facts, level=level, timeout=smoke_timeout, force=force))
            return dataclasses.replace(probed, smoke=smoke)
        except TransportError as exc:
            return HostResult(name=spec.name, status=exc.status, error=exc.message)
        finally:
            if not keep:
                transport.close()

    try:
        results = fan_out(specs, work, forks=forks, progress=progress,
                          label="check" if not multinode else "facts")
        if not multinode or not held:
            return results
        return _one_world(specs, held, results, level, smoke_timeout)
    finally:
        for transport in held.values():
            transport.close()


def _one_world(specs: Sequence[HostSpec], held: Mapping[str, Transport],
               results: Mapping[str, HostResult], level: str,
               smoke_timeout: float) -> dict[str, HostResult]:
    """The multinode smoke test of every held host as one world; its result on each member."""
    from gpufleet.smoke import runner  # noqa: PLC0415  # torch-side code only when smoking

    members = [(spec, held[spec.name], f) for spec in specs
               if spec.name in held and (f := results[spec.name].facts) is not None]
    names = tuple(m[0].name for m in members)
    try:
        smokes = runner.run_multinode(members, level=level, timeout=smoke_timeout)
    except Exception as exc:  # the world failed as a whole: every member says why
        failed = SmokeResult(status="error", level=level, error=f"{type(exc).__name__}: "
                             f"{exc}", hosts=names)
        smokes = dict.fromkeys(names, failed)
    missing = SmokeResult(status="error", level=level, hosts=names,
                          error="the multinode run returned no result for this host")
    return {
        name: dataclasses.replace(r, smoke=smokes.get(name, missing)) if name in held else r
        for name, r in results.items()
    }


def _no_gpu(facts: Facts) -> str | None:
    why = facts.errors.get("nvidia_smi", "")
    if facts.gpus or "not found" not in why:
        return None
    return f"no NVIDIA GPU ({why}): nothing to smoke-test"


def _smoke_guarded(level: str, run: Callable[[], SmokeResult]) -> SmokeResult:
    """A smoke runner bug or a lost connection mid-smoke must not erase the host's facts."""
    try:
        return run()
    except TransportError as exc:
        return SmokeResult(status="error", level=level, error=exc.message)
    except Exception as exc:
        return SmokeResult(status="error", level=level, error=f"{type(exc).__name__}: {exc}")
