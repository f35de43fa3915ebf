"""GF450-GF452, GF461-GF462 and GF620-GF621: the fabric in one run, from each RDMA port's sysfs
facts (Facts.ib_links, Facts.ib_ports) and each smoke world's transport record.

A port down (GF450), a port below the rate of its peers on the host (GF451), PKeys that differ
inside an inventory group (GF452), a port's effective bit error rate from mlxlink (GF461 at
DeepOps' 1E-8, GF462 above ibdiagnet's 1E-12); a multinode world that ran over sockets on
hosts with RDMA ports up (GF620), NVLink GPUs that talked through shared memory (GF621). The
counters, which only mean something as deltas between runs, are rules/fabric_delta.py's
(GF455-GF459).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpufleet.model import Facts, Finding, IbLink, SmokeResult
from gpufleet.rules.base import Ctx, finding

# The ids this module emits (tests/unit/test_rules_plumbing.py holds it to that).
RULES: tuple[str, ...] = ("GF450", "GF451", "GF452", "GF461", "GF462", "GF620", "GF621")

_BER = re.compile(r"^([0-9]{1,4})E-([0-9]{1,3})$")  # mlxlink's COEF "E-" MAGNITUDE
BER_DEEPOPS_EXPONENT = 9  # check_ib_link_ber: fail below this negative exponent
BER_WARN_EXPONENT = 12  # ibdiagnet's default BER threshold, 1E-12 (gpufleet_ib_ber_exponent)



def nic(link: IbLink | Mapping[str, Any]) -> str:
    if isinstance(link, IbLink):
        return f"{link.device}/{link.port}"
    return f"{link.get('device')}/{link.get('port')}"


def check(ctx: Ctx) -> Iterable[Finding]:
    pkeys: dict[str, dict[str, tuple[str, ...]]] = {}
    for host, facts in ctx.with_facts():
        links = facts.ib_links or ()
        for link in links:
            if link.state not in (None, "ACTIVE") or link.phys_state not in (None, "LinkUp"):
                yield finding(
                    "GF450", [host.name],
                    f"{host.name}: RDMA port {nic(link)} is {link.state or '?'}/"
                    f"{link.phys_state or '?'} ({link.link_layer or 'link layer unknown'})",
                    {"nic": nic(link), "state": link.state, "phys_state": link.phys_state,
                     "link_layer": link.link_layer},
                    nic=nic(link), dev=link.device, port=link.port)
        yield from _slow_ports(host.name, facts.ib_ports or (), links)
        spec = ctx.report.specs.get(host.name)
        exponent = spec.expect.ib_ber_exponent if spec and spec.expect else None
        yield from _ber(host.name, links, exponent or BER_WARN_EXPONENT)
        keys = tuple(sorted({k for link in links for k in link.pkeys}))
        if keys:
            for group in ctx.groups(host.name):
                pkeys.setdefault(group, {})[host.name] = keys
    for group, by_host in sorted(pkeys.items()):
        yield from _pkey_mismatch(group, by_host)
    by_name = {h.name: f for h, f in ctx.with_facts()}
    for host, smoke in ctx.with_smoke():
        yield from _transport(host.name, smoke, by_name)


def _ber(host: str, links: Sequence[IbLink], warn_exponent: int) -> Iterable[Finding]:
    """GF461/GF462 from mlxlink's Effective Physical BER of each ACTIVE port."""
    limit = 10.0 ** -warn_exponent
    for link in links:
        m = _BER.match(link.ber or "")
        if not m or link.state != "ACTIVE":
            continue
        exponent = int(m.group(2))
        value = int(m.group(1)) * 10.0 ** -exponent
        evidence = {"nic": nic(link), "effective_ber": link.ber, "raw_ber": link.raw_ber,
                    "value": value, "source": "mlxlink -c"}
        if exponent < BER_DEEPOPS_EXPONENT:
            yield finding("GF461", [host], f"{host}: {nic(link)} effective BER {link.ber} "
                          f"(exponent {exponent} < {BER_DEEPOPS_EXPONENT})",
                          {**evidence, "threshold": f"exponent >= {BER_DEEPOPS_EXPONENT}"},
                          nic=nic(link), dev=link.device, ber=link.ber)
        elif value > limit:
            yield finding("GF462", [host], f"{host}: {nic(link)} effective BER {link.ber} "
                          f"above 1E-{warn_exponent}", {**evidence, "threshold": limit},
                          nic=nic(link), dev=link.device, ber=link.ber,
                          threshold=f"1E-{warn_exponent}")


# ---------------------------------------------------------------------------- transports


def _has_rdma(facts: Facts | None) -> bool:
    return any(link.state == "ACTIVE" for link in (facts.ib_links or ())) if facts else False


