"""GF455-GF459: RDMA and NVLink error counters as deltas between two runs.

Counters only mean something as a rate, so these rules take two report documents of the same
hosts (each host's newest saved run and this one: cli/saved.py, `--save DIR`; or a sample of
node-check's counter history, history/counters.py): a fatal counter that
rose at all (GF455), symbol errors per hour (GF456), non-fatal error rates (GF457), RoCE carrier
flaps per 24 h (GF458), an NVLink replay/recovery/CRC counter that rose (GF459). A counter that
went down was reset (driver reload, reboot): that port is not judged for that pair of runs.
Like rules/history.py these need a store, so `rules.evaluate` does not run them.

Thresholds and their sources (the anchors review, ../shared/reviews/anchors-2026-12-01.md §1C):
NVSentinel docs/nic-health-monitor/link-counter-detection.md for the counters (fatal: Δ>0 of
link_downed, excessive_buffer_overrun_errors, local_link_integrity_errors, rnr_nak_retry_err;
symbol_error_fatal >120/h, the IBTA BER of 1e-12; non-fatal: link_error_recovery >5/min,
port_rcv_errors >10/s, port_xmit_discards >100/s, local_ack_timeout_err >1/s), Azure's
azurehpc-health-checks check_ib_link_flapping for flaps (5 in 24 h), Meta GCM's NVLink defaults
(0 CRC, replay and recovery errors tolerated). GF456's and GF458's are inventory variables
(gpufleet_ib_symbol_errors_per_hour, gpufleet_ib_flaps_per_day).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from gpufleet.model import Expectations, Finding
from gpufleet.rules.base import finding
from gpufleet.rules.fabric import nic

# The ids this module emits (tests/unit/test_rules_plumbing.py holds it to that).
RULES: tuple[str, ...] = ("GF455", "GF456", "GF457", "GF458", "GF459")
# Which window each is about, for a history of many runs (history/counters.py): a rise at all
# or a count per 24 h, against the window's start; a rate, against about an hour ago.
WINDOW_RULES = ("GF455", "GF458", "GF459")
RATE_RULES = ("GF456", "GF457")

FATAL = (("counters", "link_downed"), ("counters", "local_link_integrity_errors"),
         ("counters", "excessive_buffer_overrun_errors"), ("hw_counters", "rnr_nak_retry_err"))
SYMBOL_ERRORS_PER_HOUR = 120.0
# (table, counter, threshold, seconds per unit, unit)
RATES = (("counters", "link_error_recovery", 5.0, 60.0, "per min"),
         ("counters", "port_rcv_errors", 10.0, 1.0, "per s"),
         ("counters", "port_xmit_discards", 100.0, 1.0, "per s"),
         ("hw_counters", "local_ack_timeout_err", 1.0, 1.0, "per s"))
FLAPS_PER_DAY = 5


def _when(hdoc: Mapping[str, Any]) -> datetime | None:
    facts = hdoc.get("facts")
    stamp = facts.get("collected_at") if isinstance(facts, Mapping) else None
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")) if stamp else None
    except ValueError:
        return None


def _links(hdoc: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    facts = hdoc.get("facts")
    links = facts.get("ib_links") if isinstance(facts, Mapping) else None
    if not isinstance(links, list):
        return {}
    return {nic(link): link for link in links if isinstance(link, Mapping)}


def _count(link: Mapping[str, Any], table: str, name: str) -> int | None:
    values = link.get(table)
    value = values.get(name) if isinstance(values, Mapping) else link.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def delta_findings(doc: Mapping[str, Any], previous: Mapping[str, Any],
                   expect: Mapping[str, Expectations] | None = None) -> list[Finding]:
    """GF455-GF459: each host's ports and NVLinks in `doc` against the same in `previous` (an
    older report document of the same hosts, e.g. the run store's last run). `expect`: the
    hosts' inventory expectations (gpufleet_ib_symbol_errors_per_hour, _flaps_per_day)."""
    out: list[Finding] = []
    before_hosts = previous.get("hosts") if isinstance(previous.get("hosts"), Mapping) else {}
    for host, hdoc in sorted((doc.get("hosts") or {}).items()):
        old = before_hosts.get(host) if isinstance(before_hosts, Mapping) else None
        if not isinstance(hdoc, Mapping) or not isinstance(old, Mapping):
            continue
        t0, t1 = _when(old), _when(hdoc)
        if t0 is None or t1 is None or t1 <= t0:
            continue
        hours = (t1 - t0).total_seconds() / 3600
        before = _links(old)
        since = str(old["facts"]["collected_at"])
        for name, link in sorted(_links(hdoc).items()):
            if name in before:
                out.extend(_port_deltas(host, name, before[name], link, hours=hours,
                                        since=since, limits=(expect or {}).get(host)))
        out.extend(_nvlink_deltas(host, _nvlink(old), _nvlink(hdoc), hours, since))
    return out


def store_deltas(doc: Mapping[str, Any], entries: Sequence[Mapping[str, Any]],
                 load: Callable[[Mapping[str, Any]], Mapping[str, Any]],
                 expect: Mapping[str, Expectations] | None = None) -> list[Finding]:
    """delta_findings for each host of `doc` against the newest run of the store that has it
    (`entries`: the store's index, oldest first; `load` reads one run), not just the store's
    last run: a `check --save -l gpu02` between two checks of gpu01 must not blind gpu01."""
    raw = doc.get("hosts")
    hosts: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    by_entry: dict[int, list[str]] = {}
    for host in sorted(hosts):
        for i in range(len(entries) - 1, -1, -1):
            if host in (entries[i].get("hosts") or {}):
                by_entry.setdefault(i, []).append(host)
                break
    out: list[Finding] = []
    for i, names in sorted(by_entry.items()):
        part = {**doc, "hosts": {h: hosts[h] for h in names}}
        out += delta_findings(part, load(entries[i]), expect)
    return out


