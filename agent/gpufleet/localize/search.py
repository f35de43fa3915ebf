"""Adaptive group testing: which host (or link between two hosts) makes multinode worlds fail.

Pure: the world runner and the bandwidth expectation are injected, so the cost bound is tested
on thousands of simulated hosts (tests/unit/test_localize_search.py) and the same code drives
real torchrun worlds (gpufleet.localize.worlds).

Search (docs/localize.md has the reasoning and the cost bound):
1. One world of every host. It passes: all good, one world.
2. First level: the inventory's domains (gpufleet_domain, e.g. racks); else two halves when the
   bandwidth has an expectation; else ceil(sqrt(N)) groups, whose worlds give each other a
   baseline (median - margin) when nothing else says what "slow" is.
3. A failing set is split in two halves and both are tested (so several bad hosts are found);
   failing halves are split again. A failing pair, and a half of one host, is confirmed against
   a host already proven good (a member of a passing world): the host that fails with a good
   partner is convicted.
4. A failing set whose halves all pass needs hosts of both halves: a bad link. Binary search
   for one end on each side, then the pair's own world; both ends pass with good partners, so
   the pair is reported as a link.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from gpufleet.localize.judge import MIN_PEERS, Expectation, Measured, Verdict, judge

WorldRunner = Callable[[tuple[str, ...]], Measured]
_RELATIVE = ("passing worlds", "same-size worlds")  # bases with no outside reference
Stage = Literal["all", "group", "split", "confirm", "link"]
Strategy = Literal["auto", "domain", "binary", "sqrt"]
Outcome = Literal["all_good", "suspects", "inconclusive"]


@dataclass(frozen=True)
class World:
    index: int  # 1-based, in the order run
    stage: Stage
    measured: Measured
    verdict: Verdict

    @property
    def members(self) -> tuple[str, ...]:
        return self.measured.members

    @property
    def passed(self) -> bool:
        return self.verdict.passed


@dataclass(frozen=True)
class Suspect:
    kind: Literal["host", "link", "set"]  # set: fails together, no host or pair reproduces it
    hosts: tuple[str, ...]
    convicted_by: tuple[int, ...]  # indices of failing worlds that name it
    cleared_by: tuple[int, ...] = ()  # link: worlds where each end passed with a good host
    reason: str = ""


@dataclass(frozen=True)
class Localization:
    hosts: tuple[str, ...]
    strategy: str  # the first level used: domain, binary, sqrt (or "-" when not needed)
    outcome: Outcome
    worlds: tuple[World, ...]
    suspects: tuple[Suspect, ...]
    good: tuple[str, ...]  # members of a passing world
    undecided: tuple[str, ...]
    notes: tuple[str, ...] = ()
    wall_s: float = 0.0


class _Budget(Exception):
    pass


@dataclass
class _State:
    run: WorldRunner
    hosts: tuple[str, ...]
    expectation: Expectation | None
    max_worlds: int | None
    worlds: list[World] = field(default_factory=list)
    good: dict[str, None] = field(default_factory=dict)  # insertion-ordered set
    suspects: list[Suspect] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    # ------------------------------------------------------------------ worlds

    def test(self, members: Sequence[str], stage: Stage) -> World:
        if self.max_worlds is not None and len(self.worlds) >= self.max_worlds:
            raise _Budget
        measured = self.run(tuple(members))
        verdict = judge(measured, [w.measured for w in self.worlds], self.expectation,
                        self.passing())
        world = World(len(self.worlds) + 1, stage, measured, verdict)
        self.worlds.append(world)
        if verdict.passed and verdict.judged:
            self.good.update(dict.fromkeys(members))
        return world

    def passing(self) -> list[Measured]:
        return [w.measured for w in self.worlds if w.passed and w.verdict.judged
                and w.measured.busbw_gbps is not None]

    def rejudge(self) -> None:
        """Judge the first level once all of it has run: every group against all the groups (a
        group judged when it ran saw only those before it), then the all-hosts world against
        the groups that passed (of its size or bigger: judge.py). Who is proven good follows.
        """
        if self.expectation is None:
            for i, w in enumerate(self.worlds):
                if w.stage == "group":
                    others = [o.measured for o in self.worlds if o is not w and o.stage == "group"]
                    self.worlds[i] = World(w.index, w.stage, w.measured,
                                           judge(w.measured, others, None, []))
        for i, w in enumerate(self.worlds):
            if w.stage == "all" and not w.verdict.judged:
                others = [o.measured for o in self.worlds if o is not w and o.stage == "group"]
                self.worlds[i] = World(w.index, w.stage, w.measured,
                                       judge(w.measured, others, self.expectation, self.passing()))
        self.good = dict.fromkeys(h for w in self.worlds if w.passed and w.verdict.judged
                                  for h in w.members)

    def world(self, index: int) -> World:
        return self.worlds[index - 1]

    # ------------------------------------------------------------------ verdicts

    def convicted(self) -> set[str]:
        return {h for s in self.suspects if s.kind == "host" for h in s.hosts}

    def convict(self, host: str, *worlds: World, reason: str) -> None:
        if host not in self.convicted():
            failed = tuple(w.index for w in worlds if not w.passed)
            self.suspects.append(Suspect("host", (host,), failed, reason=reason))

    def partner(self, host: str, avoid: Sequence[str] = ()) -> str | None:
        """A host proven good, not `host`, not suspected; outside `avoid` (the failing world:
        the fault may be the link between `host` and one of them) where there is one."""
        bad = self.convicted() | {h for s in self.suspects for h in s.hosts}
        fit = [g for g in self.good if g != host and g not in bad]
        return next((g for g in fit if g not in avoid), fit[0] if fit else None)

    def confirm(self, host: str, evidence: World) -> bool | None:
        """Does `host` fail with a good partner? None: no partner to tell."""
        if host in self.good:
            return False
        if host in self.convicted():
            return True
        partner = self.partner(host, evidence.members)
        if partner is None:
            return None
        w = self.test((partner, host), "confirm")
        if w.passed and not w.verdict.judged:
            return None  # too noisy (or nothing to compare with) to tell
        if w.passed:
            return False
        worlds, partners = [w], [partner]
        if w.verdict.basis in _RELATIVE:
            # Judged against this run's worlds only, a slow world may be noise: a second good
            # partner must see it too before the host is named (one more world per conviction).
            second = self.partner(host, (*evidence.members, partner))
            if second is not None and second != partner:
                again = self.test((second, host), "confirm")
                if again.passed:
                    self.notes.append(f"{host} was slow with {partner} (world {w.index}) but "
                                      f"not with {second} (world {again.index}): not named")
                    return None if not again.verdict.judged else False
                worlds.append(again)
                partners.append(second)
        self.convict(host, evidence, *worlds,
                     reason=f"fails with {' and '.join(partners)}, proven good (world "
                            f"{worlds[-1].index}: {worlds[-1].verdict.reason})")
        return True

    # ------------------------------------------------------------------ search

    def resolve(self, failed: World, members: tuple[str, ...]) -> None:
        """`members` failed together in `failed`: find out which of them, or which pair."""
        if len(members) == 2:
            self.resolve_pair(failed, members)
            return
        left, right = _halves(members)
        failing: list[tuple[World, tuple[str, ...]]] = []
        singles: list[str] = []
        unknown: list[int] = []
        for half in (left, right):
            if len(half) == 1:
                singles.append(half[0])
                continue
            w = self.test(half, "split")
            if not w.passed:
                failing.append((w, half))
            elif not w.verdict.judged:
                unknown.append(w.index)
        for w, half in failing:
            self.resolve(w, half)
        single_bad = False
        for host in singles:
            single_bad = bool(self.confirm(host, failed)) or single_bad
        if not failing and not single_bad:
            if unknown:  # a half that could not be judged is no pass: no link is inferred
                self.notes.append(f"world {failed.index} failed, but its half (world "
                                  f"{unknown[0]}) could not be judged: its hosts stay undecided")
                return
            self.link_search(failed, left, right)

    def resolve_pair(self, failed: World, pair: tuple[str, ...]) -> None:
        a, b = pair
        if self.partner(a) is None and self.partner(b) is None:
            self.prove_one_good(pair)
        fa, fb = self.confirm(a, failed), self.confirm(b, failed)
        if fa is None or fb is None:
            self.notes.append(f"world {failed.index} ({a}, {b}) failed and no host was proven "
                              "good to confirm against: cannot tell which")
            return
        if not fa and not fb:
            if failed.verdict.basis in _RELATIVE and self.test(pair, "link").passed:
                # Judged against this run's own worlds only, one slow world may be noise: the
                # pair ran again and passed, so nothing is named on that one world.
                self.notes.append(f"world {failed.index} ({a}, {b}) was slow once "
                                  f"({failed.verdict.reason}) but passed when run again")
                return
            cleared = tuple(w.index for w in self.worlds if w.passed and w.verdict.judged
                            and len(w.members) >= 2 and (a in w.members) != (b in w.members))
            self.suspects.append(Suspect(
                "link", (a, b), (failed.index,), cleared[:4],
                reason=f"{a} and {b} each pass with other hosts but fail together "
                       f"(world {failed.index}: {failed.verdict.reason})"))  # fmt: skip

    def prove_one_good(self, pair: tuple[str, ...]) -> None:
        """No world has passed yet: pair each end with an outside host until one passes."""
        bad = {h for s in self.suspects for h in s.hosts}
        fit = [h for h in self.hosts if h not in pair and h not in bad]
        outside = fit[0] if fit else None
        if outside is None:
            return
        for end in pair:
            if self.test((outside, end), "confirm").passed:
                return

    def link_search(self, failed: World, left: tuple[str, ...], right: tuple[str, ...]) -> None:
        """Both sides pass alone but not together: narrow each side to one end."""
        while len(left) > 1 or len(right) > 1:
            side = "left" if len(left) > 1 else "right"
            a, b = _halves(left if side == "left" else right)
            w = self.test((*a, *right) if side == "left" else (*left, *a), "link")
            if w.passed and not w.verdict.judged:
                self.notes.append(f"world {w.index} could not be judged: the link search from "
                                  f"world {failed.index} stops there")
                return
            if not w.passed:
                failed = w
            if side == "left":
                left = a if not w.passed else b
            else:
                right = a if not w.passed else b
        pair = (left[0], right[0])
        w = failed if set(failed.members) == set(pair) else self.test(pair, "link")
        if w.passed:
            self.suspects.append(Suspect(
                "set", failed.members, (failed.index,),
                reason=f"world {failed.index} fails as a whole, but every part and pair tried "
                       "passes"))  # fmt: skip
            return
        self.resolve_pair(w, pair)


def _halves(members: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    mid = (len(members) + 1) // 2
    return tuple(members[:mid]), tuple(members[mid:])


def first_level(
    hosts: Sequence[str],
    strategy: Strategy,
    domains: Mapping[str, str],
    have_expectation: bool,
) -> tuple[str, list[tuple[str, ...]]]:
    """(strategy used, the groups) for the level below the all-hosts world."""
    keys = {domains[h] for h in hosts if h in domains}
    if strategy in ("auto", "domain") and len(keys) > 1:
        groups: dict[str, list[str]] = {}
        for h in hosts:
            groups.setdefault(domains.get(h, "(no domain)"), []).append(h)
        return "domain", [tuple(g) for g in groups.values()]
    if strategy == "binary" or (strategy in ("auto", "domain") and have_expectation):
        return "binary", list(_halves(hosts))
    return "sqrt", sqrt_groups(hosts)


def sqrt_groups(hosts: Sequence[str]) -> list[tuple[str, ...]]:
    """About sqrt(N) groups that are each other's baseline, so of one size: worlds are only
    compared with worlds of their size (judge.py). Groups of s = isqrt(N) hosts (at least 2, and
    at least 3 groups where N allows); the r = N mod s left over join the first r groups where
    both sizes then keep MIN_PEERS groups, else each is a group of one (confirmed against a
    host proven good, one pair world each)."""
    n = len(hosts)
    s = max(2, min(math.isqrt(n), n // MIN_PEERS))
    k, r = divmod(n, s)
    if k == 0:
        return [tuple(hosts)]
    sizes = [s] * k
    if r and min(r, k - r) >= MIN_PEERS:
        sizes = [s + 1] * r + [s] * (k - r)
    out, start = [], 0
    for size in sizes:
        out.append(tuple(hosts[start:start + size]))
        start += size
    return out + [(h,) for h in hosts[start:]]


def localize(
    hosts: Sequence[str],
    run: WorldRunner,
    *,
    expectation: Expectation | None = None,
    domains: Mapping[str, str] | None = None,
    strategy: Strategy = "auto",
    max_worlds: int | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Localization:
    """Find the hosts (or links) that make worlds over `hosts` fail; see the module docstring."""
    started = clock()
    hosts = tuple(dict.fromkeys(hosts))
    st = _State(run, hosts, expectation, max_worlds)
    used = "-"

    def done(outcome: Outcome | None = None) -> Localization:
        suspects = tuple(st.suspects)
        named = {h for s in suspects for h in s.hosts}
        good = tuple(h for h in hosts if h in st.good and h not in st.convicted())
        undecided = tuple(h for h in hosts if h not in st.good and h not in named)
        if outcome is None:
            outcome = "suspects" if suspects else "inconclusive"
        if outcome != "all_good":
            st.notes.extend(f"world {w.index} ({len(w.members)} hosts): {w.verdict.reason}"
                            for w in st.worlds if not w.verdict.judged and w.stage != "all")
        return Localization(hosts, used, outcome, tuple(st.worlds), suspects, good, undecided,
                            tuple(st.notes), round(clock() - started, 3))

    if len(hosts) < 2:
        st.notes.append("a multinode world needs two hosts or more")
        return done("inconclusive")
    try:
        whole = st.test(hosts, "all")
        if whole.passed and whole.verdict.judged:
            return done("all_good")
        have = expectation is not None and expectation(hosts) is not None
        used, groups = first_level(hosts, strategy, domains or {}, have)
        tested = [(g, st.test(g, "group") if len(g) > 1 else None) for g in groups]
        st.rejudge()
        tested = [(g, st.world(w.index) if w is not None else None) for g, w in tested]
        whole = st.world(whole.index)
        if not whole.verdict.judged:
            st.notes.append(f"the all-hosts world ({len(hosts)} hosts) was judged on errors and "
                            "hangs only: no other world of its size or bigger to compare its "
                            "bandwidth with (set gpufleet_multinode_min_busbw_gbps)")
        confirmed = whole.passed and all(w is None or (w.passed and w.verdict.judged)
                                         for _, w in tested)
        if confirmed:
            # Every group is good: the hosts left over (groups of one) each get a good partner.
            for g, w in tested:
                if w is None:
                    st.confirm(g[0], whole)
            if all(h in st.good for h in hosts):
                return done("all_good")
        for g, w in tested:
            if w is not None and not w.passed:
                st.resolve(w, g)
        for g, w in tested:
            if w is None and not confirmed:
                st.confirm(g[0], whole)
        if not whole.passed and not st.suspects:
            _across(st, whole, [g for g, _ in tested])
    except _Budget:
        st.notes.append(f"stopped after {max_worlds} worlds (--max-worlds)")
    return done()


def _across(st: _State, failed: World, parts: list[tuple[str, ...]]) -> None:
    """Every part passes alone, the union fails: a link between two parts."""
    while len(parts) > 2:
        mid = (len(parts) + 1) // 2
        sides = (parts[:mid], parts[mid:])
        narrowed = False
        for side in sides:
            if len(side) < 2:
                continue
            w = st.test(tuple(h for p in side for h in p), "link")
            if not w.passed:
                failed, parts, narrowed = w, list(side), True
                break
        if not narrowed:
            left = tuple(h for p in sides[0] for h in p)
            right = tuple(h for p in sides[1] for h in p)
            st.link_search(failed, left, right)
            return
    if len(parts) == 2:
        st.link_search(failed, parts[0], parts[1])
