"""The HTML page's data and frame, without a browser (tests/browser opens it in Chromium)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from importlib import resources
from typing import Any

from test_rules_builders import BUSBW, NOW, fleet

from gpufleet.report import document, render_doc
from gpufleet.report.html import page_data
from gpufleet.report.wording import row_message
from gpufleet.rules import evaluate

VENDOR = {  # vendor/README.md: uplot 1.6.32 from its npm package, unmodified
    "uPlot.iife.min.js": "19c8d4c6ad88929a79f4ae49d6f7161566dfd0ba3d15cc495e974f787eb78f1f",
    "uPlot.min.css": "df630c6a8d6f8eeaff264b50f73ce5b114f646ffd9a0bb74f049b0a00135fa04",
}


def _doc(changes: dict[str, Any] | None = None) -> dict[str, Any]:
    r = fleet(changes or {})
    return document(dataclasses.replace(r, findings=evaluate(r, now=NOW)))


def test_vendored_uplot_is_the_published_one() -> None:
    vendor = resources.files("gpufleet.report.html").joinpath("vendor")
    for name, digest in VENDOR.items():
        assert hashlib.sha256(vendor.joinpath(name).read_bytes()).hexdigest() == digest, name


def test_page_is_self_contained() -> None:
    page = render_doc(_doc(), "html")
    # Nothing to fetch: no src/href attributes, no URL but the library's banner comment.
    assert not re.search(r"""\b(src|href|action)\s*=""", page, re.IGNORECASE)
    urls = set(re.findall(r"https?://[^\s\"')]+", page))
    assert urls <= {"https://github.com/leeoniya/uPlot"}, urls
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page)
    assert csp and "default-src &#39;none&#39;" in csp.group(1)
    assert page.count("<script") == 3  # data (not run), uPlot, the page's script


def test_row_message_drops_only_its_own_host() -> None:
    f = {"hosts": ["gpu02"], "message": "gpu02: busbw 280 GB/s"}
    assert row_message(f) == "busbw 280 GB/s"
    assert row_message({"hosts": ["gpu02"], "message": "gpu02 GPU 1: matmul"}) == "GPU 1: matmul"
    assert row_message({"hosts": ["gpu0"], "message": "gpu02: x"}) == "gpu02: x"
    both = {"hosts": ["a", "b"], "message": "a: differs from b"}
    assert row_message(both) == "a: differs from b"
    assert row_message({"hosts": ["localhost"], "message": "localhost: "}) == "localhost: "


def test_page_data_cohort_median_expected_and_families() -> None:
    doc = _doc({"gpu02": {"smoke": {"busbw_gbps": {**BUSBW, 4 << 30: 250.0}}},
                "gpu03": {"facts": {"toolkit_version": "1.17.4"}}})
    # The expected curve where the busbw check carries it, with one bad value.
    curve = {str(4 << 30): 360.0, str(1 << 20): "n/a"}
    doc["hosts"]["gpu01"]["smoke"].setdefault("checks", []).append(
        {"name": "busbw", "passed": True, "detail": "", "data": {
            "expectation": {"expected_gbps": curve}}})
    data = page_data(doc)
    hosts = {h["name"]: h for h in data["hosts"]}
    assert hosts["gpu01"]["expected"]["curve"] == [[4 << 30, 360.0]]
    assert hosts["gpu03"]["expected"] == {"curve": None, "value": None, "floor": None}
    assert hosts["gpu02"]["expected"]["floor"] == 300.0  # GF501's evidence: the inventory floor
    cohort = data["cohorts"][hosts["gpu01"]["cohort"]]
    assert cohort["hosts"] == 4 and cohort["busbw_median"][-1] == [4 << 30, 343.7]
    assert hosts["gpu02"]["worst"] == "error" and hosts["gpu02"]["fam"]["GF5xx"] == "error"
    assert hosts["gpu03"]["fam"]["GF1xx"] == "error" and "GF5xx" not in hosts["gpu03"]["fam"]
    assert hosts["gpu01"]["worst"] == "ok" and hosts["gpu01"]["fam"] == {}
    json.dumps(data, allow_nan=False)  # all of it is JSON the page can parse


def test_page_plots_the_expectation_the_busbw_check_carries() -> None:
    # As the smoke verdict publishes it (gpufleet.sku.bandwidth through the busbw check's data).
    doc = _doc()
    doc["hosts"]["gpu01"]["smoke"]["checks"] = [
        {"name": "busbw", "passed": True, "detail": "",
         "data": {"expectation": {"basis": "nvlink",
                                  "expected_gbps": {str(64 << 20): 267.8, str(4 << 30): 343.7}}}}]
    hosts = {h["name"]: h for h in page_data(doc)["hosts"]}
    assert hosts["gpu01"]["expected"]["curve"] == [[64 << 20, 267.8], [4 << 30, 343.7]]
    assert hosts["gpu02"]["expected"]["curve"] is None
