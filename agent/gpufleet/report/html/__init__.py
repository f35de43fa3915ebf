"""The HTML fleet page: one self-contained file that works offline and requests nothing.

Jinja2 (autoescaping) writes the summary, the host x check-family grid's frame and the findings;
the page's script fills the grid (sortable, filterable) and draws each host's plots with the
vendored uPlot (vendor/README.md) only when the host's card is on screen, so a 1,000-host page
loads fast. Host data reaches the script as JSON inside a non-executed script element; a Content
Security Policy with the hashes of the two inline scripts forbids every other script and request.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any

import jinja2

from gpufleet.model import SEVERITIES, fmt_bytes
from gpufleet.report.html.view import page_data, summary

__all__ = ["page_data", "render"]


@cache
def _asset(name: str) -> str:
    return resources.files(__name__).joinpath(name).read_text("utf-8")


@cache
def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader(__name__, "assets"),
        autoescape=True, trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined,
    )
    env.filters["bytes"] = fmt_bytes
    env.filters["pretty"] = lambda v: json.dumps(v, indent=2, ensure_ascii=False, sort_keys=True)
    return env


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def _json_for_script(data: Any) -> str:
    # Inside <script type="application/json"> only "</script" or "<!--" could end the element;
    # escaping <, > and & (and the JS line separators) makes any host string inert.
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    for raw, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                     ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(raw, esc)
    return text


def render(doc: Mapping[str, Any], *, color: bool = False, width: int = 120) -> str:
    data = page_data(doc)
    scripts = [_asset("vendor/uPlot.iife.min.js"), _asset("assets/page.js")]
    styles = _asset("vendor/uPlot.min.css") + "\n" + _asset("assets/page.css")
    csp = ("default-src 'none'; img-src data:; style-src " + _csp_hash(styles)
           + "; script-src " + " ".join(_csp_hash(s) for s in scripts))
    findings = {sev: [f for f in data["findings"] if f["severity"] == sev] for sev in SEVERITIES}
    html = _env().get_template("page.html.j2").render(
        title=f"gpufleet report {doc.get('generated_at') or ''}".strip(),
        csp=csp, styles=styles, scripts=scripts, summary=summary(doc), data=data,
        data_json=_json_for_script(data), findings=findings,
    )
    return html if html.endswith("\n") else html + "\n"
