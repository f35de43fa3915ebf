"""`gpufleet check --format html --save DIR` over the sshd test fleet, opened in headless Chromium.

Four simulated hosts (a healthy 2xH200, one with XIDs, two CPU hosts whose gloo smoke test measures
busbw and TFLOP/s): the page opens without console errors or requests, the XID host is red, a CPU
host's card draws its plots, and the run lands in the store that `gpufleet history` and
`gpufleet report` read back.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from fleetlib import make_fleet

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "browser"))
from browserlib import browser, visit
from playwright.sync_api import expect

pytestmark = [pytest.mark.fleet, pytest.mark.slow]

HOSTS = {"gpu-ok": "h200x2", "gpu-xid": "xid", "cpu-1": "no-nvidia-smi", "cpu-2": "no-nvidia-smi"}
RED = "rgb(217, 48, 37)"  # .sev-error in page.css


def test_fleet_page_in_chromium(tmp_path: Path) -> None:
    groups = {n: "cpu" if p == "no-nvidia-smi" else "gpu" for n, p in HOSTS.items()}
    store, page_file = tmp_path / "store", tmp_path / "fleet.html"
    with make_fleet(tmp_path / "fleet", list(HOSTS.items()), groups=groups) as fleet:
        r = fleet.run_cli("check", "-i", str(fleet.inventory), "--level", "quick", "--format",
                          "html", "-o", str(page_file), "--save", str(store), "-f", "4",
                          timeout=400)
    assert r.returncode == 1, r.stderr  # the XID host has errors
    saved = sorted(store.glob("gpufleet-*.json"))
    assert len(saved) == 1 and json.loads((store / "index.json").read_text())["runs"]
    with browser() as ctx:
        v = visit(ctx, page_file)
        page = v.page
        assert v.console_errors == [], v.console_errors
        assert v.requests == [], v.requests
        cell = page.locator("#grid tbody tr[data-host='gpu-xid'] td.host")
        assert cell.evaluate("e => getComputedStyle(e).backgroundColor") == RED
        assert page.locator("#grid tbody tr[data-host='cpu-1'] td.host").evaluate(
            "e => getComputedStyle(e).backgroundColor") != RED
        page.click("#grid tbody tr[data-host='cpu-1']")
        card = page.locator("article.host-card[data-host='cpu-1']")
        expect(card.locator(".uplot canvas")).to_have_count(2)
        assert card.locator(".u-title").all_inner_texts() == [
            "all-reduce busbw (GB/s) by message size", "matmul TFLOP/s per GPU"]
        text = card.inner_text()
        assert "cohort median (2 hosts)" in text, "cpu-1 and cpu-2 measured alike"
        assert "docker not collected" in text and "cpu-1: docker" not in text
        assert "no known-good run in the store" in text
        assert v.console_errors == [], v.console_errors
