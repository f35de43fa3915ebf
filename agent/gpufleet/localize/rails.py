"""Rail-only worlds: the same search, with every world's traffic on one NIC index (issue 27
item 5), so that a slow world becomes "rail gfr1 on host X" or "the link between X and Y on
rail gfr1".

A rail is an interface name that every host has (multi-rail clusters name the NIC of GPU k the
same on every node: nccl-tests' NCCL_TESTS_SPLIT="MOD 8" runs exactly these worlds). A rail
world is an ordinary multinode world whose members' gpufleet_smoke_interface (GLOO_SOCKET_IFNAME
/ NCCL_SOCKET_IFNAME) is the rail and whose gpufleet_smoke_address (torchrun's --local_addr and
the rendezvous endpoint) is each host's address on it, read from the host (`ip -o -4 addr show
dev RAIL`). A host without that interface (or without an IPv4 address on it) is left out of
that rail's search and said so. Each rail first runs its all-hosts world; only a rail whose
world fails is searched further, so R rails cost R worlds more when they are all good.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence

from gpufleet.localize.judge import Expectation, Measured
from gpufleet.localize.search import Localization, Strategy, localize
from gpufleet.model import HostSpec
from gpufleet.transport import Transport, TransportError

# `ip -o -4 addr show dev IF`: "3: gfr1    inet 10.231.2.11/24 brd … scope global gfr1\ …"
_INET = re.compile(r"^[0-9]+: (\S+)\s+inet ([0-9]{1,3}(?:\.[0-9]{1,3}){3})/[0-9]{1,2}\b")
_NAME = re.compile(r"^[A-Za-z0-9_.:@-]{1,15}$")  # an interface name as the kernel allows it


def check_names(rails: Sequence[str]) -> None:
    bad = [r for r in rails if not _NAME.match(r)]
    if bad:
        raise ValueError(f"--rails: not an interface name: {', '.join(bad)}")


def rail_address(text: str, rail: str) -> str | None:
    """The first IPv4 address `ip -o -4 addr show dev RAIL` lists for RAIL, else None."""
    for line in text.splitlines():
        m = _INET.match(line.strip())
        if m and m.group(1) == rail:
            return m.group(2)
    return None


def read_addresses(transport: Transport, rails: Sequence[str]) -> dict[str, str | None]:
    """Each rail's address on one host (None: no such interface, or no IPv4 address)."""
    out: dict[str, str | None] = {}
    for rail in rails:
        try:
            res = transport.run(["ip", "-o", "-4", "addr", "show", "dev", rail], timeout=30)
        except TransportError:
            out[rail] = None
            continue
        out[rail] = rail_address(res.stdout, rail) if res.rc == 0 else None
    return out


def on_rail(spec: HostSpec, rail: str, address: str) -> HostSpec:
    """The host as a rail world sees it: its smoke traffic on `rail`, at `address`."""
    return dataclasses.replace(spec, expect=dataclasses.replace(
        spec.expect, smoke_interface=rail, smoke_address=address))


@dataclasses.dataclass(frozen=True)
class RailSearch:
    rail: str
    search: Localization
    missing: tuple[str, ...]  # hosts without the interface (or an address on it)


def search_rails(
    hosts: Sequence[str],
    rails: Sequence[str],
    addresses: Mapping[str, Mapping[str, str | None]],
    world_on: Callable[[str, Mapping[str, str]], Callable[[tuple[str, ...]], Measured]],
    *,
    expectation: Expectation | None,
    domains: Mapping[str, str],
    strategy: Strategy,
    max_worlds: int | None,
) -> tuple[RailSearch, ...]:
    """One search per rail over the hosts that have it. `world_on(rail, {host: address})` is
    the world runner for that rail (worlds.py builds it on run_multinode)."""
    out = []
    for rail in rails:
        have = {h: a for h in hosts if (a := (addresses.get(h) or {}).get(rail))}
        missing = tuple(h for h in hosts if h not in have)
        search = localize(list(have), world_on(rail, have), expectation=expectation,
                          domains=domains, strategy=strategy, max_worlds=max_worlds)
        out.append(RailSearch(rail, search, missing))
    return tuple(out)
