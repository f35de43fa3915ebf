"""Mutation fuzzing of the probe parsers over the real H200 captures (issue 10 item 17).

A host's output is untrusted data: whatever a mutated capture holds, parse_probe_output returns
Facts (what it could read) and says in Facts.errors what it could not; it never raises, since
that would lose the host's whole fact set as "internal error". Derandomized, so CI is repeatable;
the explicit examples are the crashes found by review on 5562b30.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gpufleet.model import Facts
from gpufleet.probes.collect import parse_probe_output
from gpufleet.report import Format, render
from gpufleet.report.common import document

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "h200x2-probe-2026-11-30"
TEXTS = {p.name: p.read_text(encoding="utf-8") for p in sorted(CAPTURES.glob("probe-*.txt"))}

# Values that have broken parsers before, or are likely to: odd numbers, huge fields, controls.
NASTY = st.sampled_from([
    "26.56.2 GB/s", "1e999", "NaN", "-1", "99999999999999999999999", "9" * 5000, "[N/A]",
    "x" * (200 << 10), "\x00", "\x1b]52;c;ZXZpbA==\x07", "580.159.04[/]", "GPU 0:", "Link 9:",
    "\t\t\t", ",,,,", '"', "==gpufleet== topo rc=0", "==gpufleet== nvlink rc=x",
    "==gpufleet-stderr==", "rc=", "\udcff", "GPU0\tGPU1\tGPU2", "NV18\tX", "0x", "ÿ" * 3,
])
LINE_TEXT = st.one_of(NASTY, st.text(max_size=40))
EDIT = st.one_of(
    st.tuples(st.just("delete"), st.integers(0, 10_000)),
    st.tuples(st.just("duplicate"), st.integers(0, 10_000)),
    st.tuples(st.just("replace"), st.integers(0, 10_000), LINE_TEXT),
    st.tuples(st.just("insert"), st.integers(0, 10_000), LINE_TEXT),
    st.tuples(st.just("splice"), st.integers(0, 10_000), LINE_TEXT),  # into the middle of a line
    st.tuples(st.just("truncate"), st.integers(0, 40_000)),
)


def mutate(text: str, edits: list[tuple[object, ...]]) -> str:
    lines = text.split("\n")
    for edit in edits:
        op, where = edit[0], int(edit[1])  # type: ignore[call-overload]
        i = where % max(1, len(lines))
        if op == "delete" and lines:
            del lines[i]
        elif op == "duplicate" and lines:
            lines.insert(i, lines[i])
        elif op == "replace" and lines:
            lines[i] = str(edit[2])
        elif op == "insert":
            lines.insert(i, str(edit[2]))
        elif op == "splice" and lines:
            line = lines[i]
            lines[i] = line[: len(line) // 2] + str(edit[2]) + line[len(line) // 2:]
        elif op == "truncate":
            return "\n".join(lines)[:where]
        elif op == "sub":  # explicit examples: one exact substitution
            lines = "\n".join(lines).replace(str(edit[2]), str(edit[3]), 1).split("\n")
    return "\n".join(lines)


def _check(facts: Facts) -> None:
    assert isinstance(facts, Facts)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in facts.errors.items())
    # What was read renders: the JSON contract and the terminal table never fail on it.
    render_report_of(facts)


def render_report_of(facts: Facts) -> None:
    from gpufleet.model import HostResult, Report  # noqa: PLC0415

    report = Report(hosts={"h": HostResult(name="h", status="ok", facts=facts)})
    document(report)
    render(report, Format.table)


@settings(max_examples=200, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(name=st.sampled_from(sorted(TEXTS)), edits=st.lists(EDIT, min_size=1, max_size=6))
@example(name="probe-idle.txt", edits=[("sub", 0, "Link 0: 26.562 GB/s", "Link 0: 26.56.2 GB/s")])
@example(name="probe-idle.txt",
         edits=[("sub", 0, "0, NVIDIA H200, ", f"0, {'x' * (200 << 10)}, ")])
@example(name="probe-busy.txt", edits=[("sub", 0, "GPU 0:", "GPU " + "9" * 5000 + ":")])
def test_mutated_captures_parse_to_facts_and_errors(name: str,
                                                    edits: list[tuple[object, ...]]) -> None:
    _check(parse_probe_output(mutate(TEXTS[name], edits)))


def test_the_unmutated_captures_parse_without_errors_about_reading() -> None:
    for text in TEXTS.values():
        facts = parse_probe_output(text)
        assert not [v for v in facts.errors.values() if v.startswith("could not read")]
        assert len(facts.gpus) == 2