def _causes(smoke: SmokeResult, members: Sequence[str], facts: Mapping[str, Facts]) -> list[str]:
    """Why NCCL may have picked sockets, from what the run and the facts show."""
    out = []
    for name in members:
        f = facts.get(name)
        conf = f.nccl_config if f else None
        for s in conf.effective if conf else ():
            if s.name == "NCCL_IB_DISABLE" and s.value.strip() not in ("", "0"):
                out.append(f"NCCL_IB_DISABLE={s.value} in {s.source} on {name}")
            if s.name == "NCCL_NET" and s.value.strip().lower() == "socket":
                out.append(f"NCCL_NET={s.value} in {s.source} on {name}")
    if smoke.transport is not None and smoke.transport.ib_absent:
        out.append("NCCL found no IB device (\"NET/IB : No device found\"): the HCA is not "
                   "visible where the ranks run (a container without /dev/infiniband, or no "
                   "rdma-core/libibverbs)")
    return out or ["NCCL chose sockets with RDMA ports up: check NCCL_IB_HCA, the ranks' "
                   "access to /dev/infiniband and NCCL's INFO log"]


def _transport(host: str, smoke: SmokeResult, facts: Mapping[str, Facts]) -> Iterable[Finding]:
    rec = smoke.transport
    if rec is None or smoke.backend != "nccl":
        return
    members = smoke.hosts or (host,)
    if len(members) > 1 and any(_has_rdma(facts.get(m)) for m in members):
        socket = [c for c in rec.connections if c.transport == "NET/Socket"]
        if socket or rec.network == "Socket":
            named = ", ".join(f"rank {c.src} -> {c.dst}" for c in socket[:6]) or "every NET link"
            causes = _causes(smoke, members, facts)
            yield finding(
                "GF620", members,
                f"multinode world ({', '.join(members)}) ran over NET/Socket ({named}) "
                "although RDMA ports are up",
                {"network": rec.network, "connections": [f"{c.src}->{c.dst}" for c in socket],
                 "hcas": list(rec.hcas), "causes": causes},
                cause=causes[0])
    if len(members) == 1:
        f = facts.get(host)
        kinds = f.topology.gpu_link_kinds() if f and f.topology else frozenset()
        shm = [c for c in rec.connections if c.transport.startswith("SHM")]
        if shm and kinds and all(k.startswith("NV") for k in kinds):
            yield finding(
                "GF621", [host],
                f"{host}: GPUs joined by NVLink ({', '.join(sorted(kinds))}) talked through "
                f"shared memory ({', '.join(f'rank {c.src} -> {c.dst}' for c in shm[:4])})",
                {"links": sorted(kinds), "connections": [f"{c.src}->{c.dst} {c.transport}"
                                                         for c in shm]})


def _slow_ports(host: str, ports: Sequence[Any], links: Sequence[IbLink]) -> Iterable[Finding]:
    layer = {nic(link): link.link_layer for link in links}
    active = {nic(link) for link in links if link.state in (None, "ACTIVE")}
    rated = [(f"{p.device}/{p.port}", p.rate_gbit) for p in ports if p.rate_gbit]
    for name, rate in rated:
        if name not in active:
            continue  # a port down is GF450's
        peers = [r for n, r in rated if n != name and n in active
                 and layer.get(n) == layer.get(name)]
        best = max(peers, default=None)
        if best is not None and rate < best:
            yield finding(
                "GF451", [host],
                f"{host}: RDMA port {name} runs at {rate:g} Gb/s, its peers at {best:g} Gb/s",
                {"nic": name, "rate_gbit": rate, "expected_gbit": best,
                 "judged_by": "the host's fastest port of the same link layer"},
                nic=name, dev=name.split("/", maxsplit=1)[0], rate=f"{rate:g}",
                expected=f"{best:g}")


def _pkey_mismatch(group: str, by_host: Mapping[str, tuple[str, ...]]) -> Iterable[Finding]:
    if len(set(by_host.values())) < 2:
        return
    common, count = Counter(by_host.values()).most_common(1)[0]
    if count * 2 <= len(by_host):
        common = ()  # no majority: every host is named against the group
    for host, keys in sorted(by_host.items()):
        if keys != common:
            yield finding(
                "GF452", [host],
                f"{host}: RDMA PKeys {', '.join(keys)} differ from group {group}'s "
                f"{', '.join(common) or '(no majority)'}",
                {"group": group, "pkeys": list(keys), "majority": list(common),
                 "group_pkeys": {h: list(k) for h, k in sorted(by_host.items())}},
                group=group, majority=", ".join(common) or "(no majority)")
