"""Rail-only localization on 8 network-namespace hosts with 3 rails each (issue 27 item 5).

Every host has its management veth gf0 (ssh, the default worlds) and one veth per rail
(gfr0..gfr2, each rail its own bridge: tests/fleet/netfleet.py). One host's rail 1 is throttled
with tc: the default worlds and rails 0 and 2 are all good, and rail 1's search names that host
on that rail within the bound docs/localize.md states (2⌈log₂N⌉+1 worlds with a floor, 7 at 8
hosts, after one all-hosts world per rail). Floor and throttle as in test_localize_fleet.py.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator

import pytest
from netfleet import NetFleet, make_netfleet

pytestmark = [pytest.mark.fleet, pytest.mark.slow]

NAMES = [f"n{i:02d}" for i in range(1, 9)]
RAILS = ["gfr0", "gfr1", "gfr2"]
FLOOR_GBPS = 0.012  # test_localize_fleet.py: throttled worlds 0.0045-0.0052 GB/s, clean 0.04+
THROTTLE_MBIT = 45
RAIL_BOUND = 2 * math.ceil(math.log2(len(NAMES))) + 1


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetFleet]:
    with make_netfleet(tmp_path_factory.mktemp("netfleet-rails"), NAMES, rails=len(RAILS),
                       all_vars={"gpufleet_multinode_min_busbw_gbps": FLOOR_GBPS}) as fleet:
        fleet.env.update(GPUFLEET_SMOKE_NPROC="1", GPUFLEET_SMOKE_SIZES=str(1 << 20))
        yield fleet


@pytest.mark.timeout(1800)
def test_a_throttled_rail_is_named_as_that_rail_on_that_host(net: NetFleet) -> None:
    net.clear()
    net.throttle_rail("n05", 1, THROTTLE_MBIT)
    try:
        proc = net.run_cli("localize", "-i", str(net.inventory), "--format", "json",
                           "--smoke-timeout", "240", "--rails", ",".join(RAILS), timeout=1700)
    finally:
        net.clear()
    try:
        loc = json.loads(proc.stdout)["localize"]
    except ValueError:
        pytest.fail(f"no JSON (exit {proc.returncode}); stderr:\n{proc.stderr[-4000:]}")
    err = proc.stderr[-3000:]
    assert loc["search_outcome"] == "all_good", (loc, err)  # gf0 is not throttled
    rails = loc["rails"]
    assert set(rails) == set(RAILS)
    assert rails["gfr0"]["outcome"] == "all_good" and rails["gfr2"]["outcome"] == "all_good", err
    assert rails["gfr0"]["worlds_run"] == 1 and rails["gfr2"]["worlds_run"] == 1
    sick = rails["gfr1"]
    assert [(s["kind"], s["hosts"]) for s in sick["suspects"]] == [("host", ["n05"])], (sick, err)
    assert sick["worlds_run"] <= RAIL_BOUND, sick["worlds"]
    assert sick["suspects"][0]["remediation"].startswith("check rail gfr1 on n05")
    assert all(r["missing"] == [] for r in rails.values())
    assert loc["outcome"] == "suspects" and proc.returncode == 1
