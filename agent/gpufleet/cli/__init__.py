"""Command line: the only place that prints the final report or exits.

stdout carries the report, stderr progress and diagnostics. Exit codes: 0 healthy, 1 findings at or
above --fail-on (facts: a host not ok), 2 usage or inventory error, 3 internal error (a crash),
130 interrupted.
The commands live by group in sweep.py, saved.py and engines.py; their shared options in
options.py; output and saved reports in output.py; judging in gpufleet.report.pipeline.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence

from gpufleet import __version__
from gpufleet.cli import deepcheck, engines, saved, sweep
from gpufleet.cli.options import (
    EXIT_CRASH,
    EXIT_FINDINGS,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    UsageError,
)
from gpufleet.transport import interrupt_all

__all__ = ["EXIT_CRASH", "EXIT_FINDINGS", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "UsageError",
           "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpufleet",
        description="Prove that GPU hosts match the Ansible inventory's desired state.",
    )
    parser.add_argument("--version", action="version", version=f"gpufleet {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # The order of `gpufleet --help`.
    sweep.add(sub)
    saved.add(sub)
    engines.add_node_check(sub)
    deepcheck.add(sub)
    engines.add_ansible_report(sub)
    engines.add_rma_bundle(sub)
    sweep.add_localize(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = args.run(args)
    except UsageError as exc:
        print(f"gpufleet: {exc}", file=sys.stderr)
        code = EXIT_USAGE
    except KeyboardInterrupt:
        interrupt_all()  # running commands are killed on their hosts before we exit
        print("gpufleet: interrupted", file=sys.stderr)
        code = EXIT_INTERRUPTED
    except Exception as exc:  # the one boundary where a bug becomes an exit code
        traceback.print_exc(file=sys.stderr)
        print(f"gpufleet: internal error ({type(exc).__name__}: {exc}); nothing was judged",
              file=sys.stderr)
        code = EXIT_CRASH
    sys.exit(code)
