"""docs/rules.md and the rule catalogue list the same ids with the same severities."""

from __future__ import annotations

import re
from pathlib import Path

from gpufleet.rules import FAMILIES, RULES

DOC = Path(__file__).resolve().parents[2] / "docs" / "rules.md"


def test_docs_and_code_list_the_same_rules() -> None:
    rows = re.findall(r"^\| (GF\d{3}) \| (\w+) \|", DOC.read_text(), re.MULTILINE)
    assert [r for r, _ in rows] == list(RULES), "docs/rules.md rows must follow RULES order"
    assert {r: s for r, s in rows} == {r: i.severity for r, i in RULES.items()}


def test_rule_ids_belong_to_their_family() -> None:
    for rid, info in RULES.items():
        assert re.fullmatch(r"GF\d{3}", rid) and info.id == rid
        assert rid[:3] + "xx" in FAMILIES
        assert info.title and info.remediation
