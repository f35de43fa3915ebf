"""The versioned JSON report (schema gpufleet.report/v1, gpufleet/schema/report-v1.json)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def render(doc: Mapping[str, Any], *, color: bool = False, width: int = 120) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
