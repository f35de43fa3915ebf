"""One home for each rule id: the catalogue lists it, exactly one module under rules/ emits it.

Each rule module declares `RULES`, the ids it emits. Read from its source (AST) and from a run of
every firing case of tests/unit/test_rules.py, a module emits only what it declares; no module
outside rules/ names a rule id.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from pathlib import Path
from types import ModuleType

import pytest
from test_rules import CASES, _deep
from test_rules_builders import NOW

import gpufleet.rules
from gpufleet.rules import MODULES, RULES, fabric_delta, one_cause
from gpufleet.rules import escalation as escalation_rules
from gpufleet.rules import history as history_rules
from gpufleet.rules import lkg as lkg_rules
from gpufleet.rules import slurm as slurm_rules
from gpufleet.rules.base import Ctx

PACKAGE = Path(gpufleet.rules.__file__).parent
AGENT = PACKAGE.parent

_ID = re.compile(r"GF\d{3}")


def _rule_modules() -> dict[str, ModuleType]:
    found = {}
    for info in pkgutil.iter_modules([str(PACKAGE)]):
        module = importlib.import_module(f"gpufleet.rules.{info.name}")
        if isinstance(getattr(module, "RULES", None), tuple):
            found[info.name] = module
    return found


def _ids_in(path: Path) -> dict[str, int]:
    """Every rule id written as a string in `path`, with the line it first appears on."""
    ids: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and _ID.fullmatch(node.value):
            ids.setdefault(node.value, node.lineno)
    return ids


def test_every_catalogue_id_has_exactly_one_emitting_module() -> None:
    owners: dict[str, list[str]] = {rid: [] for rid in RULES}
    for name, module in _rule_modules().items():
        for rid in module.RULES:
            assert rid in RULES, f"rules/{name}.py declares {rid}, which rules/catalog.py lacks"
            owners[rid].append(name)
    for rid, names in owners.items():
        assert len(names) == 1, f"{rid} must be declared by exactly one rules module: {names}"


def test_each_rule_module_is_run() -> None:
    # rules.history needs the run store, so the commands with one call it (not rules.evaluate);
    # rules.slurm judges what node-check --slurm-drain did in Slurm, so node-check calls it;
    # rules.escalation counts Xids over the run store too (cli/saved.py with_history), and
    # rules.fabric_delta compares counters with the store's last run, like rules.history;
    # rules.one_cause folds the findings of all of them (report/pipeline.py, the last step).
    run = {m.__name__ for m in MODULES} | {history_rules.__name__, lkg_rules.__name__,
                                           slurm_rules.__name__, one_cause.__name__,
                                           escalation_rules.__name__, fabric_delta.__name__}
    assert {m.__name__ for m in _rule_modules().values()} == run


@pytest.mark.parametrize("name", sorted(_rule_modules()))
def test_module_names_only_its_declared_ids(name: str) -> None:
    module = _rule_modules()[name]
    assert module.RULES and len(set(module.RULES)) == len(module.RULES)
    written = _ids_in(PACKAGE / f"{name}.py")
    stray = {rid: line for rid, line in written.items() if rid not in module.RULES}
    assert stray == {}, f"rules/{name}.py writes ids it does not declare (id: line)"


def test_no_rule_id_outside_rules() -> None:
    stray = {}
    for path in sorted(AGENT.rglob("*.py")):
        rel = path.relative_to(AGENT)
        if rel.parts[0] == "rules":
            continue
        ids = _ids_in(path)
        if ids:
            stray[str(rel)] = ids
    assert stray == {}, "rule ids are emitted only under rules/ (file: {id: line})"


@pytest.mark.parametrize("rule", sorted(CASES))
def test_firing_case_comes_from_the_declaring_module(rule: str) -> None:
    build, _host = CASES[rule]
    ctx = Ctx(report=build(), now=NOW)
    fired = set()
    for module in MODULES:
        for f in module.check(ctx):
            assert f.rule in module.RULES, f"{module.__name__} emitted {f.rule} undeclared"
            fired.add(f.rule)
    assert rule in fired


def test_crashed_deep_check_is_one_gf601_from_rules_smoke() -> None:
    # A deeper check whose problems name no kind of rules/deep.py (it crashed) is GF601, which
    # only rules/smoke.py emits; a named problem is deep.py's rule and no GF601.
    for kind, expected in (("traceback", ["GF601"]), ("sdc", ["GF604"])):
        ctx = Ctx(report=_deep("sdc", kind), now=NOW)
        by_module = {m.__name__.rsplit(".", 1)[1]: [f.rule for f in m.check(ctx)]
                     for m in MODULES}
        assert [r for rules in by_module.values() for r in rules] == expected, by_module
        assert by_module["smoke" if expected == ["GF601"] else "deep"] == expected
