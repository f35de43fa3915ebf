"""`gpufleet localize` against real hosts: facts, exclusions, then the search over real worlds.

Every host is connected once and probed (gpufleet.sweep's connect_and_probe); the connections stay
open for the whole search and each world is one `run_multinode` over a subset of them. Hosts
the facts already rule out are reported and left out of every world, so they are never blamed
on others: not reachable (any status but ok), GPUs busy (without --force), or a torch/CUDA/NCCL
version that differs from the rest (mismatched NCCL aborts or hangs init).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from gpufleet.localize.judge import Expectation, Measured
from gpufleet.localize.rails import RailSearch, on_rail, read_addresses, search_rails
from gpufleet.localize.search import Localization, Strategy, WorldRunner, localize
from gpufleet.model import Facts, HostResult, HostSpec, SmokeResult
from gpufleet.redact import text as inert
from gpufleet.sweep.fanout import fan_out
from gpufleet.sweep.sweep import connect_and_probe
from gpufleet.transport import Transport, TransportError

# Versions without importing torch (a second per host per world would double the cost): the
# distribution metadata and torch/version.py, which is plain assignments.
_VERSIONS = r"""
import importlib.metadata as md, importlib.util as iu, json
out = {"torch": None, "cuda": None, "nccl": None}
try:
    out["torch"] = md.version("torch")
    spec = iu.find_spec("torch")
    for loc in (spec.submodule_search_locations or []) if spec else []:
        ns = {}
        with open(loc + "/version.py") as f:
            exec(f.read(), ns)
        out["cuda"] = ns.get("cuda")
        break
    nccl = sorted(d.version for d in md.distributions()
                  if (d.metadata["Name"] or "").lower().startswith("nvidia-nccl"))
    out["nccl"] = nccl[0] if nccl else None
except Exception as e:
    out["error"] = "%s: %s" % (type(e).__name__, e)
print(json.dumps(out))
"""


@dataclass(frozen=True)
class Excluded:
    # unreachable, auth_failed, hostkey_mismatch, hostkey_unknown, timeout, error, busy, version
    status: str
    reason: str


@dataclass(frozen=True)
class LocalizeRun:
    """What `gpufleet localize` reports: the facts, who was left out, and the search."""

    results: Mapping[str, HostResult]
    excluded: Mapping[str, Excluded]
    search: Localization
    expectation: str  # where "slow" came from, in words
    specs: Mapping[str, HostSpec] = field(default_factory=dict)
    rails: tuple[RailSearch, ...] = ()  # --rails: one search per rail (localize/rails.py)

    @property
    def outcome(self) -> str:
        """all_good only when the search and every rail's search are."""
        outcomes = {self.search.outcome, *(r.search.outcome for r in self.rails)}
        if outcomes == {"all_good"}:
            return "all_good"
        return "suspects" if "suspects" in outcomes else "inconclusive"


def inventory_floor(specs: Mapping[str, HostSpec]) -> Expectation | None:
    """gpufleet_multinode_min_busbw_gbps as the expectation: the lowest floor among members."""
    floors = {n: s.expect.multinode_min_busbw_gbps for n, s in specs.items()
              if s.expect.multinode_min_busbw_gbps is not None}
    if not floors:
        return None

    def floor(members: Sequence[str]) -> float | None:
        known = [floors[m] for m in members if m in floors]
        return min(known) if known else None

    return floor


def failure_domains(specs: Sequence[HostSpec], strategy: Strategy) -> dict[str, str]:
    """Host -> domain: gpufleet_domain where set; with --groups domain and no such variable,
    the inventory groups (hosts in the same groups form one domain)."""
    domains = {s.name: s.expect.domain for s in specs if s.expect.domain}
    if domains or strategy != "domain":
        return domains
    return {s.name: ",".join(sorted(s.groups)) or "ungrouped" for s in specs}


def measured(names: tuple[str, ...], smokes: Mapping[str, SmokeResult],
             duration: float) -> Measured:
    """A world's SmokeResults (one per member, the world's checks on each) as one Measured."""
    first = next((smokes[n] for n in names if n in smokes), None)
    if first is None:
        return Measured(names, None, error="the runner returned no result", duration_s=duration)
    busbw = world_busbw(first)
    if first.status == "pass":
        return Measured(names, busbw, duration_s=duration)
    if first.status == "fail":
        failed = [c for c in first.checks if not c.passed]
        if busbw is not None and all(c.name == "busbw" for c in failed):
            return Measured(names, busbw, duration_s=duration)  # slow: the search judges it
        return Measured(names, busbw, error=first.error or "a check failed",
                        duration_s=duration)
    return Measured(names, busbw, error=first.error or first.status,
                    hung=first.status == "timeout", duration_s=duration)


