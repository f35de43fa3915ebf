"""The localize search on simulated fleets: who is named, and how many worlds it costs.

The simulated world is the contract the real runner keeps: a world's bus bandwidth is that of
its slowest member or link (a ring all-reduce runs at the pace of its slowest hop), with a few
percent of noise; a host that hangs makes the world error.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import pytest

from gpufleet.localize.judge import Measured, baseline, judge
from gpufleet.localize.search import Localization, first_level, localize

GOOD_GBPS = 1.2
SLOW_GBPS = 0.07  # a 40-50 Mbit/s host made a 1 MiB gloo world ~18x slower


class Sim:
    def __init__(self, n: int, *, slow: Sequence[int] = (), links: Sequence[tuple[int, int]] = (),
                 hang: Sequence[int] = (), seed: int = 1) -> None:
        self.hosts = [f"h{i:05d}" for i in range(n)]
        self.slow = {self.hosts[i] for i in slow}
        self.hang = {self.hosts[i] for i in hang}
        self.links = [{self.hosts[a], self.hosts[b]} for a, b in links]
        self.rng = random.Random(seed)
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, members: tuple[str, ...]) -> Measured:
        assert len(members) >= 2 and len(set(members)) == len(members), members
        self.calls.append(members)
        if self.hang & set(members):
            return Measured(members, None, error="rank 3 hung in all_reduce", hung=True)
        bad = bool(self.slow & set(members)) or any(link <= set(members) for link in self.links)
        bw = (SLOW_GBPS if bad else GOOD_GBPS) * self.rng.uniform(0.95, 1.05)
        return Measured(members, bw)


def floor(_members: Sequence[str]) -> float:
    return 0.5


def bound(n: int) -> int:
    return 2 * math.ceil(math.log2(n)) + 2


def named(result: Localization) -> dict[str, set[tuple[str, ...]]]:
    out: dict[str, set[tuple[str, ...]]] = {}
    for s in result.suspects:
        out.setdefault(s.kind, set()).add(tuple(sorted(s.hosts)))
    return out


def test_all_good_costs_one_world() -> None:
    sim = Sim(8)
    r = localize(sim.hosts, sim, expectation=floor)
    assert r.outcome == "all_good" and len(r.worlds) == 1 and r.suspects == ()
    assert r.good == tuple(sim.hosts)


@pytest.mark.parametrize("n", [2, 3, 5, 8, 13, 16, 32, 100, 232, 1000, 4096])
def test_one_slow_host_within_bound_wherever_it_sits(n: int) -> None:
    for bad in sorted({0, 1, n // 3, n // 2, n - 2, n - 1}):
        sim = Sim(n, slow=[bad])
        r = localize(sim.hosts, sim, expectation=floor)
        if n == 2:  # nobody can be proven good: both stay undecided, never a wrong name
            assert r.outcome == "inconclusive" and r.suspects == ()
            continue
        assert named(r) == {"host": {(sim.hosts[bad],)}}, (n, bad, r.suspects)
        assert len(r.worlds) <= bound(n), (n, bad, len(r.worlds))
        assert len(sim.calls) == len(r.worlds)


def test_8_hosts_costs_at_most_8_worlds_and_convicting_worlds_are_named() -> None:
    sim = Sim(8, slow=[5])
    r = localize(sim.hosts, sim, expectation=floor)
    assert len(r.worlds) <= 8
    (s,) = r.suspects
    assert s.hosts == (sim.hosts[5],)
    evidence = [r.worlds[i - 1] for i in s.convicted_by]
    assert all(not w.passed and sim.hosts[5] in w.members for w in evidence)
    assert any(w.stage == "confirm" and len(w.members) == 2 for w in evidence)
    partner = next(w for w in evidence if w.stage == "confirm").members[0]
    assert partner in r.good


@pytest.mark.parametrize("n", [8, 16, 64, 1024])
def test_two_and_three_bad_hosts_all_named(n: int) -> None:
    for bad in ([1, 6], [0, 1], [2, n - 1, n // 2]):
        sim = Sim(n, slow=bad)
        r = localize(sim.hosts, sim, expectation=floor)
        assert named(r) == {"host": {(sim.hosts[b],) for b in bad}}, (n, bad, r.suspects)
        assert len(r.worlds) <= len(bad) * bound(n)


@pytest.mark.parametrize("n", [8, 16, 32, 1000])
def test_bad_link_between_good_hosts_named_as_pair(n: int) -> None:
    for a, b in ((5, 6), (0, n - 1), (1, n // 2)):
        sim = Sim(n, links=[(a, b)])
        r = localize(sim.hosts, sim, expectation=floor)
        assert named(r) == {"link": {tuple(sorted((sim.hosts[a], sim.hosts[b])))}}, (n, a, b)
        assert len(r.worlds) <= bound(n) + 1, (n, a, b, len(r.worlds))
        (s,) = r.suspects
        assert s.cleared_by  # each end was seen passing with other hosts


def test_two_slow_hosts_and_a_slow_pair_in_one_fleet() -> None:
    # The fleet test's scenario: no world passes until the search proves a host good itself.
    sim = Sim(7, slow=[1, 5], links=[(2, 3)])
    r = localize(sim.hosts, sim, expectation=floor)
    h = sim.hosts
    assert named(r) == {"host": {(h[1],), (h[5],)}, "link": {(h[2], h[3])}}, r.suspects
    assert len(r.worlds) <= 12


def test_hang_fails_a_world_like_slowness() -> None:
    sim = Sim(16, hang=[9])
    r = localize(sim.hosts, sim, expectation=floor)
    assert named(r) == {"host": {(sim.hosts[9],)}}
    assert any(w.verdict.basis == "error" and "hung" in w.verdict.reason for w in r.worlds)


@pytest.mark.parametrize("n", [8, 16, 32, 232])
def test_without_expectation_sqrt_groups_give_the_baseline(n: int) -> None:
    sim = Sim(n, slow=[n // 2])
    r = localize(sim.hosts, sim)
    assert r.strategy == "sqrt"
    assert named(r) == {"host": {(sim.hosts[n // 2],)}}, r.suspects
    groups = math.ceil(math.sqrt(n))
    assert len(r.worlds) <= 1 + max(3, groups) + bound(n)
    assert {w.verdict.basis for w in r.worlds} >= {"same-size worlds"}


def test_without_expectation_all_good_after_the_baseline() -> None:
    sim = Sim(9)
    r = localize(sim.hosts, sim)
    assert r.outcome == "all_good" and len(r.worlds) == 1 + 3


def test_domains_form_the_first_level() -> None:
    sim = Sim(12, slow=[7])
    domains = {h: f"rack{i // 4}" for i, h in enumerate(sim.hosts)}
    r = localize(sim.hosts, sim, expectation=floor, domains=domains)
    assert r.strategy == "domain"
    groups = [w.members for w in r.worlds if w.stage == "group"]
    assert groups == [tuple(sim.hosts[i:i + 4]) for i in (0, 4, 8)]
    assert named(r) == {"host": {(sim.hosts[7],)}}


def test_budget_stops_the_search_and_says_so() -> None:
    sim = Sim(64, slow=[3])
    r = localize(sim.hosts, sim, expectation=floor, max_worlds=4)
    assert len(r.worlds) == 4 and r.outcome == "inconclusive"
    assert any("stopped after 4 worlds" in n for n in r.notes)


def test_first_level_sqrt_sizes() -> None:
    hosts = [f"h{i}" for i in range(10)]
    used, groups = first_level(hosts, "sqrt", {}, have_expectation=False)
    assert used == "sqrt" and [len(g) for g in groups] == [3, 3, 2, 2]
    assert [h for g in groups for h in g] == hosts


def test_judge_baseline_and_expectation() -> None:
    peers = [Measured(("a", "b"), bw) for bw in (1.0, 1.1, 0.9, 1.05)]
    med, threshold = baseline([1.0, 1.1, 0.9, 1.05])
    assert med == pytest.approx(1.025) and threshold == pytest.approx(1.025 * 0.7)
    slow = judge(Measured(("c", "d"), 0.5), peers)
    assert not slow.passed and slow.basis == "same-size worlds" and "0.5 GB/s <" in slow.reason
    fine = judge(Measured(("c", "d"), 0.95), peers)
    assert fine.passed and fine.judged
    lonely = judge(Measured(("c", "d"), 0.01), peers[:1], passing=[1.0])
    assert lonely.passed and not lonely.judged and lonely.basis == "none"
    topo = judge(Measured(("c", "d"), 0.4), peers, expectation=lambda m: 0.45)
    assert not topo.passed and topo.basis == "topology" and topo.threshold_gbps == 0.45
    err = judge(Measured(("c", "d"), None, error="boom"), peers)
    ref = judge(Measured(("c", "d"), 0.6), [], passing=[1.0, 1.0])
    assert not ref.passed and ref.basis == "passing worlds"
    assert not err.passed and err.basis == "error"
