"""GF430-GF435: Xids (and remediations) that escalate over time, counted per GPU over this run
and the saved runs (`--save DIR`, the run store), so the tenth Xid of a week no longer reads like
the first.

An event is counted once however many saved runs show it (the same kernel log line reappears in
every run while the ring buffer keeps it): its key is (host, xid, bus, timestamp, message), its
time the ISO stamp it carries, else the time of the first run that saw it. Like the drift rules,
these need the store, so `rules.evaluate` does not run them; `escalation_findings` does.

The default limits are published practice (docs/xid.md, "Escalation"):
- repeat: NVIDIA NVSentinel's health-events-analyzer RepeatedXIDErrorOnSameGPU, 5 fatal Xids on
  one GPU within 24 h -> CONTACT_SUPPORT (NVIDIA/NVSentinel charts/health-events-analyzer/
  values.yaml);
- Xid 13 on one GPC/TPC and Xid 31 on one GPU, 2 within 24 h -> run the diagnostic (same file,
  RepeatedXID13OnSameGPCAndTPC / RepeatedXID31OnSameGPU);
- reboot limit: gpud's DefaultRebootThreshold = 2, an Xid that still asks for a reboot after two
  reboots becomes HARDWARE_INSPECTION (leptonai/gpud components/accelerator/nvidia/xid);
- Xid 74 per NVLink: NVIDIA's catalog, WORKFLOW_NVLINK_ERR: the ECC/parity register bits "if seen
  more than 2 times on the same link, report a bug" (3 on one link in 24 h, the window NVSentinel's
  design for the workflow queries, NVIDIA/NVSentinel docs/designs/019-workflow-nvlink-err.md). Xid
  74 on several links of one GPU with none repeating is not a link: what the links share (the
  GPU's NVLink logic; on a baseboard the NVSwitches and the fabric manager) is the suspect.
- remediations: NVSentinel's MultipleRemediations, 5 remediated faults of one node within 7 days
  -> CONTACT_SUPPORT (NVIDIA/NVSentinel@09dfc8f9:distros/kubernetes/nvsentinel/charts/
  health-events-analyzer/values.yaml, `$count >= 5` over 604800 s). A remediation here is one
  re-test after a remediation rung: a saved run whose Slurm lifecycle finding (GF90x) took the
  node from re-validating (engines/slurm/lifecycle.py).
"""

from __future__ import annotations

import dataclasses
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from gpufleet.model import Expectations, Finding, HostSpec
from gpufleet.probes.kernel_log import nvlink_of
from gpufleet.rules import xid as xids
from gpufleet.rules.base import finding

RULES: tuple[str, ...] = ("GF430", "GF431", "GF432", "GF433", "GF434", "GF435")
# The hardware, not something another reset or reboot fixes: a node gpufleet drains for one of
# these is held for RMA (engines/slurm/lifecycle.py) and never resumed by gpufleet.
RMA_RULES: frozenset[str] = frozenset({"GF430", "GF432", "GF433", "GF435"})
NVLINK_XID = 74

_GPC_TPC = re.compile(r"\(GPC (\d+), TPC (\d+)")


@dataclass(frozen=True)
class Limits:
    """Escalation thresholds (defaults: module docstring). The counts are inventory variables
    (gpufleet_xid_repeat_limit, gpufleet_xid13_31_limit, gpufleet_xid_reboot_limit)."""

    repeat_count: int = 5
    repeat_hours: float = 24.0
    xid13_31_count: int = 2
    xid13_31_hours: float = 24.0
    reboot_limit: int = 2  # reboots that may not fix it before the GPU goes to inspection/RMA
    reboot_days: float = 7.0
    xid74_link_count: int = 3  # "more than 2 times on the same link"
    xid74_hours: float = 24.0
    remediation_limit: int = 5  # re-tests after a remediation within the window -> RMA
    remediation_days: float = 7.0


@dataclass(frozen=True)
class _Seen:
    host: str
    xid: int
    bus: str
    message: str
    when: datetime
    nvlink: int | None = None
    # The boot that logged it: the run's boot_id when the event came from that boot's own ring
    # buffer (dmesg); None when unknown (journald spans boots, or a run saved before the fact).
    boot: str | None = None


def _when(stamp: str | None, run_time: datetime) -> datetime:
    try:
        t = datetime.fromisoformat(str(stamp).replace("Z", "+00:00").replace(",", "."))
    except ValueError:
        return run_time  # "[ 12.3]" (uptime): no later than the run that saw it
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def _run_time(doc: Mapping[str, Any]) -> datetime:
    return _when(str(doc.get("generated_at") or ""), datetime.now(timezone.utc))


