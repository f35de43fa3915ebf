"""`gpufleet localize` on 8 hosts in their own network namespaces, links broken with tc for real.

One fleet for the module; each test shapes the links, runs the CLI inside the controller's
namespace and clears the shaping again. Worlds are made cheap (1 gloo rank per host, one 1 MiB
size in the sweep) but real: the smoke's launcher over SSH on every host, the store on the first,
gloo across the bridge. A host
throttled to 45 Mbit/s (tbf on both ends of its veth) made 1 MiB worlds 8-160x slower here (the
more the machine is loaded, the less: clean worlds turn latency-bound); the inventory's floor
gpufleet_multinode_min_busbw_gbps sits between the two.

Node ranks follow the world's members in name order (run_multinode), so in a
world ring neighbours are neighbours in name order: the throttled pair is two such neighbours,
the only pairs a ring all-reduce sends across (docs/localize.md, "what a world can see").
"""

from __future__ import annotations

import errno
import json
import math
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from fleetlib import FleetError
from netfleet import BRIDGE, NetFleet, make_netfleet

pytestmark = [pytest.mark.fleet, pytest.mark.slow]

NAMES = [f"n{i:02d}" for i in range(1, 9)]
FLOOR_GBPS = 0.012  # measured: throttled worlds 0.0045-0.0052 GB/s, clean ones 0.04-0.8
THROTTLE_MBIT = 45
BOUND = 2 * math.ceil(math.log2(len(NAMES))) + 2


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetFleet]:
    root = tmp_path_factory.mktemp("netfleet")
    with make_netfleet(root, NAMES,
                       all_vars={"gpufleet_multinode_min_busbw_gbps": FLOOR_GBPS}) as fleet:
        fleet.env.update(GPUFLEET_SMOKE_NPROC="1", GPUFLEET_SMOKE_SIZES=str(1 << 20))
        yield fleet


@pytest.fixture(autouse=True)
def unshaped(net: NetFleet) -> Iterator[None]:
    net.clear()
    yield
    net.clear()


def localize(net: NetFleet, *args: str) -> tuple[int, dict[str, Any], str]:
    proc = net.run_cli("localize", "-i", str(net.inventory), "--format", "json",
                       "--smoke-timeout", "240", *args, timeout=1700)
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        pytest.fail(f"no JSON (exit {proc.returncode}); stderr:\n{proc.stderr[-4000:]}")
    return proc.returncode, doc["localize"], proc.stderr


def suspects(loc: dict[str, Any]) -> set[tuple[str, tuple[str, ...]]]:
    return {(s["kind"], tuple(sorted(s["hosts"]))) for s in loc["suspects"]}


def _connect_errno(net: NetFleet, address: str) -> str:
    """Connect from the controller's namespace directly (no verify_routing): errno or "ok"."""
    probe = ("import socket,sys\ntry:\n socket.create_connection((sys.argv[1], 22), 3)\n"
             " print('ok')\nexcept OSError as e:\n print(e.errno)\n")
    r = subprocess.run(["ip", "netns", "exec", net.ctl, sys.executable, "-c", probe, address],
                       capture_output=True, text=True, timeout=30, check=False)
    return r.stdout.strip()


def test_the_network_is_private_and_refused_when_the_bridge_is_down(net: NetFleet) -> None:
    # No default route in the controller's namespace nor in any host's: nothing leaves.
    assert _connect_errno(net, "192.0.2.1") == str(errno.ENETUNREACH)
    for name in NAMES:
        r = net.in_host(name, "ip", "route", "show", "default")
        assert r.returncode == 0 and r.stdout.strip() == "", (name, r.stdout)
    host = net.hosts["n01"].address
    assert _connect_errno(net, host) == "ok"
    subprocess.run(["ip", "-n", net.ctl, "link", "set", BRIDGE, "down"], check=True)
    try:
        assert _connect_errno(net, host) == str(errno.ENETUNREACH)
        with pytest.raises(FleetError, match="not up: refusing to connect"):
            net.run(["true"])
    finally:
        subprocess.run(["ip", "-n", net.ctl, "link", "set", BRIDGE, "up"], check=True)
    net.verify_routing()


def test_no_bad_host_one_world_all_good(net: NetFleet) -> None:
    rc, loc, err = localize(net)
    assert loc["outcome"] == "all_good", (loc, err[-3000:])
    assert loc["worlds_run"] == 1 and loc["suspects"] == []
    assert loc["worlds"][0]["members"] == NAMES and loc["worlds"][0]["busbw_gbps"] > FLOOR_GBPS
    assert rc == 0


@pytest.mark.timeout(1500)  # load from other users of a shared machine stretches worlds
def test_one_throttled_host_named_within_bound(net: NetFleet) -> None:
    net.throttle_host("n05", THROTTLE_MBIT)
    rc, loc, err = localize(net)
    assert suspects(loc) == {("host", ("n05",))}, (loc, err[-3000:])
    assert loc["worlds_run"] <= BOUND, loc["worlds"]
    worlds = {w["index"]: w for w in loc["worlds"]}
    (sus,) = loc["suspects"]
    evidence = [worlds[i] for i in sus["convicted_by"]]
    assert all("n05" in w["members"] and not w["passed"] for w in evidence)
    assert any(w["stage"] == "confirm" and w["busbw_gbps"] < FLOOR_GBPS for w in evidence)
    assert "drain n05" in sus["remediation"]
    assert rc == 1


@pytest.mark.timeout(1800)
def test_two_slow_hosts_a_slow_pair_and_an_unreachable_host_told_apart(net: NetFleet) -> None:
    # One search for three acceptance cases (CI time): n08 down, n02 and n06 throttled, and only
    # the path between n03 and n04 throttled (each of them is fine with anyone else).
    net.throttle_host("n02", THROTTLE_MBIT)
    net.throttle_host("n06", THROTTLE_MBIT)
    net.throttle_pair("n03", "n04", THROTTLE_MBIT)
    net.stop("n08")
    try:
        rc, loc, err = localize(net)
    finally:
        net.start("n08")
    assert loc["excluded"]["n08"]["status"] == "unreachable", loc["excluded"]
    assert "n08" not in loc["hosts"] and "n08" not in str(loc["suspects"])
    assert suspects(loc) == {("host", ("n02",)), ("host", ("n06",)),
                             ("link", ("n03", "n04"))}, (loc, err[-3000:])
    link = next(s for s in loc["suspects"] if s["kind"] == "link")
    worlds = {w["index"]: w for w in loc["worlds"]}
    # each end of the link passed with a host proven good
    assert {h for i in link["cleared_by"] for h in worlds[i]["members"]} >= {"n03", "n04"}
    assert "n03" in loc["good"] and "n04" in loc["good"]
    assert rc == 1
