"""The localize output: a SmokeResult read as a world, the JSON section, the table, exclusions."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from gpufleet.localize.judge import Measured
from gpufleet.localize.render import section, table
from gpufleet.localize.search import localize
from gpufleet.localize.worlds import (
    Excluded,
    LocalizeRun,
    _exclusions,
    _versions,
    failure_domains,
    inventory_floor,
    measured,
    parse_versions,
    progress_line,
    world_busbw,
)
from gpufleet.model import (
    Expectations,
    Facts,
    GpuProcess,
    HostResult,
    HostSpec,
    SmokeCheck,
    SmokeResult,
)
from gpufleet.transport.local import LocalTransport

REPO = Path(__file__).resolve().parents[2]
HOSTS = tuple(f"gpu{i:02d}" for i in range(1, 9))


def busbw_check(gbps: float, passed: bool = True) -> SmokeCheck:
    return SmokeCheck("busbw", passed, "1 MiB ...",
                      {"sizes": {"262144": {"busbw_gbps": 9.0}, "1048576": {"busbw_gbps": gbps}},
                       "per_host_busbw_gbps": {"gpu01": {"1048576": 99.0}}})


def smoke(status: str, *checks: SmokeCheck, error: str | None = None) -> SmokeResult:
    return SmokeResult(status=status, checks=checks, hosts=HOSTS[:2], error=error,  # type: ignore[arg-type]
                       busbw_gbps={1048576: 99.0})


def test_world_bandwidth_is_the_worlds_at_the_largest_size_not_a_hosts() -> None:
    assert world_busbw(smoke("pass", busbw_check(0.25))) == 0.25
    names = HOSTS[:2]
    ok = measured(names, dict.fromkeys(names, smoke("pass", busbw_check(0.25))), 3.0)
    assert ok == Measured(names, 0.25, duration_s=3.0)


def test_a_world_below_the_scripts_floor_is_measured_not_an_error() -> None:
    names = HOSTS[:2]
    slow = smoke("fail", SmokeCheck("ddp", True), busbw_check(0.004, passed=False),
                 error="busbw: too low")
    m = measured(names, dict.fromkeys(names, slow), 1.0)
    assert m.error is None and m.busbw_gbps == 0.004


def test_broken_and_hung_worlds_are_errors() -> None:
    names = HOSTS[:2]
    broken = smoke("fail", SmokeCheck("allreduce_exact", False, "rank 1 got 3.0"),
                   busbw_check(0.2), error="allreduce_exact: rank 1 got 3.0")
    m = measured(names, dict.fromkeys(names, broken), 1.0)
    assert m.error == "allreduce_exact: rank 1 got 3.0" and not m.hung
    hung = SmokeResult(status="timeout", error="rank(s) 1 hung", hosts=names)
    m = measured(names, dict.fromkeys(names, hung), 1.0)
    assert m.hung and m.error == "rank(s) 1 hung" and m.busbw_gbps is None
    assert measured(names, {}, 1.0).error == "the runner returned no result"


def test_exclusions_unreachable_busy_and_version_minority() -> None:
    facts = Facts()
    busy = Facts(gpu_processes=(GpuProcess(pid=42, name="python", gpu_uuid="GPU-1"),))
    results = {
        "a": HostResult("a", "ok", facts=facts), "b": HostResult("b", "ok", facts=facts),
        "c": HostResult("c", "ok", facts=facts), "d": HostResult("d", "ok", facts=busy),
        "e": HostResult("e", "unreachable", error="e: connection refused"),
        "f": HostResult("f", "ok", facts=facts),
    }  # fmt: skip
    same = {"torch": "2.13.0", "cuda": None, "nccl": None}
    versions: dict[str, dict[str, str | None] | str] = {
        "a": same, "b": same, "d": same, "f": "no usable torch for python3: not found",
        "c": {**same, "torch": "2.12.0"},
    }
    out = _exclusions(results, versions, force=False)
    assert out["e"] == Excluded("unreachable", "e: connection refused")
    assert out["d"].status == "busy" and "pid 42 python" in out["d"].reason
    assert out["c"].status == "version" and "torch 2.12.0" in out["c"].reason
    assert "most hosts have cuda none, nccl none, torch 2.13.0" in out["c"].reason
    assert out["f"].status == "error"
    assert set(out) == {"c", "d", "e", "f"}
    assert "d" not in _exclusions(results, versions, force=True)


def test_inventory_floor_is_the_lowest_member_floor() -> None:
    specs = {h: HostSpec(h, h, expect=Expectations(multinode_min_busbw_gbps=f))
             for h, f in (("a", 2.0), ("b", 1.0), ("c", None))}
    floor = inventory_floor(specs)
    assert floor is not None and floor(["a", "b"]) == 1.0 and floor(["a", "c"]) == 2.0
    assert floor(["c"]) is None
    assert inventory_floor({"c": specs["c"]}) is None


@pytest.fixture
def run() -> LocalizeRun:
    slow = {"gpu05"}

    def world(members: tuple[str, ...]) -> Measured:
        return Measured(members, 0.05 if slow & set(members) else 1.0, duration_s=2.0)

    search = localize(HOSTS[:7], world, expectation=lambda m: 0.5)
    specs = {h: HostSpec(h, h, expect=Expectations(slurm_node=f"node-{h}")) for h in HOSTS}
    results = {h: HostResult(h, "ok", facts=Facts()) for h in HOSTS[:7]}
    results["gpu08"] = HostResult("gpu08", "unreachable", error="gpu08: no route to host")
    excluded = {"gpu08": Excluded("unreachable", "gpu08: no route to host")}
    return LocalizeRun(results, excluded, search, "gpufleet_multinode_min_busbw_gbps", specs)


def test_section_validates_and_names_the_evidence(run: LocalizeRun) -> None:
    loc = section(run)
    schema = json.loads((REPO / "agent/gpufleet/schema/report-v1.json").read_text())
    jsonschema.Draft202012Validator(
        {**schema["$defs"]["localize"], "$defs": schema["$defs"]}).validate(loc)
    assert loc["outcome"] == "suspects" and loc["worlds_run"] == len(loc["worlds"])
    (sus,) = loc["suspects"]
    assert sus["kind"] == "host" and sus["hosts"] == ["gpu05"]
    assert "scontrol update NodeName=node-gpu05 State=DRAIN Reason='gpufleet localize:" in \
        sus["remediation"]
    assert loc["excluded"] == {"gpu08": {"status": "unreachable",
                                         "reason": "gpu08: no route to host"}}
    assert "gpu08" not in loc["hosts"]


def test_table_leads_with_the_verdict_and_the_evidence(run: LocalizeRun) -> None:
    text = table({"localize": section(run)}, width=140)
    lines = text.splitlines()
    assert lines[0].startswith("1 suspect(s): 7 host(s) tested, ")
    assert "left out gpu08 (unreachable): gpu08: no route to host" in text
    assert any(line.startswith("host gpu05: fails with gpu01") for line in lines)
    assert "fix: drain gpu05" in text
    assert any(line.startswith("  world ") and "[gpu0" in line for line in lines)
    assert "FAIL" in text and "pass" in text


def test_cli_localize_needs_an_inventory(capsys: pytest.CaptureFixture[str]) -> None:
    from gpufleet import cli  # noqa: PLC0415

    with pytest.raises(SystemExit) as exc:
        cli.main(["localize"])
    assert exc.value.code == cli.EXIT_USAGE
    assert "localize needs an inventory (-i)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        cli.main(["localize", "-i", "x,", "--groups", "thirds"])
    assert exc.value.code == 2


def test_domains_from_the_variable_else_inventory_groups_with_groups_domain() -> None:
    specs = [HostSpec("a", "a", groups=("gpu", "rack1")), HostSpec("b", "b", groups=("gpu",
             "rack1")), HostSpec("c", "c", groups=("gpu", "rack2"))]
    assert failure_domains(specs, "auto") == {}
    assert failure_domains(specs, "domain") == {"a": "gpu,rack1", "b": "gpu,rack1",
                                                "c": "gpu,rack2"}
    tagged = [HostSpec("a", "a", expect=Expectations(domain="r1")), specs[2]]
    assert failure_domains(tagged, "domain") == {"a": "r1"}


HOSTILE = "\x1b]52;c;cGF5bG9hZA==\x07\x1b[2J boom HF_TOKEN=hf_abcdefghijklmnopqrstuvwx"


def test_host_output_in_the_section_and_table_is_inert_and_redacted() -> None:
    # Security review F8: world errors and exclusion reasons are host output; ESC reached the
    # terminal and the token the table and --format json. Failed on ef054d5.
    def world(members: tuple[str, ...]) -> Measured:
        return Measured(members, None, error=HOSTILE)

    search = localize(HOSTS[:3], world, expectation=lambda m: 0.5)
    excluded = {"gpu08": Excluded("error", f"no usable torch for python3: {HOSTILE}")}
    results = {h: HostResult(h, "ok", facts=Facts()) for h in HOSTS[:3]}
    run = LocalizeRun(results, excluded, search, "topology expectation", {})
    loc = section(run)
    dumped = json.dumps(loc)
    text = table({"localize": loc}, width=200)
    for out in (dumped, text):
        assert "\x1b" not in out and "\\u001b" not in out and "\x07" not in out
        assert "hf_abcdefghijklmnopqrstuvwx" not in out
    assert "boom HF_TOKEN=***" in text and "boom HF_TOKEN=***" in loc["excluded"]["gpu08"]["reason"]


def test_progress_lines_are_inert() -> None:
    seen: list[str] = []
    progress_line(seen.append)(f"world of 2 (a, b): no bandwidth; {HOSTILE}")
    assert seen == ["world of 2 (a, b): no bandwidth;  boom HF_TOKEN=***"]


@pytest.mark.parametrize("answer", [
    '{"torch": ["2.13.0"], "cuda": null, "nccl": null}',
    '{"torch": "2.13.0", "cuda": {"x": 1}, "nccl": null}',
    '{"torch": "2.13.0", "cuda": null, "nccl": 2.21}',
    '["torch"]',
])  # fmt: skip
def test_one_hosts_odd_version_json_excludes_that_host_only(answer: str, tmp_path: Path) -> None:
    # Security review F16: {"torch": [...]} made _exclusions raise TypeError (unhashable list)
    # before any world ran, and the whole run was lost. Failed on ef054d5. A real process on the
    # local transport prints the host's answer, whatever it is asked.
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\ncat <<'JSON'\n{answer}\nJSON\n")
    fake.chmod(0o755)
    odd = HostSpec("odd", "odd", expect=Expectations(smoke_python=str(fake)))
    got = _versions(LocalTransport(odd), odd)
    assert isinstance(got, str) and got.startswith("could not read torch versions"), got
    same = {"torch": "2.13.0", "cuda": None, "nccl": None}
    results = {h: HostResult(h, "ok", facts=Facts()) for h in ("a", "b", "odd")}
    out = _exclusions(results, {"a": same, "b": same, "odd": got}, force=False)
    assert set(out) == {"odd"} and out["odd"].status == "error"
    assert parse_versions('{"torch": "2.13.0\\u001b[31m"}', "", 0, "python3") == {
        "torch": "2.13.0", "cuda": None, "nccl": None}
