"""docs/rules.md is generated from the rule catalogue; the committed page is not stale."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from gpufleet.rules import FAMILIES, RULES

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("rules_doc", ROOT / "scripts" / "rules_doc.py")
assert _spec is not None and _spec.loader is not None
rules_doc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rules_doc)


def test_committed_rules_page_is_generated() -> None:
    assert rules_doc.DOC.read_text() == rules_doc.render(), (
        f"docs/rules.md is stale: run `{rules_doc.COMMAND}` and commit the result")


def test_page_lists_every_rule_once_in_catalogue_order() -> None:
    rows = re.findall(r"^\| (GF\d{3}) \| (\w+) \|", rules_doc.render(), re.MULTILINE)
    assert [r for r, _ in rows] == list(RULES)
    assert {r: s for r, s in rows} == {r: i.severity for r, i in RULES.items()}


def test_rule_ids_belong_to_their_family() -> None:
    for rid, info in RULES.items():
        assert re.fullmatch(r"GF\d{3}", rid) and info.id == rid
        assert rid[:3] + "xx" in FAMILIES
        assert info.title and info.remediation and info.meaning, rid
