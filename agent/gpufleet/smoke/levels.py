"""What each smoke level means: the one table (controller timeout; the host-side fields are
sent to the host as data by the smoke command).

`--level facts` on the CLI is not a smoke level: it means "no smoke test" and never reaches
this table (`SMOKE_LEVELS` are the levels a smoke run takes; `CHECK_LEVELS` what `check` accepts).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Level:
    """One smoke level."""

    name: str
    timeout_s: float  # the controller's wait for one host's (or world's) smoke run


LEVELS: Mapping[str, Level] = {
    "quick": Level("quick", timeout_s=300.0),
    "full": Level("full", timeout_s=1800.0),
}
SMOKE_LEVELS: tuple[str, ...] = tuple(LEVELS)
NO_SMOKE = "facts"  # check/node-check: facts and rules only
CHECK_LEVELS: tuple[str, ...] = (NO_SMOKE, *SMOKE_LEVELS)


def timeout(level: str) -> float:
    """The controller's default timeout for a smoke run at LEVEL (quick's for an unknown one)."""
    return (LEVELS.get(level) or LEVELS["quick"]).timeout_s
