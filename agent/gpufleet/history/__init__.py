"""Run history: the store `--save DIR` keeps, per-host history and the slow-drift rules."""

from __future__ import annotations

from gpufleet.history.analysis import (
    DRIFT_MARGIN,
    HISTORY_RULES,
    changes_since,
    drift_findings,
    history_section,
    summarize_run,
)
from gpufleet.history.store import RunStore, StoreError

__all__ = ["DRIFT_MARGIN", "HISTORY_RULES", "RunStore", "StoreError", "changes_since",
           "drift_findings", "history_section", "summarize_run"]
