"""The HTML card shows measured against expected and every smoke check, in real headless Chromium.

A 2xH200 host (the repository's capture-built fleet) whose full-level run measured GPU 1's fp16
GEMM at 400 TFLOP/s (below the SKU floor): the card's table lists
each hosts.<name>.expectations line with its verdict, the TFLOP/s plot draws the catalog's
expected line and floor, the busbw plot draws the floor of the judged size, and the deep checks
(sdc, membw, gemm) are listed with their detail. One page, ~3 s on the 2-core CI machine.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from browserlib import browser, visit
from playwright.sync_api import expect

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from test_rules_builders import fleet, smoke

from gpufleet.model import SmokeCheck
from gpufleet.report import document, render_doc
from gpufleet.report.pipeline import judge

pytestmark = [pytest.mark.slow]

GEMM = {"bf16": 726.0, "fp16": 665.0, "tf32": 357.0, "fp32": 50.6, "fp8": 1277.0}


def full_run_doc() -> dict[str, Any]:
    base = smoke("gpu01")
    per_rank = {"0": {"tflops": GEMM}, "1": {"tflops": {**GEMM, "fp16": 400.0}}}
    deep = (SmokeCheck("sdc", True, "4 ops bit-identical on 2 device(s) and repeats"),
            SmokeCheck("membw", True, "device memory copy 2132.5 GB/s min"),
            SmokeCheck("gemm", True, "GEMM 8192^3 TFLOP/s (min over 2 GPU(s)): fp16 400.0",
                       {"per_rank": per_rank}))
    s = dataclasses.replace(base, level="full", checks=base.checks + deep)
    r = judge(fleet({"gpu01": {"smoke": s}}, with_expect=False))
    doc = json.loads(json.dumps(document(r)))
    assert any(f["rule"] == "GF540" and f["evidence"]["gpu"] == 1 for f in doc["findings"]), \
        "the slow fp16 GEMM is a finding"
    return doc


def test_card_shows_expectations_and_deep_checks(tmp_path: Path) -> None:
    page_file = tmp_path / "full.html"
    page_file.write_text(render_doc(full_run_doc(), "html"), encoding="utf-8")
    with browser() as ctx:
        v = visit(ctx, page_file)
        page = v.page
        assert v.console_errors == [] and v.requests == []
        card = page.locator("article.host-card[data-host='gpu01']")
        card.scroll_into_view_if_needed()
        expect(card.locator(".uplot canvas")).to_have_count(2)
        legends = card.locator(".u-legend").all_inner_texts()
        assert "expected" in legends[1] and "floor" in legends[1], legends
        assert "floor" in legends[0], f"busbw plot draws the judged size's floor: {legends}"
        rows = {r[0]: r for r in card.locator("table.expectations tbody tr").evaluate_all(
            "rs => rs.map(r => Array.from(r.cells).map(c => c.textContent))")}
        slow = rows["GPU 1 matmul fp16"]
        assert slow[1] == "400 TFLOP/s" and slow[4].startswith("below floor ("), slow
        assert rows["GPU 0 matmul fp16"][4] == "ok"
        assert rows["GPU 0 matmul bf16"][1] == "726 TFLOP/s", "the gemm check's bf16, not matmul's"
        assert card.locator("table.expectations td.sev-error").count() == 1
        assert any(k.startswith("allreduce_busbw @ ") for k in rows), list(rows)
        checks = card.locator("ul.checks li").all_inner_texts()
        assert [c.split(" ", 2)[1] for c in checks] == [
            "versions", "device_count", "matmul", "allreduce_exact", "ddp", "amp", "busbw",
            "sdc", "membw", "gemm"]
        assert "PASS sdc 4 ops bit-identical" in checks[7]
        assert v.console_errors == [], v.console_errors