def events(docs: Iterable[Mapping[str, Any]]) -> list[_Seen]:
    """Every distinct Xid event of these report documents, oldest run first."""
    seen: dict[tuple[str, int, str, str, str, str | None], _Seen] = {}
    for doc in sorted(docs, key=lambda d: str(d.get("generated_at") or "")):
        at = _run_time(doc)
        for host, h in (doc.get("hosts") or {}).items():
            facts = h.get("facts") or {}
            boot = facts.get("boot_id") if isinstance(facts.get("boot_id"), str) else None
            for ev in (facts.get("xid_events") or []):
                try:
                    code, bus = int(ev["xid"]), str(ev.get("bus_id") or "?")
                except (KeyError, TypeError, ValueError):
                    continue  # a saved file is input too
                msg, stamp = str(ev.get("message") or ""), str(ev.get("timestamp") or "")
                # Saved before the fact existed: the link is in the message all the same.
                link = ev.get("nvlink")
                link = link if isinstance(link, int) else nvlink_of(code, msg)
                # A ring buffer's stamp is seconds since that boot: the same line in two
                # boots is two events.
                this = boot if ev.get("this_boot") is True else None
                seen.setdefault((host, code, bus, stamp, msg, this), _Seen(
                    host, code, bus, msg, _when(stamp, at), link, this))
    return list(seen.values())


def _within(evs: Sequence[_Seen], hours: float, now: datetime) -> list[_Seen]:
    return [e for e in evs if now - e.when <= timedelta(hours=hours)]


def limits_for(expect: Expectations | None) -> Limits:
    """A host's limits: its inventory variables (gpufleet_xid_*_limit) over the defaults."""
    base = Limits()
    if expect is None:
        return base
    return dataclasses.replace(
        base, repeat_count=expect.xid_repeat_limit or base.repeat_count,
        xid13_31_count=expect.xid13_31_limit or base.xid13_31_count,
        xid74_link_count=expect.xid74_link_limit or base.xid74_link_count,
        reboot_limit=base.reboot_limit if expect.xid_reboot_limit is None
        else expect.xid_reboot_limit,
        remediation_limit=expect.remediation_limit or base.remediation_limit)


def escalate(current: Mapping[str, Any], prior: Iterable[Mapping[str, Any]],
             limits: Limits | Callable[[str], Limits] = Limits()) -> list[Finding]:
    """GF430-GF434 for the hosts of `current` (a report document) over it and `prior` runs;
    `limits` one for all hosts or per host name."""
    per_host = limits if callable(limits) else (lambda _host: limits)
    now = _run_time(current)
    hosts = set(current.get("hosts") or {})
    by_gpu: dict[tuple[str, str], list[_Seen]] = defaultdict(list)
    for e in events([*prior, current]):
        if e.host in hosts:
            by_gpu[(e.host, e.bus)].append(e)
    driver = driver_reboot_asks([*prior, current])
    for key in driver:
        by_gpu.setdefault(key, [])
    out: list[Finding] = []
    for (host, bus), evs in sorted(by_gpu.items()):
        if host not in hosts:
            continue
        lim = per_host(host)
        out += _repeats(host, bus, evs, lim, now)
        out += _gpc(host, bus, evs, lim, now)
        out += _reboots(host, bus, evs, lim, now, driver=driver.get((host, bus), {}))
        out += _nvlinks(host, bus, evs, lim, now)
    for host in sorted(hosts):
        out += _remediations(host, [*prior, current], per_host(host), now)
    return out


def _remediations(host: str, docs: Sequence[Mapping[str, Any]], lim: Limits,
                  now: datetime) -> list[Finding]:
    """GF435: the node came back from a remediation rung `remediation_limit` times within the
    window (one per saved run whose GF90x finding says lifecycle.from == re-validating): the
    rungs do not fix it, the hardware is the suspect."""
    retests = set()
    for doc in docs:
        at = _run_time(doc)
        for f in doc.get("findings") or []:
            if not isinstance(f, Mapping) or host not in (f.get("hosts") or []):
                continue  # a saved file is input too
            life = (f.get("evidence") or {}).get("lifecycle")
            if (isinstance(life, Mapping) and life.get("from") == "re-validating"
                    and now - at <= timedelta(days=lim.remediation_days)):
                retests.add(at)
    if len(retests) < lim.remediation_limit:
        return []
    runs = sorted(retests)
    return [finding(
        "GF435", [host],
        f"{host}: re-tested after a remediation {len(runs)} times within "
        f"{lim.remediation_days:g} days (limit {lim.remediation_limit}): the remediations do "
        "not hold, the hardware is the suspect",
        {"count": len(runs), "first": runs[0].isoformat(), "last": runs[-1].isoformat(),
         "limit": lim.remediation_limit, "window_days": lim.remediation_days,
         "subject": host,
         "source": "NVIDIA/NVSentinel health-events-analyzer MultipleRemediations (5 within "
                   "7 days -> CONTACT_SUPPORT)"})]


