"""Headless Chromium (Debian's package) driven by Playwright, for the HTML report.

The browser gets its own empty profile in a temp dir, no network features of its own, and is
closed (with its process group) on every exit path by Playwright's context manager. Pages are
opened from file://; any request that is not file:// or data: is recorded as a failure.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")


def chromium_path() -> str:
    # The Debian wrapper script /usr/bin/chromium execs this binary with distribution flags.
    for candidate in ("/usr/lib/chromium/chromium", shutil.which("chromium") or ""):
        if candidate and Path(candidate).exists():
            return candidate
    raise RuntimeError("chromium is not installed: run scripts/setup.sh")


@dataclass
class Visit:
    page: Any  # playwright.sync_api.Page
    console_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    load_s: float = 0.0


@contextmanager
def browser(width: int = 1400, height: int = 1000) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright  # noqa: PLC0415

    with tempfile.TemporaryDirectory(prefix="gpufleet-chromium-") as profile, \
            sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            profile, executable_path=chromium_path(), headless=True, args=list(FLAGS),
            viewport={"width": width, "height": height}, offline=True,
        )
        try:
            yield context
        finally:
            context.close()


def visit(context: Any, path: Path, ready: str = "body[data-ready='1'] .uplot canvas",
          timeout_ms: float = 60_000) -> Visit:
    """Open `path`, wait until `ready` matches; load_s is navigation start to ready."""
    page = context.new_page()
    # Generous: a loaded CI machine may be slow to start a page; speed is judged in the page.
    page.set_default_timeout(timeout_ms)
    v = Visit(page=page)
    page.on("console", lambda m: v.console_errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: v.console_errors.append(f"uncaught: {e}"))
    page.on("request", lambda r: None if r.url.startswith(("file:", "data:"))
            else v.requests.append(r.url))
    start = time.perf_counter()
    page.goto(path.resolve().as_uri(), wait_until="load", timeout=timeout_ms)
    page.wait_for_selector(ready, state="attached", timeout=timeout_ms)
    v.load_s = time.perf_counter() - start
    return v
