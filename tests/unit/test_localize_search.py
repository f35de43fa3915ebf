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
    """shared_cpu: every rank on the same few cores, so a world of n runs at 2/n of a pair's
    pace (what the issue-27 netns fleet showed: 8 hosts 0.027 GB/s, 3 hosts 0.10). noise: each
    world's bandwidth times e**U(-noise, noise) (a loaded machine; ±5 % by default)."""

    def __init__(self, n: int, *, slow: Sequence[int] = (), links: Sequence[tuple[int, int]] = (),
                 hang: Sequence[int] = (), seed: int = 1, shared_cpu: bool = False,
                 noise: float = 0.05) -> None:
        self.hosts = [f"h{i:05d}" for i in range(n)]
        self.slow = {self.hosts[i] for i in slow}
        self.hang = {self.hosts[i] for i in hang}
        self.links = [{self.hosts[a], self.hosts[b]} for a, b in links]
        self.rng = random.Random(seed)
        self.calls: list[tuple[str, ...]] = []
        self.shared_cpu, self.noise = shared_cpu, noise

    def __call__(self, members: tuple[str, ...]) -> Measured:
        assert len(members) >= 2 and len(set(members)) == len(members), members
        self.calls.append(members)
        if self.hang & set(members):
            return Measured(members, None, error="rank 3 hung in all_reduce", hung=True)
        bad = bool(self.slow & set(members)) or any(link <= set(members) for link in self.links)
        bw = (SLOW_GBPS if bad else GOOD_GBPS) * math.exp(self.rng.uniform(-self.noise,
                                                                            self.noise))
        if self.shared_cpu:
            bw *= 2 / len(members)
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


@pytest.mark.parametrize(("n", "sizes"), [
    (8, [2, 2, 2, 2]), (9, [3, 3, 3]), (10, [3, 3, 3, 1]), (16, [4] * 4),
    (232, [16] * 7 + [15] * 8), (5, [2, 2, 1]),
])  # fmt: skip
def test_first_level_sqrt_groups_are_of_one_size(n: int, sizes: list[int]) -> None:
    # Groups are each other's baseline and worlds are only compared with worlds of their size:
    # leftovers join groups only where both sizes keep 3 groups, else they are groups of one.
    hosts = [f"h{i}" for i in range(n)]
    used, groups = first_level(hosts, "sqrt", {}, have_expectation=False)
    assert used == "sqrt" and [len(g) for g in groups] == sizes
    assert [h for g in groups for h in g] == hosts


def test_no_fault_on_shared_cpus_convicts_nobody() -> None:
    # Issue 27 item 0, first failure: the world of 8 (slower on shared CPUs) was judged against
    # the 3-host worlds and five good hosts were convicted. Failed on ef054d5 ("suspects").
    sim = Sim(8, shared_cpu=True)
    r = localize(sim.hosts, sim)
    assert r.suspects == () and r.outcome == "all_good", (r.outcome, r.suspects, r.notes)
    assert any("judged on errors and hangs only" in note for note in r.notes)
    for w in r.worlds:
        if w.verdict.judged and w.verdict.basis != "error":
            assert "passing worlds" in w.verdict.basis or "same-size" in w.verdict.basis
        assert w.verdict.threshold_gbps is None or w.verdict.threshold_gbps > 0


@pytest.mark.parametrize("n", [8, 16, 64])
def test_one_slow_host_on_shared_cpus_is_named(n: int) -> None:
    sim = Sim(n, slow=[n // 2 + 1], shared_cpu=True)
    r = localize(sim.hosts, sim)
    assert named(r) == {"host": {(sim.hosts[n // 2 + 1],)}}, (r.suspects, r.notes)


def test_noise_wider_than_the_median_is_inconclusive_never_all_good() -> None:
    # Issue 27 item 0, second failure: a margin wider than the median gave a negative threshold
    # (-0.127 GB/s) and passed a throttled host: "all_good". Failed on ef054d5. Each world here
    # is off by up to e**0.9 (2.5x either way, about what the loaded 2-core fleet shows); the
    # slow host is still 17x slower, so a judge may say "inconclusive" but never "all good".
    wrong = 0
    for seed in range(300):
        sim = Sim(8, slow=[4], noise=0.9, seed=seed)
        r = localize(sim.hosts, sim)
        assert r.outcome != "all_good", (seed, r.worlds)
        assert all(w.verdict.threshold_gbps is None or w.verdict.threshold_gbps > 0
                   for w in r.worlds), seed
        wrong += named(r) not in ({}, {"host": {(sim.hosts[4],)}})
        if r.outcome == "inconclusive":
            assert any("GB/s" in note for note in r.notes), r.notes
    assert wrong <= 3, wrong  # measured: 2 of 300 name a good host too, by noise


def test_moderate_noise_names_exactly_the_slow_host_or_nobody() -> None:
    for seed in range(300):  # ±35 %: every run right (measured 300 of 300)
        sim = Sim(8, slow=[4], noise=0.3, seed=seed)
        assert named(localize(sim.hosts, sim)) == {"host": {(sim.hosts[4],)}}, seed
        clean = Sim(8, noise=0.3, seed=seed, shared_cpu=True)
        assert localize(clean.hosts, clean).outcome == "all_good", seed


def test_threshold_never_at_or_below_zero() -> None:
    base = baseline([0.0945, 0.01, 0.4, 0.002])
    assert base.threshold > 0 and base.too_wide
    assert baseline([1.0, 1.0, 1.0]).factor == pytest.approx(2.0)  # at least half the median


def test_judge_baseline_and_expectation() -> None:
    peers = [Measured(("a", "b"), bw) for bw in (1.0, 1.1, 0.9, 1.05)]
    base = baseline([1.0, 1.1, 0.9, 1.05])
    assert base.median == pytest.approx(math.sqrt(1.0 * 1.05))  # geometric: the middle two
    assert base.threshold == pytest.approx(base.median * 0.5)
    slow = judge(Measured(("c", "d"), 0.4), peers)
    assert not slow.passed and slow.basis == "same-size worlds" and "0.4 GB/s <" in slow.reason
    fine = judge(Measured(("c", "d"), 0.95), peers)
    assert fine.passed and fine.judged
    lonely = judge(Measured(("c", "d"), 0.01), peers[:1], passing=[peers[0]])
    assert lonely.passed and not lonely.judged and lonely.basis == "none"
    topo = judge(Measured(("c", "d"), 0.4), peers, expectation=lambda m: 0.45)
    assert not topo.passed and topo.basis == "topology" and topo.threshold_gbps == 0.45
    err = judge(Measured(("c", "d"), None, error="boom"), peers)
    ref = judge(Measured(("c", "d"), 0.45), [], passing=peers[:2])
    assert not ref.passed and ref.basis == "passing worlds"
    # a bigger world is never judged against smaller ones: 8 hosts against pairs is "none"
    big = judge(Measured(tuple("abcdefgh"), 0.3), [], passing=peers)
    assert big.passed and not big.judged and big.basis == "none"
    assert not err.passed and err.basis == "error"