def world_busbw(smoke: SmokeResult) -> float | None:
    """The world's bus bandwidth at the largest message size measured (not a host's own)."""
    for c in smoke.checks:
        sizes = c.data.get("sizes") if c.name == "busbw" else None
        if isinstance(sizes, dict) and sizes:
            top = max(sizes, key=int)
            value = sizes[top].get("busbw_gbps") if isinstance(sizes[top], dict) else None
            return float(value) if isinstance(value, int | float) else None
    if smoke.busbw_gbps and len(smoke.hosts) <= 1:
        return float(smoke.busbw_gbps[max(smoke.busbw_gbps)])
    return None


def _versions(transport: Transport, spec: HostSpec) -> dict[str, str | None] | str:
    """{"torch", "cuda", "nccl"} on the host, or why they could not be read."""
    if spec.expect.smoke_runtime == "docker":
        return {}  # the image digest pins them; run_multinode checks inside the image
    res = transport.run([spec.expect.smoke_python, "-c", _VERSIONS], timeout=60)
    return parse_versions(res.stdout, res.stderr, res.rc, spec.expect.smoke_python)


def parse_versions(stdout: str, stderr: str, rc: int | None,
                   python: str) -> dict[str, str | None] | str:
    """The _VERSIONS script's last line as {"torch", "cuda", "nccl"}: each a string or None,
    or a sentence saying why not. The host's answer is untrusted: a list or a number there
    crashed the exclusions for every host (security review F16), so anything but a string or
    null makes this one host's versions unreadable."""
    line = (stdout.strip().splitlines() or [""])[-1]
    try:
        got = json.loads(line)
    except ValueError:
        return f"could not read torch versions: {(stderr.strip() or f'exit {rc}')[-300:]}"
    if not isinstance(got, dict):
        return "could not read torch versions: not a JSON object"
    if got.get("error") or not got.get("torch"):
        return f"no usable torch for {python}: {inert(got.get('error') or 'not found')[:300]}"
    picked = {k: got.get(k) for k in ("torch", "cuda", "nccl")}
    odd = sorted(k for k, v in picked.items() if v is not None and not isinstance(v, str))
    if odd:
        return f"could not read torch versions: {', '.join(odd)} not a string"
    return {k: v if v is None else inert(v)[:100] for k, v in picked.items()}


def _exclusions(
    results: Mapping[str, HostResult],
    versions: Mapping[str, dict[str, str | None] | str],
    force: bool,
) -> dict[str, Excluded]:
    out: dict[str, Excluded] = {}
    for name, r in results.items():
        if r.status != "ok" or r.facts is None:
            out[name] = Excluded(r.status, r.error or r.status)
        elif r.facts.gpu_processes and not force:
            procs = ", ".join(f"pid {p.pid} {p.name}" for p in r.facts.gpu_processes)
            out[name] = Excluded("busy", f"GPU compute processes running ({procs}); "
                                 "--force tests it anyway")
        elif isinstance(versions.get(name), str):
            out[name] = Excluded("error", str(versions[name]))
    keyed = {n: tuple(sorted((k, v or "") for k, v in v.items()))
             for n, v in versions.items() if isinstance(v, dict) and v and n not in out}
    if len(set(keyed.values())) > 1:
        common, _ = Counter(keyed.values()).most_common(1)[0]
        want = ", ".join(f"{k} {v or 'none'}" for k, v in common)
        for n, key in keyed.items():
            if key != common:
                have = ", ".join(f"{k} {v or 'none'}" for k, v in key)
                out[n] = Excluded("version", f"{have}; most hosts have {want} (mismatched "
                                  "NCCL aborts or hangs init): align the image or torch first")
    return out


def _baseline(expectation: Expectation | None,
              specs: Mapping[str, HostSpec]) -> tuple[Expectation | None, str]:
    """What a world is judged against, and how the report names it: the topology's expectation,
    else the inventory floor, else the run's own worlds."""
    if expectation is not None:
        return expectation, "topology expectation"
    floor = inventory_floor(specs)
    if floor is not None:
        return floor, "gpufleet_multinode_min_busbw_gbps"
    return None, "this run's worlds (median of same-size worlds minus margin)"


def progress_line(show: Callable[[str], None]) -> Callable[[str], None]:
    """`show`, with each line made inert first: progress carries host output (smoke errors,
    exclusion reasons), and stderr is a terminal (security review F8)."""
    return lambda text: show(inert(text))


