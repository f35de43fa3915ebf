"""Run one piece of work per host on a bounded thread pool: one HostResult per host, always."""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import replace

from gpufleet.model import HostResult, HostSpec


def default_forks(hosts: int) -> int:
    """Workers mostly wait on the network: many per core, bounded so a big fleet stays sane."""
    return max(1, min(hosts, 16 * (os.cpu_count() or 1), 256))


def fan_out(
    specs: Sequence[HostSpec],
    work: Callable[[HostSpec], HostResult],
    *,
    forks: int | None = None,
    progress: bool | None = None,
    label: str = "hosts",
) -> dict[str, HostResult]:
    """work(spec) for every spec, at most `forks` at a time; results in inventory order.

    An exception in work becomes HostResult(status="error"); it never escapes for one host.
    """
    if not specs:
        return {}
    workers = max(1, min(forks or default_forks(len(specs)), len(specs)))
    if progress is None:
        progress = sys.stderr.isatty()

    def guarded(spec: HostSpec) -> HostResult:
        started = time.monotonic()
        try:
            result = work(spec)
        except Exception as exc:  # failure is data: the sweep goes on for every other host
            return HostResult(
                name=spec.name, status="error", error=_describe(exc),
                duration_s=time.monotonic() - started,
            )
        if result.name != spec.name:
            result = replace(result, name=spec.name)
        if result.duration_s is None:
            result = replace(result, duration_s=time.monotonic() - started)
        return result

    results: dict[str, HostResult] = {}
    bar = _Progress(len(specs), label) if progress else None
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gpufleet")
    try:
        futures: dict[Future[HostResult], HostSpec] = {
            pool.submit(guarded, spec): spec for spec in specs
        }
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                spec = futures[future]
                try:
                    results[spec.name] = future.result()
                except BaseException as exc:  # e.g. SystemExit raised inside work
                    results[spec.name] = HostResult(
                        name=spec.name, status="error", error=_describe(exc))
                if bar is not None:
                    bar.advance(spec.name, results[spec.name].status)
    finally:
        # On Ctrl-C do not start queued hosts; running ones end with their own timeouts.
        pool.shutdown(wait=False, cancel_futures=True)
        if bar is not None:
            bar.stop()
    return {spec.name: results[spec.name] for spec in specs}


def _describe(exc: BaseException) -> str:
    where = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    at = f" (at {os.path.basename(where[0].filename)}:{where[0].lineno})" if where else ""
    return f"internal error: {type(exc).__name__}: {exc}{at}"


class _Progress:
    """A rich progress bar on stderr; rich is imported only when a terminal will show it."""

    def __init__(self, total: int, label: str) -> None:
        from rich.console import Console  # noqa: PLC0415
        from rich.progress import (  # noqa: PLC0415
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self._lock = threading.Lock()
        self._failed = 0
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[last]}"),
            console=Console(stderr=True),
            transient=True,
        )
        self._task = self._progress.add_task(label, total=total, last="")
        self._progress.start()

    def advance(self, name: str, status: str) -> None:
        with self._lock:
            if status != "ok":
                self._failed += 1
            failed = f" [red]{self._failed} not ok[/red]" if self._failed else ""
            self._progress.update(self._task, advance=1, last=f"{name}: {status}{failed}")

    def stop(self) -> None:
        self._progress.stop()
