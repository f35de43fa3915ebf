"""The suite passes however slow the machine (issue 43): no test module reads the clock while it
is imported or collected. A time taken at import ages while the suite runs (CI on a loaded 2-core
machine reached one test 50 min after collection and its "10 minutes ago" run was then an hour old),
so times are taken inside the test or fixture that uses them, or injected.

The check reads every Python file under tests/ with `ast` and names each clock call that runs at
import: module and class bodies, decorators (parametrize lists), default argument values. A call
inside a function or lambda body runs when the test runs and is fine."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]

# The calls that read the wall or monotonic clock (module.attr as written in the source).
CLOCK_ATTRS = {
    "datetime": {"now", "utcnow", "today"},
    "date": {"today"},
    "time": {"time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns",
             "localtime", "gmtime", "ctime", "asctime", "strftime"},
}


def _clock_names(tree: ast.Module) -> set[str]:
    """Bare names bound to clock functions by `from time import time` and the like."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in ("time", "datetime"):
            for alias in node.names:
                if alias.name in CLOCK_ATTRS["time"] and node.module == "time":
                    names.add(alias.asname or alias.name)
    return names


class _ImportTimeClock(ast.NodeVisitor):
    """Collects clock calls that are evaluated when the module is imported."""

    def __init__(self, bare: set[str]) -> None:
        self.bare = bare
        self.hits: list[tuple[int, str]] = []

    def _visit_signature(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        # Decorators and defaults run at definition time; the body does not.
        if not isinstance(node, ast.Lambda):
            for dec in node.decorator_list:
                self.visit(dec)
        for default in [*node.args.defaults, *node.args.kw_defaults]:
            if default is not None:
                self.visit(default)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._visit_signature(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._visit_signature(node)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._visit_signature(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute):
            owner = func.value
            owner_name = (owner.id if isinstance(owner, ast.Name)
                          else owner.attr if isinstance(owner, ast.Attribute) else None)
            if owner_name in CLOCK_ATTRS and func.attr in CLOCK_ATTRS[owner_name]:
                self.hits.append((node.lineno, f"{owner_name}.{func.attr}()"))
        elif isinstance(func, ast.Name) and func.id in self.bare:
            self.hits.append((node.lineno, f"{func.id}()"))
        self.generic_visit(node)


def import_time_clock_reads(source: str) -> list[tuple[int, str]]:
    tree = ast.parse(source)
    visitor = _ImportTimeClock(_clock_names(tree))
    visitor.visit(tree)
    return visitor.hits


@pytest.mark.parametrize("source, expected", [
    ("from datetime import datetime, timezone\nNOW = datetime.now(timezone.utc)\n", [2]),
    ("import time\nSTART = time.time()\n", [2]),
    ("from time import monotonic\nT0 = monotonic()\n", [2]),
    ("import datetime as dt\nclass C:\n    when = dt.datetime.utcnow()\n", [3]),
    ("import pytest, time\n@pytest.mark.parametrize('t', [time.time()])\ndef test(t): pass\n", [2]),
    ("import time\ndef f(t=time.monotonic()):\n    return t\n", [2]),
    # Inside a function, a fixture or a lambda body the clock is read when the test runs.
    ("from datetime import datetime\ndef test():\n    assert datetime.now()\n", []),
    ("import time\nclock = lambda: time.time()\n", []),
    ("import time\ndef fixture():\n    yield time.monotonic()\n", []),
])
def test_the_check_names_a_clock_read_at_import_and_only_that(
        source: str, expected: list[int]) -> None:
    assert [line for line, _ in import_time_clock_reads(source)] == expected


def test_no_test_module_reads_the_clock_at_import() -> None:
    offenders = [f"{path.relative_to(TESTS.parent)}:{line}: {call}"
                 for path in sorted(TESTS.rglob("*.py"))
                 for line, call in import_time_clock_reads(path.read_text())]
    assert not offenders, ("clock read at import/collection time (take it inside the test or a "
                           "fixture, or inject a fixed now):\n" + "\n".join(offenders))
