"""Command line: the only place that prints the final report or exits.

stdout carries the report, stderr progress and diagnostics. Exit codes: 0 healthy, 1 findings at or
above --fail-on (facts: a host not ok), 2 usage or inventory error, 130 interrupted.
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import os
import shutil
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpufleet import __version__
from gpufleet.model import Facts, HostResult, HostSpec, Report

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
FORMATS = ("table", "json", "junit", "prometheus", "markdown", "html")
SMOKE_TIMEOUT = {"quick": 300.0, "full": 1800.0}


class UsageError(Exception):
    """Bad input from the user: exit 2 with this message."""


# --------------------------------------------------------------------------- arguments


def _positive(kind: type[float] | type[int]) -> Any:
    def parse(text: str) -> float | int:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
        return value

    return parse


def _common(p: argparse.ArgumentParser, formats: Sequence[str]) -> None:
    p.add_argument("-i", "--inventory", action="append", metavar="INV",
                   help="Ansible inventory (file, directory or host list); repeatable. "
                        "Without it: this machine, through the local transport")
    p.add_argument("-l", "--limit", metavar="LIMIT",
                   help="host pattern, as ansible-playbook --limit reads it")
    p.add_argument("-f", "--forks", type=_positive(int), metavar="FORKS",
                   help="hosts worked on at once (default: 16 per CPU, at most 256)")
    p.add_argument("--format", choices=formats, default="table", help="report format")
    p.add_argument("-o", "--output", type=Path, metavar="FILE",
                   help="write the report to FILE instead of stdout")
    p.add_argument("--accept-new-host-keys", action="store_true",
                   help="record host keys not yet in known_hosts (changed keys are still "
                        "refused)")
    p.add_argument("--connect-timeout", type=_positive(float), default=10.0, metavar="S",
                   help="seconds to connect and authenticate (default 10)")
    p.add_argument("--timeout", type=_positive(float), default=60.0, metavar="S",
                   help="seconds for the fact probe on one host (default 60)")
    p.add_argument("--save-raw", type=Path, metavar="DIR",
                   help="write each host's raw probe output to DIR/<host>.txt")


def _smoke_options(p: argparse.ArgumentParser, levels: Sequence[str], default: str) -> None:
    p.add_argument("--level", choices=levels, default=default,
                   help=f"how deep to test (default {default})")
    p.add_argument("--multinode", action="store_true",
                   help="run one smoke world across all reachable hosts")
    p.add_argument("--force", action="store_true",
                   help="run the smoke test even where GPUs are busy")
    p.add_argument("--smoke-timeout", type=_positive(float), metavar="S",
                   help="seconds for the smoke test (default 300 quick, 1800 full)")
    p.add_argument("--fail-on", choices=("error", "warning", "info"), default="error",
                   help="exit 1 when a finding is at or above this severity (default error)")
    p.add_argument("--save", type=Path, metavar="DIR",
                   help="also save the JSON report as DIR/gpufleet-<UTC time>.json")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpufleet",
        description="Prove that GPU hosts match the Ansible inventory's desired state.",
    )
    parser.add_argument("--version", action="version", version=f"gpufleet {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    facts = sub.add_parser("facts", help="collect facts from every host",
                           description="Collect facts (versions, GPUs, health) from every host.")
    _common(facts, ("table", "json"))
    facts.set_defaults(run=cmd_facts)

    check = sub.add_parser("check", help="facts + smoke test + rules → report",
                           description="Facts, smoke test and rules: the full verdict.")
    _common(check, FORMATS)
    _smoke_options(check, ("facts", "quick", "full"), "quick")
    check.set_defaults(run=cmd_check)

    smoke = sub.add_parser("smoke", help="facts + DDP/NCCL smoke test",
                           description="Run the DDP/NCCL smoke test (after facts) and report.")
    _common(smoke, FORMATS)
    _smoke_options(smoke, ("quick", "full"), "quick")
    smoke.set_defaults(run=cmd_check)

    diff = sub.add_parser("diff", help="what changed between two JSON reports",
                          description="Compare two `--format json` reports.")
    diff.add_argument("old", type=Path, metavar="OLD.json")
    diff.add_argument("new", type=Path, metavar="NEW.json")
    diff.set_defaults(run=cmd_diff)

    loc = sub.add_parser("localize", help="find the host or link that breaks multinode worlds",
                         description="Adaptive group testing over multinode smoke worlds: "
                                     "names the bad host(s) or link(s), with the worlds as "
                                     "evidence (docs/localize.md).")
    _common(loc, ("table", "json"))
    loc.add_argument("--level", choices=("quick", "full"), default="quick",
                     help="smoke level of each world (default quick)")
    loc.add_argument("--force", action="store_true", help="test hosts whose GPUs are busy")
    loc.add_argument("--smoke-timeout", type=_positive(float), metavar="S",
                     help="seconds per world (default 300 quick, 1800 full)")
    loc.add_argument("--groups", choices=("auto", "domain", "binary", "sqrt"), default="auto",
                     help="first level below the all-hosts world: gpufleet_domain groups, two "
                          "halves, or ceil(sqrt(N)) groups (auto: domains, else halves when "
                          "the bandwidth has an expectation, else sqrt)")
    loc.add_argument("--max-worlds", type=_positive(int), default=64, metavar="N",
                     help="stop after N worlds (default 64)")
    loc.set_defaults(run=cmd_localize)
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
        from gpufleet.transport import interrupt_all  # noqa: PLC0415

        interrupt_all()  # running commands are killed on their hosts before we exit
        print("gpufleet: interrupted", file=sys.stderr)
        code = EXIT_INTERRUPTED
    sys.exit(code)


# --------------------------------------------------------------------------- commands


def _specs(args: argparse.Namespace) -> list[HostSpec]:
    from gpufleet.inventory import InventoryError, load_inventory  # noqa: PLC0415

    # Found out before a long sweep, not after it.
    output = getattr(args, "output", None)
    if output is not None and not output.parent.is_dir():
        raise UsageError(f"cannot write {output}: {output.parent} is not a directory")

    try:
        return load_inventory(args.inventory, args.limit)
    except InventoryError as exc:
        raise UsageError(f"inventory: {exc}") from exc


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _emit(text: str, output: Path | None) -> None:
    if not text.endswith("\n"):
        text += "\n"
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    # Write beside, then rename: node_exporter's textfile collector (or a CI job) never reads a
    # half-written report.
    tmp = output.with_name(f".{output.name}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, output)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UsageError(f"cannot write {output}: {exc.strerror}") from exc


def _document(report: Report) -> dict[str, Any]:
    from gpufleet.report import document  # noqa: PLC0415

    return document(report)


def _note_no_gpu(results: Mapping[str, HostResult]) -> None:
    """Say plainly on stderr which reachable hosts have no NVIDIA GPU at all."""
    for name, result in results.items():
        facts = result.facts
        if result.status != "ok" or facts is None or facts.gpus:
            continue
        reason = facts.errors.get("nvidia_smi")
        if reason is None or "not found" in reason:
            print(f"gpufleet: {name}: no NVIDIA GPU ({reason or 'nvidia-smi lists none'})",
                  file=sys.stderr)


def cmd_facts(args: argparse.Namespace) -> int:
    from gpufleet.fleet import gather_facts  # noqa: PLC0415

    specs = _specs(args)
    results = gather_facts(
        specs, forks=args.forks, connect_timeout=args.connect_timeout,
        probe_timeout=args.timeout, accept_new_host_keys=args.accept_new_host_keys,
        raw_dir=args.save_raw,
    )
    report = Report(hosts=results, specs={s.name: s for s in specs}, generated_at=_now(),
                    level="facts")
    if args.format == "json":
        text = json.dumps(_document(report), indent=2)
    else:
        tty = args.output is None and sys.stdout.isatty()
        text = facts_table(results, color=tty,
                           width=shutil.get_terminal_size().columns if tty else 160)
    _emit(text, args.output)
    _note_no_gpu(results)
    return EXIT_OK if all(r.status == "ok" for r in results.values()) else EXIT_FINDINGS


def cmd_check(args: argparse.Namespace) -> int:
    import dataclasses  # noqa: PLC0415

    from gpufleet.fleet import run_check  # noqa: PLC0415
    from gpufleet.report import Format, exit_code, render, summarize  # noqa: PLC0415
    from gpufleet.rules import evaluate  # noqa: PLC0415

    specs = _specs(args)
    results = run_check(
        specs, level=args.level, multinode=args.multinode, force=args.force, forks=args.forks,
        connect_timeout=args.connect_timeout, probe_timeout=args.timeout,
        smoke_timeout=args.smoke_timeout or SMOKE_TIMEOUT.get(args.level, 300.0),
        accept_new_host_keys=args.accept_new_host_keys, raw_dir=args.save_raw,
        smoke_without_gpu=bool(args.inventory),
    )
    report = Report(hosts=results, specs={s.name: s for s in specs}, generated_at=_now(),
                    level=args.level)
    report = dataclasses.replace(report, findings=evaluate(report))
    report = dataclasses.replace(report, summary=summarize(report))
    tty = args.output is None and sys.stdout.isatty()
    width = shutil.get_terminal_size().columns if tty else 120
    _emit(render(report, Format(args.format), color=tty, width=width), args.output)
    if args.save is not None:
        stamp = (report.generated_at or _now()).replace(":", "")
        try:
            args.save.mkdir(parents=True, exist_ok=True)
            path = args.save / f"gpufleet-{stamp}.json"
            path.write_text(json.dumps(_document(report), indent=2) + "\n", encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot save the report in {args.save}: {exc.strerror}") from exc
        print(f"gpufleet: saved {path}", file=sys.stderr)
    _note_no_gpu(results)
    return exit_code(report.findings, args.fail_on)


def cmd_diff(args: argparse.Namespace) -> int:
    from gpufleet.report.diff import diff_reports  # noqa: PLC0415

    docs = []
    for path in (args.old, args.new):
        try:
            docs.append(json.loads(path.read_text(encoding="utf-8")))
        except OSError as exc:
            raise UsageError(f"cannot read {path}: {exc.strerror}") from exc
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path} is not a JSON report: {exc}") from exc
        if not isinstance(docs[-1], dict) or "hosts" not in docs[-1]:
            raise UsageError(f"{path} is not a gpufleet JSON report (no 'hosts')")
    _emit(diff_reports(docs[0], docs[1]), None)
    return EXIT_OK


def cmd_localize(args: argparse.Namespace) -> int:
    import dataclasses  # noqa: PLC0415

    from gpufleet.localize.render import section, table  # noqa: PLC0415
    from gpufleet.localize.worlds import run_localize  # noqa: PLC0415
    from gpufleet.report import summarize  # noqa: PLC0415

    if not args.inventory:
        raise UsageError("localize needs an inventory (-i): worlds span several hosts")
    specs = _specs(args)
    run = run_localize(
        specs, level=args.level, force=args.force, forks=args.forks,
        connect_timeout=args.connect_timeout, probe_timeout=args.timeout,
        smoke_timeout=args.smoke_timeout or SMOKE_TIMEOUT[args.level],
        accept_new_host_keys=args.accept_new_host_keys, strategy=args.groups,
        max_worlds=args.max_worlds,
    )
    report = Report(hosts=run.results, specs=run.specs, generated_at=_now(), level=args.level)
    report = dataclasses.replace(report, summary=summarize(report))
    doc = {**_document(report), "localize": section(run)}
    if args.format == "json":
        text = json.dumps(doc, indent=2)
    else:
        tty = args.output is None and sys.stdout.isatty()
        text = table(doc, color=tty, width=shutil.get_terminal_size().columns if tty else 120)
    _emit(text, args.output)
    return EXIT_OK if run.search.outcome == "all_good" else EXIT_FINDINGS


# --------------------------------------------------------------------------- facts output


def _facts_summary(results: Mapping[str, HostResult]) -> dict[str, Any]:
    statuses = Counter(r.status for r in results.values())
    gpus = sum(r.facts.gpu_count for r in results.values() if r.facts is not None)
    return {
        "hosts": len(results),
        "status": dict(sorted(statuses.items())),
        "gpus": gpus,
        "healthy": statuses.get("ok", 0) == len(results),
    }


def _gpus_cell(facts: Facts) -> str:
    if not facts.gpus:
        return "none"
    models = Counter(g.name or "unknown" for g in facts.gpus)
    return ", ".join(f"{n}x {m}" for m, n in models.items())


def _driver_cell(facts: Facts) -> str:
    user, kmod = facts.driver.version, facts.driver.kernel_module_version
    if user and kmod and user != kmod:
        return f"{user} (module {kmod})"
    return user or kmod or "-"


def _problems(result: HostResult) -> str:
    if result.error:
        return result.error
    if result.facts is None:
        return ""
    return "; ".join(f"{family}: {reason}" for family, reason in result.facts.errors.items())


def facts_table(results: Mapping[str, HostResult], *, color: bool = False,
                width: int = 160) -> str:
    from rich import box  # noqa: PLC0415
    from rich.console import Console  # noqa: PLC0415
    from rich.table import Table  # noqa: PLC0415
    from rich.text import Text  # noqa: PLC0415

    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=color, no_color=not color,
                      color_system="standard" if color else None, highlight=False, emoji=False)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for column in ("host", "status", "OS", "kernel", "driver", "CUDA", "GPUs", "toolkit",
                   "docker", "NCCL"):
        table.add_column(column, no_wrap=True, overflow="ellipsis")
    for name, result in results.items():
        status = Text(result.status, style="green" if result.status == "ok" else "bold red")
        f = result.facts
        if f is None:
            table.add_row(name, status, *["-"] * 8)
            continue
        table.add_row(
            name, status,
            " ".join(filter(None, (f.os.id, f.os.version_id))) or "-",
            f.os.kernel or "-",
            _driver_cell(f),
            f.driver.cuda_version or "-",
            _gpus_cell(f),
            f.toolkit_version or "-",
            f.docker.server_version if f.docker and f.docker.server_version else "-",
            f.nccl_system_version or "-",
        )
    summary = _facts_summary(results)
    not_ok = {s: n for s, n in summary["status"].items() if s != "ok"}
    line = f"{summary['hosts']} host(s), {summary['gpus']} GPU(s)"
    if not_ok:
        line += ", " + ", ".join(f"{n} {s}" for s, n in not_ok.items())
    console.print(Text(line, style="bold green" if summary["healthy"] else "bold red"))
    console.print(table)
    # Problems under the table, in full: a wrapped table cell would cut fingerprints apart.
    problems = [(name, _problems(r)) for name, r in results.items() if _problems(r)]
    if problems:
        console.print(Text("problems", style="bold"))
    for name, text in problems:
        entry = Text(f"  {name}: ", style="bold red" if results[name].status != "ok" else "yellow")
        entry.append(text)
        console.print(entry)
    # rich pads every cell; trailing blanks only get in the way of diffs and golden files.
    return "".join(line.rstrip() + "\n" for line in out.getvalue().splitlines())
