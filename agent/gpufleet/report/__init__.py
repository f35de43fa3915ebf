"""Report renderers, one module per format, chosen by `Format`.

Every renderer turns the report's JSON document (`common.document`: the v1 contract, secrets
redacted) into text, so a saved JSON report renders exactly like a live one (`render_doc`). Each
module's `render(doc, *, color, width)` has the same signature; only the terminal table uses
`color` and `width`. A renderer's module is imported when its format is first asked for: rich,
jinja2 and prometheus_client cost more start-up time than the rest of a `--help` together.
"""

from __future__ import annotations

import enum
import importlib
import json
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any, Protocol, cast

from gpufleet.model import HostResult, Report
from gpufleet.redact import clean, redact
from gpufleet.report.common import document, exit_code, summarize, summarize_doc

__all__ = ["Format", "document", "exit_code", "facts_table", "json_schema", "redact", "render",
           "render_doc", "summarize"]


class Format(str, enum.Enum):
    """The output formats; each value names its renderer module in `_MODULES`."""

    table = "table"
    json = "json"
    junit = "junit"
    prometheus = "prometheus"
    markdown = "markdown"
    html = "html"
    html_static = "html-static"  # no script, e.g. for a mail body


class Renderer(Protocol):
    def __call__(self, doc: Mapping[str, Any], /, *, color: bool, width: int) -> str: ...


_MODULES: Mapping[Format, str] = {
    Format.table: "table", Format.json: "jsonfmt", Format.junit: "junit",
    Format.prometheus: "prometheus", Format.markdown: "markdown", Format.html: "html",
    Format.html_static: "html_static",
}


@cache
def renderer(fmt: Format) -> Renderer:
    """The `render` function of `fmt`'s module (imported on first use)."""
    module = importlib.import_module(f"{__name__}.{_MODULES[fmt]}")
    return cast(Renderer, module.render)


def render_doc(doc: Mapping[str, Any], fmt: Format | str, *, color: bool = False,
               width: int = 120) -> str:
    """Render a report JSON document (e.g. one read back from `--format json` output)."""
    fmt = Format(fmt)
    doc = clean(dict(doc))  # a document read back from disk is host data too
    if not doc.get("summary"):
        doc = {**doc, "summary": summarize_doc(doc)}
    return renderer(fmt)(doc, color=color, width=width)


def render(report: Report, fmt: Format | str, *, color: bool = False, width: int = 120) -> str:
    """The report in `fmt`. `color` only affects the table (pass sys.stdout.isatty())."""
    return render_doc(document(report), fmt, color=color, width=width)


def facts_table(results: Mapping[str, HostResult], *, color: bool = False,
                width: int = 160) -> str:
    """`gpufleet facts` as a terminal table (report/facts_table.py, imported on first use)."""
    module = importlib.import_module(f"{__name__}.facts_table")
    return cast(str, module.render(results, color=color, width=width))


def json_schema() -> dict[str, Any]:
    """The JSON Schema of the report (gpufleet.report/v1), as shipped in the package."""
    text = resources.files("gpufleet").joinpath("schema/report-v1.json").read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema
