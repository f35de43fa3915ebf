"""Rail-only worlds (localize/rails.py): addresses read from `ip -o -4 addr`, one search per
rail, a slow rail named as "rail R on host X", and how the section and table say it."""

from __future__ import annotations

import pytest

from gpufleet.localize.judge import Measured
from gpufleet.localize.rails import check_names, on_rail, rail_address, search_rails
from gpufleet.localize.render import section, table
from gpufleet.localize.search import localize
from gpufleet.localize.worlds import LocalizeRun
from gpufleet.model import Expectations, Facts, HostResult, HostSpec

# iproute2's one-line form (`ip -o -4 addr show dev gfr1`, as in a network namespace here)
IP_O = ("3: gfr1    inet 10.231.2.15/24 scope global gfr1\\       valid_lft forever "
        "preferred_lft forever\n")
HOSTS = [f"n{i:02d}" for i in range(1, 9)]
RAILS = ["gfr0", "gfr1", "gfr2"]


def test_rail_address_and_names() -> None:
    assert rail_address(IP_O, "gfr1") == "10.231.2.15"
    assert rail_address(IP_O, "gfr0") is None and rail_address("", "gfr1") is None
    check_names(["gfr0", "ib0", "mlx5_0"])
    with pytest.raises(ValueError, match="not an interface name: a;b"):
        check_names(["a;b"])
    spec = on_rail(HostSpec("n01", "10.231.0.11", expect=Expectations(smoke_python="py")),
                   "gfr1", "10.231.2.11")
    assert (spec.expect.smoke_interface, spec.expect.smoke_address, spec.expect.smoke_python) \
        == ("gfr1", "10.231.2.11", "py")


def rail_world(slow: tuple[str, str]) -> object:
    def on(rail: str, have: dict[str, str]) -> object:
        def run(members: tuple[str, ...]) -> Measured:
            bad = rail == slow[0] and slow[1] in members
            return Measured(members, 0.005 if bad else 0.2)
        return run
    return on


def test_one_slow_rail_on_one_host_is_named_with_its_rail() -> None:
    addresses = {h: {r: f"10.231.{k + 1}.{10 + i}" for k, r in enumerate(RAILS)}
                 for i, h in enumerate(HOSTS, start=1)}
    del addresses["n08"]["gfr2"]  # n08 has no third rail
    found = search_rails(HOSTS, RAILS, addresses, rail_world(("gfr1", "n05")),  # type: ignore[arg-type]
                         expectation=lambda m: 0.02, domains={}, strategy="auto", max_worlds=64)
    by = {r.rail: r for r in found}
    assert by["gfr0"].search.outcome == "all_good" and len(by["gfr0"].search.worlds) == 1
    assert [(s.kind, s.hosts) for s in by["gfr1"].search.suspects] == [("host", ("n05",))]
    assert len(by["gfr1"].search.worlds) <= 2 * 3 + 1  # 2 ceil(log2 8) + 1
    assert by["gfr2"].missing == ("n08",) and "n08" not in by["gfr2"].search.hosts
    whole = localize(HOSTS, lambda m: Measured(m, 0.2), expectation=lambda m: 0.02)
    specs = {h: HostSpec(h, h) for h in HOSTS}
    run = LocalizeRun({h: HostResult(h, "ok", facts=Facts()) for h in HOSTS}, {}, whole,
                      "gpufleet_multinode_min_busbw_gbps", specs, found)
    assert run.outcome == "suspects"
    loc = section(run)
    assert loc["outcome"] == "suspects" and loc["search_outcome"] == "all_good"
    rail = loc["rails"]["gfr1"]
    assert rail["suspects"][0]["hosts"] == ["n05"]
    assert rail["suspects"][0]["remediation"].startswith("check rail gfr1 on n05")
    text = table({"localize": loc}, width=160)
    assert text.startswith("1 suspect(s)")
    assert "rail gfr1: suspects" in text and "host n05 on rail gfr1" in text
    assert "rail gfr2: all good, 1 world(s); without it: n08" in text