@dataclass(frozen=True)
class _Worlds:
    """Makes world runners over the held connections: `(specs, label)` -> a WorldRunner whose
    worlds are one run_multinode each (the specs decide interface and address: rails.py)."""

    held: Mapping[str, Transport]
    facts: Mapping[str, Facts]
    versions: Mapping[str, dict[str, str | None] | str]
    level: str
    timeout: float
    force: bool
    say: Callable[[str], None]

    def __call__(self, spec_of: Mapping[str, HostSpec], label: str) -> WorldRunner:
        from gpufleet.smoke.runner import run_multinode  # noqa: PLC0415

        def run(names: tuple[str, ...]) -> Measured:
            members = [(spec_of[n], self.held[n], self.facts[n]) for n in names]
            started = time.monotonic()
            try:
                # The versions read before the search: no torch import per host per world to
                # read them again (run_multinode still compares them across the world).
                known = {n: v for n in names if isinstance(v := self.versions.get(n), dict)}
                smokes = run_multinode(members, level=self.level, timeout=self.timeout,
                                       force=self.force, versions=known)
            except Exception as exc:  # the world failed as a whole
                return Measured(names, None, error=f"{type(exc).__name__}: {exc}",
                                duration_s=time.monotonic() - started)
            m = measured(names, smokes, round(time.monotonic() - started, 3))
            bw = f"{m.busbw_gbps:.4g} GB/s" if m.busbw_gbps is not None else "no bandwidth"
            self.say(f"{label}world of {len(names)} ({', '.join(names)}): {bw}"
                     f"{'; ' + m.error[:200] if m.error else ''} in {m.duration_s:.1f} s")
            return m

        return run


def run_localize(
    specs: Sequence[HostSpec],
    *,
    level: str = "quick",
    force: bool = False,
    forks: int | None = None,
    connect_timeout: float = 10.0,
    probe_timeout: float = 60.0,
    smoke_timeout: float = 300.0,
    accept_new_host_keys: bool = False,
    strategy: Strategy = "auto",
    max_worlds: int | None = None,
    expectation: Expectation | None = None,
    rails: Sequence[str] = (),
    progress: Callable[[str], None] | None = None,
) -> LocalizeRun:
    """Connect, probe, exclude, then search (and search each rail: localize/rails.py).
    `expectation` (e.g. from the topology) wins over the inventory floor; without either, the
    run's own worlds are the baseline."""
    say = progress_line(progress or (lambda text: print(f"gpufleet: {text}", file=sys.stderr)))
    held: dict[str, Transport] = {}
    versions: dict[str, dict[str, str | None] | str] = {}
    addresses: dict[str, dict[str, str | None]] = {}
    lock = threading.Lock()

    def work(spec: HostSpec) -> HostResult:
        probed, transport = connect_and_probe(
            spec, connect_timeout=connect_timeout, accept_new_host_keys=accept_new_host_keys,
            probe_timeout=probe_timeout)
        if transport is None:
            return probed
        try:
            if probed.status == "ok":
                found = _versions(transport, spec)
                on_rails = read_addresses(transport, rails)
                with lock:
                    held[spec.name], versions[spec.name] = transport, found
                    addresses[spec.name] = on_rails
                return probed
        except TransportError as exc:
            probed = HostResult(name=spec.name, status=exc.status, error=exc.message)
        transport.close()
        return probed

    by_name = {s.name: s for s in specs}
    try:
        results = fan_out(specs, work, forks=forks, label="facts")
        excluded = _exclusions(results, versions, force)
        for name, ex in excluded.items():
            say(f"{name} left out ({ex.status}): {ex.reason}")
        hosts = [s.name for s in specs if s.name in held and s.name not in excluded]
        facts: dict[str, Facts] = {n: f for n in hosts if (f := results[n].facts) is not None}

        runner = _Worlds(held, facts, versions, level=level, timeout=smoke_timeout,
                         force=force, say=say)

        def on(rail: str, have: Mapping[str, str]) -> WorldRunner:
            return runner({n: on_rail(by_name[n], rail, a) for n, a in have.items()},
                          f"rail {rail}: ")

        chosen, basis = _baseline(expectation, {n: by_name[n] for n in hosts})
        domains = failure_domains([by_name[n] for n in hosts], strategy)
        search = localize(hosts, runner(by_name, ""), expectation=chosen, domains=domains,
                          strategy=strategy, max_worlds=max_worlds)
        per_rail = search_rails(hosts, rails, addresses, on, expectation=chosen,
                                domains=domains, strategy=strategy, max_worlds=max_worlds)
    finally:
        for transport in held.values():
            transport.close()
    return LocalizeRun(results, excluded, search, basis, by_name, per_rail)
