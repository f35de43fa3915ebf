"""Write docs/rules.md from the rule catalogue (agent/gpufleet/rules/catalog.py).

    python scripts/rules_doc.py          # rewrite docs/rules.md
    python scripts/rules_doc.py --check  # exit 1 when docs/rules.md is stale

The prose around the tables is scripts/rules_doc.md.in; each `@rules KEY` line there becomes a
table: KEY is a family (`GF5xx`) or a rules module (`deep`), whose ids then leave their family's
table. Every catalogue id lands in exactly one table, in catalogue order.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from pathlib import Path

from gpufleet.rules.catalog import FACT_HINTS, RULES, SMOKE_HINTS, RuleInfo
from gpufleet.rules.xid import NEED_FIX

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "rules.md"
TEMPLATE = ROOT / "scripts" / "rules_doc.md.in"
COMMAND = "python scripts/rules_doc.py"


def _by(what: str, table: Mapping[object, str]) -> str:
    return f"by {what}: " + "; ".join(f"{k}: {v}" for k, v in table.items())


# A {hint} picked per finding from a table: the page lists the table.
_TABLE_FILLS: Mapping[str, Mapping[str, str]] = {
    "GF010": {"hint": _by("family", FACT_HINTS)},
    "GF405": {"hint": "Xid N (its catalog description): " + _by("need", NEED_FIX)
              + "; NVIDIA's investigatory action"},
    "GF601": {"hint": _by("check", SMOKE_HINTS)},
}


class _Keep(dict[str, str]):
    """Leaves a value the page cannot know ({host}, {gpu}) as the placeholder itself."""

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _row(info: RuleInfo) -> str:
    fix = info.remediation.format_map(_Keep({**info.doc_fill, **_TABLE_FILLS.get(info.id, {})}))
    cells = (info.id, info.severity, info.title, info.meaning, fix)
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _placed(keys: list[str]) -> dict[str, list[RuleInfo]]:
    """Each `@rules` key's rules; a module key claims its ids first."""
    claimed: dict[str, str] = {}
    for key in keys:
        if not key.startswith("GF"):
            module = importlib.import_module(f"gpufleet.rules.{key}")
            claimed.update({rid: key for rid in module.RULES})
    placed: dict[str, list[RuleInfo]] = {key: [] for key in keys}
    for rid, info in RULES.items():
        key = claimed.get(rid, rid[:3] + "xx")
        if key not in placed:
            raise SystemExit(f"{TEMPLATE.name} has no `@rules {key}` line for {rid}")
        placed[key].append(info)
    return placed


def render() -> str:
    lines = TEMPLATE.read_text().split("\n")
    placed = _placed([ln.split()[1] for ln in lines if ln.startswith("@rules ")])
    out: list[str] = []
    for ln in lines:
        if ln.startswith("@rules "):
            out += ["| id | severity | title | meaning | fix |", "|---|---|---|---|---|"]
            out += [_row(info) for info in placed[ln.split()[1]]]
        else:
            out.append(ln)
    return "\n".join(out)


def main(argv: list[str]) -> int:
    text = render()
    if argv[1:] == ["--check"]:
        if DOC.read_text() != text:
            print(f"docs/rules.md is stale: run `{COMMAND}`", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
