"""The CLI's contract (exit codes, UsageError) and the option groups the commands share.

Choices come from their one definition: `--format` from `report.Format`, `--fail-on` from
`model.SEVERITIES`, `--level` from `smoke.levels`.
"""

from __future__ import annotations

import argparse
import datetime as dt
from collections.abc import Callable, Sequence
from pathlib import Path

from gpufleet.model import SEVERITIES
from gpufleet.report import Format

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
# An uncaught exception would exit 1, the findings code: a Prolog wrapper that treats 1 as "findings
# handled, node drained" would let a job start on a node nobody checked (issue 22 F12).
EXIT_CRASH = 3
FORMATS: tuple[str, ...] = tuple(f.value for f in Format)
TEXT_OR_JSON = (Format.table.value, Format.json.value)  # commands with their own two views


class UsageError(Exception):
    """Bad input from the user: exit 2 with this message."""


def now() -> str:
    """The report's generated_at: UTC, to the second."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def positive(kind: type[float] | type[int]) -> Callable[[str], float | int]:
    def parse(text: str) -> float | int:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
        return value

    return parse


def share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1]: {text!r}")
    return value


def output(p: argparse.ArgumentParser, formats: Sequence[str] = FORMATS) -> None:
    """--format and -o: where the report goes and as what."""
    p.add_argument("--format", choices=formats, default="table", help="report format")
    p.add_argument("-o", "--output", type=Path, metavar="FILE",
                   help="write the report to FILE instead of stdout")


def fail_on(p: argparse.ArgumentParser, text: str, default: str | None = "error") -> None:
    p.add_argument("--fail-on", choices=SEVERITIES, default=default, help=text)


FAIL_ON_HELP = "exit 1 when a finding is at or above this severity (default error)"


def connection(p: argparse.ArgumentParser, formats: Sequence[str]) -> None:
    """The hosts and how to reach them (with the output options: every sweep command has both)."""
    p.add_argument("-i", "--inventory", action="append", metavar="INV",
                   help="Ansible inventory (file, directory or host list); repeatable. "
                        "Without it: this machine, through the local transport")
    p.add_argument("-l", "--limit", metavar="LIMIT",
                   help="host pattern, as ansible-playbook --limit reads it")
    p.add_argument("-f", "--forks", type=positive(int), metavar="FORKS",
                   help="hosts worked on at once (default: 16 per CPU, at most 256)")
    output(p, formats)
    p.add_argument("--accept-new-host-keys", action="store_true",
                   help="record host keys not yet in known_hosts (changed keys are still "
                        "refused)")
    p.add_argument("--connect-timeout", type=positive(float), default=10.0, metavar="S",
                   help="seconds to connect and authenticate (default 10)")
    p.add_argument("--timeout", type=positive(float), default=60.0, metavar="S",
                   help="seconds for the fact probe on one host (default 60)")
    p.add_argument("--save-raw", type=Path, metavar="DIR",
                   help="write each host's raw probe output to DIR/<host>.txt")


def smoke(p: argparse.ArgumentParser, levels: Sequence[str], default: str) -> None:
    """How the smoke test runs (check, smoke)."""
    p.add_argument("--level", choices=levels, default=default,
                   help=f"how deep to test (default {default})")
    p.add_argument("--multinode", action="store_true",
                   help="run one smoke world across all reachable hosts")
    p.add_argument("--force", action="store_true",
                   help="run the smoke test even where GPUs are busy")
    p.add_argument("--smoke-timeout", type=positive(float), metavar="S",
                   help="seconds for the smoke test (default 300 quick, 1800 full)")
    fail_on(p, FAIL_ON_HELP)
    p.add_argument("--save", type=Path, metavar="DIR",
                   help="also save the JSON report as DIR/gpufleet-<UTC time>.json")
