"""What gpufleet could not use from the inventory or `-l`, named before anything connects.

ansible-playbook warns and carries on when one `-l` name matches nothing, and it never reads a
variable no task uses; a verifier doing either reports a fleet it did not look at. Each function
returns problems as sentences (all of them, not the first): load_inventory joins them into one
InventoryError (exit 2).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from importlib import resources
from typing import Any

from gpufleet.inventory import desired

# Values only the agent reads (no role declares them, so no argument_specs carries choices).
AGENT_CHOICES: dict[str, tuple[str, ...]] = {
    "gpufleet_smoke_runtime": ("docker", "host"),
}


@cache
def _known() -> tuple[tuple[str, ...], dict[str, tuple[Any, ...] | None]]:
    """(owned prefixes, {known name: its choices or None}) from known_vars.json (generated from
    the roles' argument_specs and the playbooks by scripts/known_vars.py) and the desired-state
    table."""
    data = json.loads(resources.files("gpufleet.inventory").joinpath("known_vars.json")
                      .read_text(encoding="utf-8"))
    names: dict[str, tuple[Any, ...] | None] = {
        str(k): (tuple(v) if v else None) for k, v in data["variables"].items()}
    for name in [*data["playbook_variables"], *desired.NAMES]:
        names.setdefault(str(name), None)
    for name, choices in AGENT_CHOICES.items():
        names[name] = choices
    prefixes = tuple(sorted({"gpufleet_", *(f"{r}_" for r in data["roles"])}))
    return prefixes, names


def _nearest(word: str, candidates: Iterable[str]) -> str:
    """' (did you mean X?)' for the closest candidate (difflib's ratio, at least 0.6, the first
    in order on a tie: gpu0l suggests gpu01, not gpu03), else ''."""
    best, score = "", 0.6
    for candidate in candidates:
        ratio = difflib.SequenceMatcher(None, word, candidate).ratio()
        if ratio > score or (ratio == score and not best):
            best, score = candidate, ratio
    return f" (did you mean {best}?)" if best else ""


def variable_problems(host: str, hostvars: Mapping[str, Any]) -> list[str]:
    """Unknown names under gpufleet's and the roles' prefixes, and values outside their
    choices, of one host's inventory variables (templated values are judged as written)."""
    prefixes, known = _known()
    problems = []
    for name in sorted(str(k) for k in hostvars):
        if not name.startswith(prefixes):
            continue
        if name not in known:
            problems.append(f"{host}: unknown variable {name}{_nearest(name, known)}")
            continue
        choices = known[name]
        value = hostvars[name]
        if choices is None or value is None or value == "":
            continue
        values = value if isinstance(value, list) else [value]
        bad = [v for v in values if not (isinstance(v, str) and "{{" in v) and v not in choices]
        if bad:
            problems.append(
                f"{host}: {name}={bad[0]!r} is not one of {', '.join(map(str, choices))}"
                f"{_nearest(str(bad[0]), map(str, choices))}")
    return problems


def limit_problems(inventory: Any, limit: str) -> list[str]:
    """Each `-l` name or pattern that matches no host of `inventory` (an ansible-core
    InventoryManager, before subset), with the nearest host or group."""
    from ansible.inventory.manager import split_host_pattern  # noqa: PLC0415

    names = [h.name for h in inventory.list_hosts("all")]
    groups = [g for g in inventory.groups if g not in ("all", "ungrouped")]
    problems = []
    for pattern in split_host_pattern(limit):
        bare = pattern.lstrip("!&")
        if not bare or bare.startswith("@"):  # @file: Ansible reads the names from a file
            continue
        if not inventory.list_hosts(bare):
            problems.append(f"-l {bare!r} matches no host or group of the inventory"
                            f"{_nearest(bare, [*names, *groups])}")
    return problems


def join(problems: Sequence[str]) -> str:
    return "\n".join(dict.fromkeys(problems))