def _evidence(host: str, bus: str, evs: Sequence[_Seen], **more: object) -> dict[str, object]:
    return {"bus_id": bus, "count": len(evs), "first": evs[0].when.isoformat(),
            "last": evs[-1].when.isoformat(), "subject": f"{host}@{bus}", **more}


def _repeats(host: str, bus: str, evs: Sequence[_Seen], lim: Limits,
             now: datetime) -> list[Finding]:
    out = []
    for code in sorted({e.xid for e in evs}):
        if xids.verdict(code).need in ("none", "app"):
            continue  # the application's Xids: GF431 counts 13 and 31 its own way
        # An Xid 74 that names its link is counted per link (GF433/GF434): five over five links
        # is not five times the same fault.
        hits = sorted(_within([e for e in evs if e.xid == code and e.nvlink is None],
                              lim.repeat_hours, now), key=lambda e: e.when)
        if len(hits) >= lim.repeat_count:
            out.append(finding(
                "GF430", [host],
                f"{host}: Xid {code} on {bus} {len(hits)} times within {lim.repeat_hours:g} h "
                f"(limit {lim.repeat_count})",
                _evidence(host, bus, hits, xid=code, limit=lim.repeat_count,
                          window_hours=lim.repeat_hours,
                          source="NVIDIA/NVSentinel health-events-analyzer "
                                 "RepeatedXIDErrorOnSameGPU"),
                bus=bus))
    return out


def _gpc(host: str, bus: str, evs: Sequence[_Seen], lim: Limits, now: datetime) -> list[Finding]:
    groups: dict[tuple[int, str], list[_Seen]] = defaultdict(list)
    for e in _within(evs, lim.xid13_31_hours, now):
        if e.xid == 13 and (m := _GPC_TPC.search(e.message)):
            groups[(13, f"GPC {m.group(1)}, TPC {m.group(2)}")].append(e)
        elif e.xid == 31:
            groups[(31, "the GPU")].append(e)
    out = []
    for (code, where), hits in sorted(groups.items()):
        if len(hits) >= lim.xid13_31_count:
            hits.sort(key=lambda e: e.when)
            out.append(finding(
                "GF431", [host],
                f"{host}: Xid {code} on {bus}, {where}, {len(hits)} times within "
                f"{lim.xid13_31_hours:g} h: the same unit again is the hardware, not the job",
                _evidence(host, bus, hits, xid=code, unit=where, limit=lim.xid13_31_count,
                          window_hours=lim.xid13_31_hours,
                          source="NVIDIA/NVSentinel health-events-analyzer "
                                 f"RepeatedXID{code}OnSame{'GPCAndTPC' if code == 13 else 'GPU'}"),
                bus=bus))
    return out


def driver_reboot_asks(docs: Iterable[Mapping[str, Any]]
                       ) -> dict[tuple[str, str], dict[tuple[str, str], datetime]]:
    """(host, bus) -> {("boot", boot id) or ("run", run time) when the boot is unknown: the
    first run time} of the runs in which the
    driver itself asked for a node reboot (fact `gpu_recovery`, NVML's NODE_REBOOT): the
    driver's verdict comes first, as it does for GF405, and a GPU can ask that way with no
    reboot-class Xid at all (an Xid 31 followed by Xid 154)."""
    out: dict[tuple[str, str], dict[tuple[str, str], datetime]] = defaultdict(dict)
    for doc in docs:
        at = _run_time(doc)
        for host, h in (doc.get("hosts") or {}).items():
            facts = h.get("facts") or {}
            boot = facts.get("boot_id") if isinstance(facts.get("boot_id"), str) else None
            for r in facts.get("gpu_recovery") or []:
                if isinstance(r, Mapping) and r.get("action") == "node_reboot":
                    seen = out[(host, str(r.get("bus_id") or "?"))]
                    key = ("boot", boot) if boot else ("run", at.isoformat())
                    seen[key] = min(seen.get(key, at), at)
    return dict(out)


