"""Report renderers, one module per format, chosen by `Format`.

Every renderer turns the report's JSON document (`common.document`: the v1 contract, secrets
redacted) into text, so a saved JSON report renders exactly like a live one (`render_doc`).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from importlib import resources
from typing import Any

from gpufleet.model import Report
from gpufleet.redact import clean, redact
from gpufleet.report import html, jsonfmt, junit, markdown, page, prometheus, table
from gpufleet.report.common import document, exit_code, summarize, summarize_doc

__all__ = ["Format", "document", "exit_code", "json_schema", "redact", "render", "render_doc",
           "summarize"]


class Format(str, enum.Enum):
    table = "table"
    json = "json"
    junit = "junit"
    prometheus = "prometheus"
    markdown = "markdown"
    html = "html"
    html_static = "html-static"  # no script, e.g. for a mail body


def render_doc(doc: Mapping[str, Any], fmt: Format | str, *, color: bool = False,
               width: int = 120) -> str:
    """Render a report JSON document (e.g. one read back from `--format json` output)."""
    fmt = Format(fmt)
    doc = clean(dict(doc))  # a document read back from disk is host data too
    if not doc.get("summary"):
        doc = {**doc, "summary": summarize_doc(doc)}
    if fmt is Format.table:
        return table.render(doc, color=color, width=width)
    renderers = {Format.json: jsonfmt.render, Format.junit: junit.render,
                 Format.prometheus: prometheus.render, Format.markdown: markdown.render,
                 Format.html: page.render, Format.html_static: html.render}
    return renderers[fmt](doc)


def render(report: Report, fmt: Format | str, *, color: bool = False, width: int = 120) -> str:
    """The report in `fmt`. `color` only affects the table (pass sys.stdout.isatty())."""
    return render_doc(document(report), fmt, color=color, width=width)


def json_schema() -> dict[str, Any]:
    """The JSON Schema of the report (gpufleet.report/v1), as shipped in the package."""
    text = resources.files("gpufleet").joinpath("schema/report-v1.json").read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema
