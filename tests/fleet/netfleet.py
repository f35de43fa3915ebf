"""A fleet whose network can be broken for real: one network namespace per simulated host.

Layout (nothing is added to the machine's own network namespace):

    gf13-<pid>-ctl   the controller's namespace: bridge `gfbr` 10.231.0.1/24, one veth end per
                     host enslaved to it, no default route
    gf13-<pid>-hN    one per host: veth `gf0` 10.231.0.(10+N)/24, lo, no default route, and the
                     host's own sshd (fleetlib's namespace script: masked ~/.bashrc, empty
                     /proc/driver) listening on its address

The controller (the gpufleet CLI, or any command given to `run`) runs inside the ctl namespace.
No namespace here has a default route, so a packet for an address outside 10.231.0.0/24 has no
way off the machine: connecting fails with "Network is unreachable". `run` also checks, before
every command, that the bridge is up and that the route to every host goes through it
(`verify_routing`), and refuses to run otherwise.

With `rails=R` every host also gets R more veths, `gfr0`..`gfr{R-1}`, at 10.231.(k+1).(10+N)/24,
each rail on its own bridge `gfbr{k+1}` in the ctl namespace (one NIC per rail per host, as a
rail-optimised cluster wires them); `throttle_rail(name, k, mbit)` slows one host's rail k.

`throttle_host(name, mbit)` puts a tbf on both ends of the host's veth (what it sends and what
it receives); `throttle_pair(a, b, mbit)` puts an htb with a u32 filter on each end's veth, so
only traffic between the two is slowed; `clear(name)` removes them. This kernel has tbf, htb and
u32 (not netem), the same as the CI machine.

Everything is stopped by PID and every namespace deleted on close: on success, failure, Ctrl-C,
at interpreter exit (tests/harness/processes.py), and sshd also dies with the test process
(PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from fleetlib import Fleet, FleetError, FleetHost, need_root_and_sshd

from harness.processes import close_at_exit, die_with_parent
from harness.sshhost import (
    connection_vars,
    controller_env,
    keygen_all,
    public_key,
    sshd_config,
)

SUBNET = "10.231.0"
RAIL_NET = "10.231"  # rail k: 10.231.k.0/24 (k >= 1)
BRIDGE = "gfbr"
HOST_IF = "gf0"
RAIL_IF = "gfr"  # gfr0, gfr1, …: one per rail


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(["ip", *args], capture_output=True, text=True, check=False, timeout=30)
    if check and r.returncode != 0:
        raise FleetError(f"ip {' '.join(args)}: {r.stderr.strip()}")
    return r


class NetFleet(Fleet):
    """Fleet (fleetlib) whose hosts live in their own network namespaces."""

    def __init__(self, root: Path, count: int, rails: int = 0) -> None:
        super().__init__(root, root)
        self.rails = rails
        tag = f"gf13-{os.getpid()}"
        self.ctl = f"{tag}-ctl"
        self.ns: dict[str, str] = {}
        self.index: dict[str, int] = {}
        self._namespaces: list[str] = []
        self.count = count
        self._tag = tag

    # ------------------------------------------------------------------ safety

    def verify_routing(self) -> None:
        """Refuse unless the bridge is up and every host is reached through it, and only it."""
        for bridge in (BRIDGE, *(f"{BRIDGE}{k}" for k in range(1, self.rails + 1))):
            link = json.loads(_ip("-n", self.ctl, "-j", "link", "show", "dev", bridge).stdout)
            if not link or "UP" not in link[0].get("flags", []):
                raise FleetError(f"bridge {bridge} in {self.ctl} is not up: refusing to connect")
        default = _ip("-n", self.ctl, "route", "show", "default").stdout.strip()
        if default:
            raise FleetError(f"{self.ctl} has a default route ({default}): refusing to connect")
        for name, h in self.hosts.items():
            route = json.loads(_ip("-n", self.ctl, "-j", "route", "get", h.address).stdout)
            if not route or route[0].get("dev") != BRIDGE:
                raise FleetError(f"route to {name} ({h.address}) in {self.ctl} is {route}, not "
                                 f"via {BRIDGE}: refusing to connect")

    # ------------------------------------------------------------------ running things

    def run(
        self, argv: Sequence[str], *, timeout: float = 120.0, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a controller-side command inside the ctl namespace (after verify_routing)."""
        self.verify_routing()
        return super().run(["ip", "netns", "exec", self.ctl, *argv], timeout=timeout,
                           input=input)

    def in_host(self, name: str, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ip", "netns", "exec", self.ns[name], *argv], capture_output=True,
                              text=True, check=False, timeout=30)

    # ------------------------------------------------------------------ shaping

    def _tc(self, netns: str, script: str) -> None:
        r = subprocess.run(["ip", "netns", "exec", netns, "sh", "-ec", script],
                           capture_output=True, text=True, check=False, timeout=30)
        if r.returncode != 0:
            raise FleetError(f"tc in {netns}: {r.stderr.strip()}\n{script}")

    def throttle_host(self, name: str, mbit: float) -> None:
        """tbf on both ends of the host's link: everything it sends or receives is slowed."""
        rate = f"{mbit:g}mbit"
        tbf = f"root tbf rate {rate} burst 32kbit latency 100ms"
        self._tc(self.ns[name], f"tc qdisc replace dev {HOST_IF} {tbf}")
        self._tc(self.ctl, f"tc qdisc replace dev v{self.index[name]} {tbf}")

    def throttle_pair(self, a: str, b: str, mbit: float) -> None:
        """Only traffic between a and b is slowed (htb class chosen by a u32 dst filter)."""
        for src, dst in ((a, b), (b, a)):
            ip = self.hosts[dst].address
            self._tc(self.ns[src], "\n".join((
                f"tc qdisc replace dev {HOST_IF} root handle 1: htb default 1",
                f"tc class replace dev {HOST_IF} parent 1: classid 1:1 htb rate 10gbit",
                f"tc class replace dev {HOST_IF} parent 1: classid 1:2 htb rate {mbit:g}mbit "
                "burst 32kbit",
                f"tc filter replace dev {HOST_IF} parent 1: protocol ip prio 1 u32 "
                f"match ip dst {ip}/32 flowid 1:2",
            )))  # fmt: skip

    def throttle_rail(self, name: str, rail: int, mbit: float) -> None:
        """tbf on both ends of one host's rail-`rail` veth: only that NIC is slow."""
        tbf = f"root tbf rate {mbit:g}mbit burst 32kbit latency 100ms"
        self._tc(self.ns[name], f"tc qdisc replace dev {RAIL_IF}{rail} {tbf}")
        self._tc(self.ctl, f"tc qdisc replace dev v{self.index[name]}r{rail + 1} {tbf}")

    def clear(self, *names: str) -> None:
        for name in names or tuple(self.hosts):
            i = self.index[name]
            devs = [(self.ns[name], HOST_IF), (self.ctl, f"v{i}")]
            devs += [d for k in range(self.rails)
                     for d in ((self.ns[name], f"{RAIL_IF}{k}"), (self.ctl, f"v{i}r{k + 1}"))]
            for ns, dev in devs:
                self._tc(ns, f"tc qdisc del dev {dev} root 2>/dev/null || true")

    # ------------------------------------------------------------------ daemons

    def _spawn(self, hosts: Sequence[FleetHost]) -> None:
        for h in hosts:
            if h.pid is not None or h.fault == "down":
                continue
            log = h.log.open("ab")
            try:
                h.proc = subprocess.Popen(
                    ["ip", "netns", "exec", self.ns[h.name], "unshare", "--mount",
                     "--propagation", "private", "sh", "-c", self._namespace_script(h)],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                    start_new_session=True, preexec_fn=die_with_parent,
                )  # fmt: skip
            finally:
                log.close()
            h.pid = h.proc.pid  # ip, unshare and sh exec in place: this is sshd

    def _wait_ready(self, hosts: Sequence[FleetHost], timeout: float) -> None:
        """Every sshd accepts TCP, tried from the ctl namespace (never from this one)."""
        for h in hosts:
            if h.proc is not None and h.proc.poll() is not None:
                raise FleetError(f"sshd for {h.name} exited with {h.proc.returncode}:\n"
                                 f"{self.log_tail(h.name)}")
        probe = ("import socket,sys,time\nd=time.monotonic()+float(sys.argv[1])\n"
                 "for a in sys.argv[2:]:\n"
                 " while True:\n"
                 "  try:\n   socket.create_connection((a,22),0.5).close(); break\n"
                 "  except OSError:\n"
                 "   if time.monotonic()>d: sys.exit('no sshd on '+a)\n   time.sleep(0.02)\n")
        addresses = [h.address for h in hosts if h.proc is not None]
        r = self.run([sys.executable, "-c", probe, str(timeout), *addresses], timeout=timeout + 30)
        if r.returncode != 0:
            raise FleetError(f"{r.stderr.strip()}\n" + "\n".join(
                f"--- {h.name}\n{self.log_tail(h.name)}" for h in hosts))

    def close(self) -> None:
        if self._closed:
            return
        try:
            super().close()
        finally:
            for ns in reversed(self._namespaces):
                _ip("netns", "delete", ns, check=False)
            self._namespaces.clear()