def _reboots(host: str, bus: str, evs: Sequence[_Seen], lim: Limits, now: datetime, *,
             driver: Mapping[tuple[str, str], datetime]) -> list[Finding]:
    """A GPU asks for a reboot once per boot, however many reboot-class Xids that boot logged
    and whether the Xid or the driver's recovery action (`driver`) asked: the asks are the
    distinct boot ids (fact `boot_id`) of the runs that saw one. Past the limit the reboots did
    not help. An event whose boot is unknown (journald spans boots; a run saved before the fact)
    counts as one ask of its own, as each distinct event did before."""
    window = timedelta(days=lim.reboot_days)
    asks: dict[object, datetime] = {}
    codes: set[int] = set()
    for e in _within(evs, lim.reboot_days * 24, now):
        if xids.verdict(e.xid).need == "reboot":
            key: object = ("boot", e.boot) if e.boot else ("event", e)
            asks[key] = min(asks.get(key, e.when), e.when)
            codes.add(e.xid)
    by_driver = 0
    for key, when in driver.items():
        if now - when <= window:
            by_driver += key not in asks
            asks[key] = min(asks.get(key, when), when)
    if len(asks) <= lim.reboot_limit:
        return []
    whens = sorted(asks.values())
    boots = sorted(str(k[1]) for k in asks if isinstance(k, tuple) and k[0] == "boot")
    what = [f"Xid {', '.join(map(str, sorted(codes)))}"] if codes else []
    what += ["the driver's recovery action Reboot"] if by_driver or not codes else []
    return [finding(
        "GF432", [host],
        f"{host}: the GPU at {bus} asked for a reboot in {len(asks)} boots within "
        f"{lim.reboot_days:g} days ({'; '.join(what)}); after {lim.reboot_limit} reboots it is "
        "the hardware",
        {"bus_id": bus, "count": len(asks), "first": whens[0].isoformat(),
         "last": whens[-1].isoformat(), "subject": f"{host}@{bus}", "limit": lim.reboot_limit,
         "window_days": lim.reboot_days, "boot_ids": boots, "boots_unknown": len(asks) - len(boots),
         "asked_by_driver": by_driver,
         "counted_by": "boot id" if len(boots) == len(asks) else
         "boot id, else each distinct event (boot unknown)",
         "source": "leptonai/gpud DefaultRebootThreshold = 2 (HARDWARE_INSPECTION); the driver's "
                   "GPU Recovery Action Reboot (NVML NODE_REBOOT) asks too"},
        bus=bus)]


def _nvlinks(host: str, bus: str, evs: Sequence[_Seen], lim: Limits,
             now: datetime) -> list[Finding]:
    """GF433 per link that repeats Xid 74; else GF434 when the GPU's Xid 74s reach the same count
    over several links (the cause is what they share)."""
    per_link: dict[int, list[_Seen]] = defaultdict(list)
    for e in _within(evs, lim.xid74_hours, now):
        if e.xid == NVLINK_XID and e.nvlink is not None:
            per_link[e.nvlink].append(e)
    common = dict(xid=NVLINK_XID, limit=lim.xid74_link_count, window_hours=lim.xid74_hours,
                  links={str(k): len(v) for k, v in sorted(per_link.items())})
    out = []
    for link, hits in sorted(per_link.items()):
        if len(hits) >= lim.xid74_link_count:
            hits.sort(key=lambda e: e.when)
            out.append(finding(
                "GF433", [host],
                f"{host}: Xid 74 on {bus} NVLink {link} {len(hits)} times within "
                f"{lim.xid74_hours:g} h (limit {lim.xid74_link_count}): that link is the hardware",
                _evidence(host, bus, hits, nvlink=link, **common,
                          source="NVIDIA Xid catalog WORKFLOW_NVLINK_ERR (\"more than 2 times on "
                                 "the same link, report a bug\")"),
                bus=bus, link=link))
    every = sorted((e for v in per_link.values() for e in v), key=lambda e: e.when)
    if out or len(per_link) < 2 or len(every) < lim.xid74_link_count:
        return out
    return [finding(
        "GF434", [host],
        f"{host}: Xid 74 on {bus} over {len(per_link)} NVLinks "
        f"({', '.join(map(str, sorted(per_link)))}) within {lim.xid74_hours:g} h, none repeating: "
        "not one link but what they share",
        _evidence(host, bus, every, **common,
                  source="NVIDIA Xid catalog WORKFLOW_NVLINK_ERR (per-link repeats); "
                         "spread over links: gpufleet's reading"),
        bus=bus)]


def escalation_findings(current: Mapping[str, Any], entries: Sequence[Mapping[str, Any]],
                        load: Callable[[Mapping[str, Any]], Mapping[str, Any]],
                        specs: Mapping[str, HostSpec] | None = None) -> list[Finding]:
    """Over the run store (only the saved runs inside the longest window are loaded), each
    host with the limits of its inventory variables (`specs`)."""
    specs = specs or {}

    def limits(host: str) -> Limits:
        spec = specs.get(host)
        return limits_for(spec.expect if spec is not None else None)

    base = Limits()  # the windows are not per host
    horizon = _run_time(current) - timedelta(
        hours=max(base.repeat_hours, base.xid13_31_hours, base.reboot_days * 24,
                  base.remediation_days * 24))
    prior = [load(e) for e in entries if _when(str(e.get("generated_at") or ""), horizon)
             >= horizon]
    return escalate(current, prior, limits)
