"""`gpufleet deepcheck`'s decisions (engines/slurm/deepcheck.py): which idle nodes get a
preemptible full or multinode check this run and why the others do not; Slurm's output read as
untrusted (deepqueue.py, preempt.py). The real cluster run is
tests/slurm/test_slurm_deepcheck.py."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.engines.slurm import deepcheck as dc
from gpufleet.engines.slurm import deepqueue as dq
from gpufleet.engines.slurm import preempt
from gpufleet.engines.slurm.drain import NodeState, SlurmError
from gpufleet.history.coverage import last_deep, last_run

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
DAY = 86400.0
S = dc.Settings("scavenger", goal=timedelta(days=7), every=timedelta(hours=1),
                cooldown=timedelta(hours=6), max_jobs=4)


def _nodes(**states: str) -> dict[str, NodeState]:
    return {n: NodeState(n, ("prod", "scavenger"), st_) for n, st_ in states.items()}


def _plan(nodes: dict[str, NodeState], ages: dict[str, float | None], *,
          queued: dict[str, str] | None = None, last: dict[str, datetime] | None = None,
          s: dc.Settings = S) -> dict[str, dc.Choice]:
    return {c.node: c for c in dc.plan(dc.Inputs(nodes, queued or {}, ages, last or {}), s, NOW)}


def test_never_checked_idle_node_first_then_the_oldest() -> None:
    nodes = _nodes(a="idle", b="idle", c="idle")
    s = dc.Settings("scavenger", timedelta(days=7), timedelta(hours=12), timedelta(hours=6), 4)
    got = dc.plan(dc.Inputs(nodes, {}, {"a": 5 * DAY, "b": None, "c": 8 * DAY}, {}), s, NOW)
    # 3 nodes, goal 7 d, every 12 h: ceil(3 * 0.5 / 7) = 1 per run: b (never), then c, a.
    assert [(c.node, c.decision) for c in got] == [("b", "submit"), ("c", "skip"), ("a", "skip")]
    assert got[0].why == "never passed a full check"
    assert got[1].why.startswith("over this run's budget: 1 of 1 per run (3 node(s)")


def test_only_idle_nodes_and_not_twice() -> None:
    nodes = _nodes(a="allocated", b="mixed", c="idle", d="drained", e="idle*", f="idle")
    got = _plan(nodes, dict.fromkeys(nodes), queued={"f": "17"})
    assert got["c"].decision == "submit"
    for n, state in (("a", "allocated"), ("b", "mixed"), ("d", "drained"), ("e", "idle*")):
        assert (got[n].decision, got[n].why) == ("skip", f"not idle ({state})")
    assert (got["f"].decision, got["f"].job) == ("skip", "17")
    assert got["f"].why == "a deep-check job is already queued or running"


def test_covered_node_waits_until_half_its_goal() -> None:
    got = _plan(_nodes(a="idle", b="idle"), {"a": 3 * DAY, "b": 3.6 * DAY})
    assert got["a"].decision == "skip"
    assert got["a"].why == "covered 3.0d ago, due after half its goal (3.5d)"
    assert got["b"].decision == "submit"
    assert got["b"].why == "last full check passed 3.6d ago (goal 7.0d)"


def test_cool_down_after_any_deep_check_even_a_failed_one() -> None:
    # a's last full check failed 2 h ago (so its passing age is 9 d): not again for 6 h.
    got = _plan(_nodes(a="idle"), {"a": 9 * DAY}, last={"a": NOW - timedelta(hours=2)})
    assert got["a"].decision == "skip"
    assert got["a"].why == "cool-down: last deep check 2.0h ago (cool-down 6.0h)"
    later = _plan(_nodes(a="idle"), {"a": 9 * DAY}, last={"a": NOW - timedelta(hours=7)})
    assert later["a"].decision == "submit"


def test_the_queue_cap_counts_jobs_already_queued() -> None:
    nodes = _nodes(**{f"n{i}": "idle" for i in range(200)})
    ages: dict[str, float | None] = dict.fromkeys(nodes)
    # 200 nodes every hour against 7 d: ceil(200/168) = 2 per run; 3 of max 4 queued: room 1.
    got = _plan(nodes, ages, queued={"n0": "1", "n1": "2", "n2": "3"})
    assert sum(c.decision == "submit" for c in got.values()) == 1
    full = _plan(nodes, ages, queued={"n0": "1", "n1": "2", "n2": "3", "n3": "4"})
    assert sum(c.decision == "submit" for c in full.values()) == 0


@given(st.integers(1, 3000), st.integers(1, 48), st.integers(1, 30))
def test_budget_covers_the_fleet_once_per_goal(fleet: int, every_h: int, goal_d: int) -> None:
    s = dc.Settings("p", timedelta(days=goal_d), timedelta(hours=every_h), timedelta(0), 10**6)
    # runs per goal = goal_d * 24 / every_h, compared in integers (a float product read
    # 231 * (24 / 44) as 125.99999 < 126 once: the hypothesis case fleet=126, every 44 h, 1 d)
    per_run = dc.budget(fleet, s)
    assert per_run * goal_d * 24 >= fleet * every_h  # enough to reach the goal
    assert (per_run - 1) * goal_d * 24 < fleet * every_h or per_run == 1  # no burst beyond it


def test_sinfo_names_are_untrusted() -> None:
    text = ("dc1|scavenger|idle|Unknown|none\n"
            "dc2|prod*|idle|Unknown|none\n"
            "dc2|scavenger|allocated|Unknown|none\n"
            "$(reboot)|scavenger|idle|Unknown|none\n"
            "-wdc9|scavenger|idle|Unknown|none\n"
            "other|prod|idle|Unknown|none\n")
    nodes, notes = dq.parse_nodes(text, "scavenger")
    assert sorted(nodes) == ["dc1", "dc2"]
    assert len(notes) == 2 and all("not a host name" in n for n in notes)


def test_squeue_live_jobs_by_node() -> None:
    text = ("41|RUNNING|dc1|dc1\n"
            "42|PENDING||dc2\n"
            "43|PENDING|(null)|dc3\n"
            "44|COMPLETED|dc4|dc4\n"
            "45|PENDING||dc[5-6]\n"
            "garbage\n")
    queued, groups, notes = dq.parse_queue(text)
    assert queued == {"dc1": "41", "dc2": "42", "dc3": "43"}
    assert groups == {"45": "dc[5-6]"}  # a multinode job: scontrol show hostnames expands it
    assert len(notes) == 1


def test_job_script_quotes_every_argument() -> None:
    script = dq.job_script("/opt/gf bin/gpufleet", Path("/shared/store; rm -rf x"),
                           expect=Path("/etc/gpufleet/expect.yml"), drain=True, smoke_timeout=600)
    assert script.startswith("#!/bin/sh\n")
    last = script.strip().splitlines()[-1]
    assert last == ("exec '/opt/gf bin/gpufleet' node-check --level full --history "
                    "'/shared/store; rm -rf x' --smoke-timeout 600 --format json --expect "
                    "/etc/gpufleet/expect.yml --slurm-drain")


def test_sbatch_is_preemptible_lowest_priority_and_pinned() -> None:
    argv = dq.sbatch_argv(["dc1"], S, minutes=35, log_dir=Path("/var/log/gf"))
    assert argv[:2] == ["sbatch", "--parsable"]
    assert not any(a.startswith("--qos") for a in argv)
    for opt in ("--partition=scavenger", "--nodelist=dc1", "--nodes=1", "--ntasks=1",
                "--requeue", "--exclusive", f"--nice={dq.NICE}", "--time=35",
                "--job-name=gpufleet-deepcheck",
                "--output=/var/log/gf/gpufleet-deepcheck-%N-%j.out"):
        assert opt in argv


class _Slurm:
    def __init__(self, **out: tuple[int, str, str]) -> None:
        self.out = out
        self.calls: list[tuple[list[str], str | None]] = []

    def __call__(self, argv: Sequence[str], stdin: str | None) -> dq.CommandOutput:
        self.calls.append((list(argv), stdin))
        return dq.CommandOutput(*self.out[argv[0]])


def test_queue_reads_and_submits_through_its_runner() -> None:
    fake = _Slurm(sinfo=(0, "dc1|scavenger|idle|Unknown|none\n", ""),
                  squeue=(0, "", ""), sbatch=(0, "1234;cluster\n", ""))
    q = dq.Queue("scavenger", runner=fake)
    assert list(q.nodes()) == ["dc1"] and q.queued() == {}
    assert q.submit(["sbatch", "--parsable"], "#!/bin/sh\n") == "1234"
    assert fake.calls[-1] == (["sbatch", "--parsable"], "#!/bin/sh\n")


def test_a_refused_sbatch_is_one_redacted_sentence() -> None:
    fake = _Slurm(sbatch=(1, "", "sbatch: error: Batch job submission failed: "
                                 "Invalid partition name specified token=hf_abcdefghijklmnop\n"))
    with pytest.raises(SlurmError) as err:
        dq.Queue("scavenger", runner=fake).submit(["sbatch"], "")
    assert "Invalid partition name" in str(err.value)
    assert "hf_abcdefghijklmnop" not in str(err.value)
    bad = _Slurm(sbatch=(0, "Submitted; rm\n", ""))
    with pytest.raises(SlurmError, match="no job id"):
        dq.Queue("scavenger", runner=bad).submit(["sbatch"], "")


def test_last_run_counts_any_outcome_at_that_level() -> None:
    entries = [
        {"generated_at": "2026-12-01T01:00:00Z", "level": "full",
         "hosts": {"a": {"status": "unreachable"}, "b": {"status": "ok", "smoke": "fail"}}},
        {"generated_at": "2026-12-01T05:00:00Z", "level": "quick", "hosts": {"a": {}}},
        {"generated_at": "bogus", "level": "full", "hosts": {"c": {}}},
    ]
    got = last_run(entries, "full")
    assert got == {"a": datetime(2026, 12, 1, 1, tzinfo=timezone.utc),
                   "b": datetime(2026, 12, 1, 1, tzinfo=timezone.utc)}


def test_deepcheck_without_slurm_is_a_clear_error(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "gpufleet", "deepcheck", "--store",
                           str(tmp_path), "--dry-run"], capture_output=True, text=True,
                          timeout=60, env={"PATH": "/nonexistent", "HOME": str(tmp_path)},
                          check=False)
    assert proc.returncode == 2, proc.stderr
    assert "cannot read Slurm: sinfo: not found" in proc.stderr, proc.stderr


def test_deepcheck_needs_a_store_and_a_duration() -> None:
    for argv, text in ((["deepcheck"], "--store DIR"),
                       (["deepcheck", "--store", "/x", "--goal", "weekly"], "like 30m")):
        proc = subprocess.run([sys.executable, "-m", "gpufleet", *argv], capture_output=True,
                              text=True, timeout=60, env={"PATH": "/nonexistent"}, check=False)
        assert proc.returncode == 2 and text in proc.stderr, proc.stderr


def test_every_option_is_documented_in_slurm_md() -> None:
    from gpufleet.cli import build_parser  # noqa: PLC0415

    docs = (Path(__file__).resolve().parents[2] / "docs" / "slurm.md").read_text()
    sub = build_parser()._subparsers._group_actions[0].choices["deepcheck"]  # type: ignore[union-attr]
    for action in sub._actions:
        for option in action.option_strings:
            assert option in ("-h", "--help") or option in docs, f"{option} not in slurm.md"


def test_the_table_says_per_node_what_and_why() -> None:
    from gpufleet.cli.deepcheck import _render  # noqa: PLC0415

    choices = dc.plan(dc.Inputs(_nodes(dc1="idle", dc2="allocated"), {}, {"dc1": None,
                                "dc2": 2 * DAY}, {}), S, NOW)
    text = _render(choices, S, 2, dry=True)
    assert text.splitlines()[0] == ("gpufleet deepcheck: partition scavenger, 2 node(s), full "
                                    "check every 7.0d, run every 1.0h: 1 per run; would submit 1")
    assert text.splitlines()[2].split() == ["dc1", "submit", "-", "never", "never", "passed",
                                            "a", "full", "check"]
    assert text.splitlines()[3].split()[:5] == ["dc2", "skip", "-", "2.0d", "not"]


CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm-deepcheck-2026-12-01"


def _captured() -> tuple[str, str]:
    return ((CAPTURES / "scontrol-show-partition.txt").read_text(),
            (CAPTURES / "scontrol-show-config.txt").read_text())


def test_the_documented_config_is_preemptible() -> None:
    parts, config = _captured()
    nodes, _ = dq.parse_nodes((CAPTURES / "sinfo.txt").read_text(), "scavenger")
    assert sorted(nodes) == ["dc1", "dc2"] and nodes["dc1"].partitions == ("scavenger", "gpu")
    assert preempt.preemptible(parts, config, "scavenger", ["gpu"]) is None


@pytest.mark.parametrize(("edit", "says"), [
    (("config", "preempt/partition_prio", "preempt/none"), "PreemptType is 'preempt/none'"),
    (("parts", "PriorityTier=10", "PriorityTier=1"),
     "partition scavenger: PriorityTier=1 is not below that of gpu"),
    (("parts", "PreemptMode=REQUEUE", "PreemptMode=SUSPEND"),
     "partition scavenger: PreemptMode=SUSPEND, not REQUEUE"),
    (("parts", "PartitionName=scavenger", "PartitionName=other"),
     "no partition 'scavenger'"),
])
def test_a_config_where_real_jobs_would_wait_is_refused(edit: tuple[str, str, str],
                                                        says: str) -> None:
    parts, config = _captured()
    which, old, new = edit
    if which == "config":
        config = config.replace(old, new)
    else:
        parts = parts.replace(old, new)
    why = preempt.preemptible(parts, config, "scavenger", ["gpu"])
    assert why is not None and says in why, why


# ------------------------------------------------------------------- multinode checks (item 1)

M = dc.Settings("scavenger", goal=timedelta(days=7), every=timedelta(hours=1),
                cooldown=timedelta(hours=6), max_jobs=4, multinode_goal=timedelta(days=1))


def _both(nodes: dict[str, NodeState], ages: dict[str, float | None],
          multi: dict[str, float | None], *, queued: dict[str, str] | None = None,
          last: dict[str, datetime] | None = None, s: dc.Settings = M
          ) -> tuple[dict[str, dc.Choice], dict[str, dc.Choice]]:
    got = dc.Inputs(nodes, queued or {}, ages, last or {}, multi)
    many = dc.plan_multinode(got, s, NOW)
    return ({c.node: c for c in dc.plan(got, s, NOW, taken=many)}, {c.node: c for c in many})


def test_multinode_groups_of_due_idle_nodes_oldest_first() -> None:
    nodes = _nodes(a="idle", b="idle", c="idle", d="allocated", e="idle")
    multi = {"a": 2 * DAY, "b": None, "c": 0.2 * DAY, "d": None, "e": 0.9 * DAY}
    full, many = _both(nodes, dict.fromkeys(nodes, 5 * DAY), multi)
    # 5 nodes hourly against a 1 d goal, 2 per job: ceil(5/48) = 1 job; due: b (never), a, e.
    assert (many["b"].decision, many["a"].decision) == ("submit", "submit")
    assert many["b"].group == many["a"].group == ("b", "a")
    assert many["b"].why == "never passed a multinode check"
    assert many["a"].why == "last multinode check passed 2.0d ago (goal 24.0h)"
    assert many["e"].decision == "skip"
    assert many["e"].why == "over this run's budget: 1 of 1 multinode job(s) per run"
    assert many["c"].why == "covered 4.8h ago, due after half its goal (12.0h)"
    assert many["d"].why == "not idle (allocated)"
    # The full check takes what is left: a and b are spoken for.
    assert full["a"].decision == "skip" and full["a"].why == "in this run's multinode check (b, a)"
    assert [n for n, c in full.items() if c.decision == "submit"] == ["c"]


def test_a_lone_due_node_waits_for_a_partner() -> None:
    _, many = _both(_nodes(a="idle", b="mixed"), {"a": DAY, "b": DAY}, {"a": None, "b": None})
    assert many["a"].decision == "skip"
    assert many["a"].why == "no idle partner: 1 node(s) due, 2 per multinode check"


def test_multinode_jobs_count_against_max_jobs_by_job_not_node() -> None:
    nodes = _nodes(**{f"n{i}": "idle" for i in range(8)})
    s = dc.Settings("scavenger", timedelta(days=7), timedelta(hours=12), timedelta(hours=6), 3,
                    timedelta(hours=12))
    # One queued multinode job on n0, n1 is one job of 3: room for 2 more, the first to the
    # multinode check (8 nodes every 12 h against 12 h, 2 per job: 4 per run, room 2).
    full, many = _both(nodes, dict.fromkeys(nodes), dict.fromkeys(nodes),
                       queued={"n0": "7", "n1": "7"}, s=s)
    assert len({c.group for c in many.values() if c.decision == "submit"}) == 2
    assert not [c for c in full.values() if c.decision == "submit"]
    assert many["n0"].why == "a deep-check job is already queued or running"


def test_no_multinode_goal_plans_no_multinode_check() -> None:
    nodes = _nodes(a="idle", b="idle")
    assert dc.plan_multinode(dc.Inputs(nodes, {}, {}, {}, {}), S, NOW) == []


def test_cool_down_spans_both_kinds_of_deep_check() -> None:
    entries = [
        {"generated_at": "2026-12-01T09:00:00Z", "level": "quick",
         "hosts": {"a": {"status": "ok", "smoke": "fail", "world": 2},
                   "b": {"status": "ok", "smoke": "pass", "world": 1}}},
        {"generated_at": "2026-12-01T08:00:00Z", "level": "full", "hosts": {"b": {}}},
    ]
    last = last_deep(entries)
    assert last == {"a": datetime(2026, 12, 1, 9, tzinfo=timezone.utc),
                    "b": datetime(2026, 12, 1, 8, tzinfo=timezone.utc)}
    # a's failed multinode run 3 h ago: no full check on it yet, nor another multinode one.
    full, many = _both(_nodes(a="idle", b="idle", c="idle"), {"a": None, "b": None, "c": None},
                       {"a": None, "b": None, "c": None}, last=last)
    assert full["a"].why == many["a"].why == "cool-down: last deep check 3.0h ago (cool-down 6.0h)"
    assert full["c"].decision == "submit"


def test_multinode_job_script_and_sbatch() -> None:
    script = dq.multinode_script("/opt/gf bin/gpufleet", Path("/shared/st ore"),
                                 expect=Path("/etc/gpufleet/expect.yml"), level="quick",
                                 smoke_timeout=300)
    assert script.strip().splitlines()[-1] == (
        "exec '/opt/gf bin/gpufleet' smoke --slurm --level quick --save '/shared/st ore' "
        "--smoke-timeout 300 --format json --expect /etc/gpufleet/expect.yml")
    argv = dq.sbatch_argv(["dc1", "dc2"], M, minutes=10, log_dir=None, qos="scavenger")
    for opt in ("--job-name=gpufleet-deepcheck-multinode", "--nodelist=dc1,dc2", "--nodes=2",
                "--ntasks-per-node=1", "--exclusive", "--requeue", "--qos=scavenger"):
        assert opt in argv, argv
    assert "--ntasks=1" not in argv  # -N2 -n1 would make Slurm shrink the job to one node


def test_queued_multinode_jobs_are_expanded_per_node() -> None:
    class Fake(_Slurm):
        def __call__(self, argv: Sequence[str], stdin: str | None) -> dq.CommandOutput:
            if argv[:3] == ["scontrol", "show", "hostnames"]:
                self.calls.append((list(argv), stdin))
                return dq.CommandOutput(0, "dc5\ndc6\n$(x)\n", "")
            return super().__call__(argv, stdin)

    fake = Fake(squeue=(0, "45|RUNNING|dc[5-6]|dc[5-6]\n46|PENDING||dc1\n", ""))
    q = dq.Queue("scavenger", runner=fake)
    assert q.queued() == {"dc5": "45", "dc6": "45", "dc1": "46"}
    assert fake.calls[0][0][:6] == ["squeue", "-h", "-p", "scavenger", "-n",
                                    "gpufleet-deepcheck,gpufleet-deepcheck-multinode"]
    assert fake.calls[1][0] == ["scontrol", "show", "hostnames", "dc[5-6]"]
    assert len(q.notes) == 1 and "not a host name" in q.notes[0]


def test_coverage_counts_a_passing_world_of_two_as_multinode() -> None:
    from gpufleet.history.coverage import coverage  # noqa: PLC0415

    entries = [{"generated_at": "2026-12-01T06:00:00Z", "level": "quick",
                "hosts": {"a": {"status": "ok", "smoke": "pass", "world": 2},
                          "b": {"status": "ok", "smoke": "pass", "world": "2"}}}]
    rows = {r.host: r for r in coverage(entries, ["a", "b"], {"multinode": timedelta(days=1)},
                                        NOW)}
    assert rows["a"].age_s["multinode"] == 6 * 3600 and rows["a"].overdue == ()
    assert rows["b"].overdue == ("multinode",)  # a world that is not a number proves nothing


# ---------------------------------------------------------------- QOS-based preemption (item 3)


def _qos_config(**edit: str) -> str:
    _, config = _captured()
    config = config.replace("preempt/partition_prio", "preempt/qos")
    for key, value in edit.items():
        config = "\n".join(ln if not ln.startswith(key) else f"{key} = {value}"
                           for ln in config.splitlines())
    return config


def _qos_text() -> str:
    return (CAPTURES / "sacctmgr-show-qos.txt").read_text()


def test_qos_preemption_accepted_when_every_production_qos_preempts_the_checks() -> None:
    parts, _ = _captured()
    table, notes = preempt.parse_qos(_qos_text())
    assert sorted(table) == ["normal", "scavenger", "urgent"] and notes == []
    assert table["urgent"].preempts == {"scavenger", "normal"}
    assert table["normal"].mode == "" and table["scavenger"].mode == "REQUEUE"
    assert preempt.preemptible(parts, _qos_config(), "scavenger", ["gpu"],
                               qos_text=_qos_text(), qos="scavenger") is None
    assert preempt.preemptible(parts, _qos_config(), "scavenger", ["gpu"],
                               qos_text=_qos_text(), qos="scavenger",
                               production=["normal"]) is None


@pytest.mark.parametrize(("qos_text", "kw", "says"), [
    ("normal||cluster|\nscavenger||requeue|\n", {},
     "QOS normal do(es) not list scavenger in Preempt="),
    ("normal|scavenger|cluster|\nscavenger||suspend|\n", {},
     "QOS scavenger: PreemptMode=SUSPEND, not REQUEUE"),
    ("normal|scavenger|cluster|\nscavenger||cluster|\n", {"PreemptMode": "SUSPEND,GANG"},
     "QOS scavenger: PreemptMode=SUSPEND,GANG"),
    ("normal|scavenger|cluster|\nscavenger||requeue|00:10:00\n", {},
     "PreemptExemptTime=00:10:00: a real job would wait"),
    ("normal|scavenger|cluster|\nscavenger||requeue|\n", {"PreemptExemptTime": "00:05:00"},
     "PreemptExemptTime=00:05:00"),
    ("normal|scavenger|cluster|\n", {}, "sacctmgr lists no QOS 'scavenger'"),
    ("scavenger||requeue|\n", {}, "no QOS besides scavenger"),
    ("normal|scavenger|cluster|\nscavenger||requeue|\n", {"production": "gold"},
     "sacctmgr lists no QOS 'gold' (--production-qos)"),
    ("normal|scavenger|cluster|\nscavenger||requeue|\n", {"qos": ""},
     "say which QOS the deep checks run under (--qos NAME)"),
])
def test_a_qos_setup_where_real_jobs_would_wait_is_refused(qos_text: str, kw: dict[str, str],
                                                           says: str) -> None:
    parts, _ = _captured()
    production = [kw.pop("production")] if "production" in kw else []
    qos = kw.pop("qos", "scavenger") or None
    why = preempt.preemptible(parts, _qos_config(**kw), "scavenger", ["gpu"],
                              qos_text=qos_text, qos=qos, production=production)
    assert why is not None and says in why, why


def test_sacctmgr_lines_are_untrusted() -> None:
    table, notes = preempt.parse_qos("normal|scavenger|cluster|\n"
                                     "ev il|scavenger|cluster|\n"
                                     "x|$(reboot)|cluster|\n"
                                     "short|line\n")
    assert list(table) == ["normal"] and len(notes) == 3


def test_queue_asks_sacctmgr_only_under_preempt_qos() -> None:
    parts, config = _captured()
    fake = _Slurm(scontrol=(0, config, ""))
    nodes = {"dc1": NodeState("dc1", ("scavenger", "gpu"), "idle")}

    def runner(argv: Sequence[str], stdin: str | None) -> dq.CommandOutput:
        if argv[:3] == ["scontrol", "-o", "show"]:
            return dq.CommandOutput(0, parts, "")
        return fake(argv, stdin)

    assert dq.Queue("scavenger", runner=runner).not_preemptible(nodes) is None
    assert [c[0][0] for c in fake.calls] == ["scontrol"]
    fake.out = {"scontrol": (0, _qos_config(), ""), "sacctmgr": (0, _qos_text(), "")}
    assert dq.Queue("scavenger", runner=runner).not_preemptible(nodes, qos="scavenger") is None
    assert fake.calls[-1][0] == ["sacctmgr", "-P", "-n", "show", "qos", preempt.QOS_FORMAT]


def test_smoke_slurm_save_keeps_the_world_for_coverage(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The multinode deep check's job saves through `smoke --slurm --save`; that flag was
    dropped without a word before. The allocation's run is stood in for (the real one runs in
    tests/slurm/test_slurm_deepcheck.py); what is tested is the save and what coverage reads."""
    from gpufleet.cli import main, sweep  # noqa: PLC0415
    from gpufleet.history.coverage import coverage  # noqa: PLC0415
    from gpufleet.history.store import RunStore  # noqa: PLC0415
    from gpufleet.model import HostResult, HostSpec, SmokeResult  # noqa: PLC0415

    world = SmokeResult(status="pass", backend="gloo", world_size=4, hosts=("dc1", "dc2"))

    def fake_run(variables: object, **_: object) -> tuple[dict[str, HostResult],
                                                          dict[str, HostSpec]]:
        return ({n: HostResult(name=n, status="ok", smoke=world) for n in ("dc1", "dc2")},
                {n: HostSpec(name=n, address=n, connection="local") for n in ("dc1", "dc2")})

    monkeypatch.setattr(sweep, "run_slurm_smoke", fake_run)
    with pytest.raises(SystemExit):
        main(["smoke", "--slurm", "--save", str(tmp_path), "--format", "json", "-o",
              str(tmp_path / "out.json")])
    entries = RunStore(tmp_path).entries()
    assert len(entries) == 1 and entries[0]["hosts"]["dc2"]["world"] == 2, entries
    rows = coverage(entries, ["dc1", "dc2"], {"multinode": timedelta(days=1)},
                    datetime.now(timezone.utc))
    assert [r.overdue for r in rows] == [(), ()], rows
