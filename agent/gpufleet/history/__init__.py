"""Run history: the store `--save DIR` keeps and per-host history (the slow-drift rules that
judge a run against it are rules/history.py's)."""

from __future__ import annotations

from gpufleet.history.analysis import changes_since, history_section, summarize_run
from gpufleet.history.store import RunStore, StoreError

__all__ = ["RunStore", "StoreError", "changes_since", "history_section", "summarize_run"]