# ---------------------------------------------------------------------- building

def _network(fleet: NetFleet, names: Sequence[str]) -> None:
    def add_ns(ns: str) -> None:
        _ip("netns", "add", ns)
        fleet._namespaces.append(ns)
        _ip("-n", ns, "link", "set", "lo", "up")

    add_ns(fleet.ctl)
    _ip("-n", fleet.ctl, "link", "add", BRIDGE, "type", "bridge")
    _ip("-n", fleet.ctl, "addr", "add", f"{SUBNET}.1/24", "dev", BRIDGE)
    _ip("-n", fleet.ctl, "link", "set", BRIDGE, "up")
    for i, name in enumerate(names, start=1):
        ns = f"{fleet._tag}-h{i}"
        add_ns(ns)
        fleet.ns[name], fleet.index[name] = ns, i
        # Both ends are created inside namespaces: the machine's own one never sees them.
        _ip("-n", fleet.ctl, "link", "add", f"v{i}", "type", "veth", "peer", "name", HOST_IF,
            "netns", ns)
        _ip("-n", fleet.ctl, "link", "set", f"v{i}", "master", BRIDGE, "up")
        _ip("-n", ns, "addr", "add", f"{SUBNET}.{10 + i}/24", "dev", HOST_IF)
        _ip("-n", ns, "link", "set", HOST_IF, "up")
        for k in range(1, fleet.rails + 1):
            bridge, dev = f"{BRIDGE}{k}", f"{RAIL_IF}{k - 1}"
            if i == 1:
                _ip("-n", fleet.ctl, "link", "add", bridge, "type", "bridge")
                _ip("-n", fleet.ctl, "addr", "add", f"{RAIL_NET}.{k}.1/24", "dev", bridge)
                _ip("-n", fleet.ctl, "link", "set", bridge, "up")
            _ip("-n", fleet.ctl, "link", "add", f"v{i}r{k}", "type", "veth", "peer", "name",
                dev, "netns", ns)
            _ip("-n", fleet.ctl, "link", "set", f"v{i}r{k}", "master", bridge, "up")
            _ip("-n", ns, "addr", "add", f"{RAIL_NET}.{k}.{10 + i}/24", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")


def _reap_stale() -> None:
    """Namespaces of a test process killed outright (its sshds died with it: PDEATHSIG)."""
    listing = json.loads(_ip("-j", "netns", "list").stdout or "[]")
    for entry in listing:
        parts = str(entry.get("name", "")).split("-")
        if len(parts) == 3 and parts[0] == "gf13" and parts[1].isdigit():
            try:
                os.kill(int(parts[1]), 0)
            except ProcessLookupError:
                _ip("netns", "delete", entry["name"], check=False)
            except PermissionError:
                pass


def build_netfleet(
    root: Path,
    names: Sequence[str],
    *,
    all_vars: Mapping[str, Any] | None = None,
    host_vars: Mapping[str, Mapping[str, Any]] | None = None,
    start_timeout: float = 15.0,
    rails: int = 0,
) -> NetFleet:
    need_root_and_sshd("the network-namespace fleet needs root (ip netns, tc, sshd)")
    _reap_stale()
    root.mkdir(parents=True, exist_ok=True)
    fleet = NetFleet(root, len(names), rails)
    close_at_exit(fleet)
    try:
        _populate(fleet, names, all_vars or {}, host_vars or {}, start_timeout)
    except BaseException:
        fleet.close()
        raise
    return fleet


def _populate(fleet: NetFleet, names: Sequence[str], all_vars: Mapping[str, Any],
              host_vars: Mapping[str, Mapping[str, Any]], start_timeout: float) -> None:
    root = fleet.root
    for d in ("keys", "sshd", "home"):
        (root / d).mkdir(exist_ok=True)
    (root / "empty").write_text("")
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    _network(fleet, names)
    keys = root / "keys"
    specs = []
    for i, name in enumerate(names, start=1):
        h = FleetHost(name, f"{SUBNET}.{10 + i}", None, group="net")
        h.config, h.log = root / "sshd" / f"{name}.conf", root / "sshd" / f"{name}.log"
        fleet.hosts[name] = h
        specs.append(h)
    try:
        keygen_all({fleet.client_key: "gpufleet-test-client",
                    **{keys / h.name: f"host-{h.name}" for h in specs}})
    except RuntimeError as exc:
        raise FleetError(str(exc)) from exc
    client_pub = fleet.client_key.with_suffix(".pub").read_text()
    known = []
    for h in specs:
        h.host_key_pub = public_key(keys / h.name)
        authorized = keys / f"{h.name}.authorized_keys"
        authorized.write_text(client_pub)
        h.config.write_text(sshd_config(h.address, keys / h.name, authorized))
        known.append(f"{h.address} {h.host_key_pub}\n")
    fleet.known_hosts.write_text("".join(known))
    fleet.env = controller_env(fleet.home)
    hosts = {h.name: {"ansible_host": h.address, **host_vars.get(h.name, {})} for h in specs}
    doc = {"all": {"vars": {
        **connection_vars(fleet.client_key, fleet.known_hosts),
        "gpufleet_smoke_runtime": "host",
        "gpufleet_smoke_python": sys.executable,
        # gloo picks its interface from the hostname otherwise: the machine's, not this one
        "gpufleet_smoke_interface": HOST_IF,
        **dict(all_vars),
    }, "children": {"net": {"hosts": hosts}}}}  # fmt: skip
    fleet.inventory.write_text(yaml.safe_dump(doc, sort_keys=False))
    fleet._spawn(specs)
    fleet._wait_ready(specs, start_timeout)


@contextlib.contextmanager
def make_netfleet(root: Path, names: Sequence[str], **kwargs: Any) -> Iterator[NetFleet]:
    fleet = build_netfleet(root, names, **kwargs)
    try:
        yield fleet
    finally:
        fleet.close()