def _nvlink(hdoc: Mapping[str, Any]) -> dict[tuple[str, str], Mapping[str, Any]]:
    """(GPU UUID or index, link) -> its counters, from a report's host entry."""
    facts = hdoc.get("facts")
    gpus = facts.get("nvlink_errors") if isinstance(facts, Mapping) else None
    out: dict[tuple[str, str], Mapping[str, Any]] = {}
    for g in gpus if isinstance(gpus, list) else ():
        if not isinstance(g, Mapping) or not isinstance(g.get("links"), Mapping):
            continue
        for link, counts in g["links"].items():
            if isinstance(counts, Mapping):
                out[(str(g.get("uuid") or g.get("gpu")), str(link))] = {
                    **counts, "gpu": g.get("gpu")}
    return out


def _nvlink_deltas(host: str, old: Mapping[tuple[str, str], Mapping[str, Any]],
                   new: Mapping[tuple[str, str], Mapping[str, Any]], hours: float,
                   since: str) -> Iterable[Finding]:
    """GF459: any NVLink replay, recovery or CRC counter that rose (Meta GCM's defaults: 0
    tolerated; NVIDIA resiliency-ext's NVLinkWindowHealthCheck watches replay and recovery)."""
    for key, counts in sorted(new.items()):
        if key not in old:
            continue
        rose = {}
        for name in ("replay", "recovery", "crc"):
            a, b = _count(old[key], "", name), _count(counts, "", name)
            if a is not None and b is not None and b > a:
                rose[name] = b - a
        if rose:
            gpu, link = counts.get("gpu"), key[1]
            words = ", ".join(f"{k} +{v}" for k, v in rose.items())
            yield finding(
                "GF459", [host],
                f"{host}: NVLink errors rose on GPU {gpu} link {link} in {hours:.3g} h ({words})",
                {"gpu": gpu, "uuid": key[0], "link": int(link), "deltas": rose,
                 "interval_h": round(hours, 3), "since": since, "threshold": "Δ>0",
                 "judged_by": "counter delta between two runs"},
                severity="error" if "recovery" in rose else None,
                gpu=gpu, link=link, words=words)


def _port_deltas(host: str, name: str, old: Mapping[str, Any], new: Mapping[str, Any], *,
                 hours: float, since: str, limits: Expectations | None) -> Iterable[Finding]:
    dev = name.split("/", maxsplit=1)[0]
    per_hour = (limits.ib_symbol_errors_per_hour if limits else None) or SYMBOL_ERRORS_PER_HOUR
    per_day = (limits.ib_flaps_per_day if limits else None) or FLAPS_PER_DAY
    base = {"nic": name, "interval_h": round(hours, 3), "since": since,
            "judged_by": "counter delta between two runs"}

    def delta(table: str, counter: str) -> int | None:
        a, b = _count(old, table, counter), _count(new, table, counter)
        if a is None or b is None or b < a:
            return None  # not read, or reset since (driver reload, reboot)
        return b - a

    for table, counter in FATAL:
        d = delta(table, counter)
        if d:
            yield finding("GF455", [host],
                          f"{host}: {counter} on {name} rose by {d} in {hours:.3g} h",
                          {**base, "counter": counter, "delta": d, "threshold": "Δ>0"},
                          nic=name, dev=dev, counter=counter, delta=d)
    d = delta("counters", "symbol_error")
    if d and d / hours > per_hour:
        rate = d / hours
        yield finding("GF456", [host],
                      f"{host}: {d} symbol errors on {name} in {hours:.3g} h ({rate:.4g}/h)",
                      {**base, "counter": "symbol_error", "delta": d, "per_hour": round(rate, 3),
                       "threshold_per_hour": per_hour},
                      nic=name, dev=dev, rate=f"{rate:.4g}",
                      threshold=f"{per_hour:g}")
    for table, counter, limit, unit_s, unit in RATES:
        d = delta(table, counter)
        rate = d / (hours * 3600 / unit_s) if d else 0.0
        if rate > limit:
            yield finding("GF457", [host],
                          f"{host}: {counter} on {name} at {rate:.4g} {unit} over {hours:.3g} h",
                          {**base, "counter": counter, "delta": d, "rate": round(rate, 4),
                           "unit": unit, "threshold": limit},
                          nic=name, dev=dev, counter=counter, rate=f"{rate:.4g}", unit=unit,
                          threshold=f"{limit:g}")
    d = delta("", "carrier_changes")
    # carrier_changes counts each loss and each return of carrier: a flap is two.
    flaps = (d or 0) // 2
    rate = flaps * 24 / max(hours, 24.0)
    if flaps and rate >= per_day:
        yield finding("GF458", [host],
                      f"{host}: {name} ({new.get('netdev')}) lost carrier {flaps} times in "
                      f"{hours:.3g} h",
                      {**base, "netdev": new.get("netdev"), "carrier_changes_delta": d,
                       "flaps": flaps, "per_24h": round(rate, 3),
                       "threshold_per_24h": per_day},
                      nic=name, flaps=flaps, hours=f"{hours:.3g}", threshold=f"{per_day:g}")
