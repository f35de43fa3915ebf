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
import signal
import sys
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpufleet import __version__
from gpufleet.model import Facts, HostResult, HostSpec, Report
from gpufleet.smoke import levels as smoke_levels

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
FORMATS = ("table", "json", "junit", "prometheus", "markdown", "html", "html-static")


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

    report = sub.add_parser("report", help="re-render a saved JSON report in any format",
                            description="Render a saved `--format json` report (or a run of a "
                                        "--save store) in any format.")
    report.add_argument("run_file", type=Path, metavar="RUN.json")
    report.add_argument("--format", choices=FORMATS, default="table", help="report format")
    report.add_argument("-o", "--output", type=Path, metavar="FILE",
                        help="write the report to FILE instead of stdout")
    report.add_argument("--store", type=Path, metavar="DIR",
                        help="add history from this run store (runs older than RUN.json)")
    report.add_argument("--from-ansible", action="store_true",
                        help="RUN.json is a playbook run's gpufleet.gpu.gpu_facts results (a "
                             "file or directory, as `gpufleet ansible-report` reads them)")
    report.add_argument("--fail-on", choices=("error", "warning", "info"), default=None,
                        help="with --from-ansible: exit 1 when a finding is at or above this "
                             "severity (default error)")
    report.set_defaults(run=cmd_report)

    history = sub.add_parser("history", help="per host: last known-good run, what changed, drift",
                             description="Per host, from a --save run store: the last known-good "
                                         "run, what changed since, the busbw trend and drift.")
    history.add_argument("hosts", nargs="*", metavar="HOST",
                         help="host names (patterns with -i); default: every host of the "
                              "latest run")
    history.add_argument("-i", "--inventory", action="append", metavar="INV",
                         help="Ansible inventory to resolve HOST patterns and groups")
    history.add_argument("--store", type=Path, metavar="DIR",
                         default=os.environ.get("GPUFLEET_STORE"),
                         help="the run store written by --save DIR (default $GPUFLEET_STORE)")
    history.add_argument("--format", choices=("table", "json"), default="table")
    history.set_defaults(run=cmd_history)
    _add_node_check(sub)
    _add_ansible_report(sub)
    smoke.add_argument("--slurm", action="store_true",
                       help="inside a Slurm allocation: one world over the allocated nodes, "
                            "launched with srun (implies --multinode; -i is not used)")
    smoke.add_argument("--expect", type=Path, metavar="FILE",
                       help="with --slurm: expectations file (inventory variables) for the nodes")
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
    # half-written report. The temp file is new and ours (O_EXCL, unique name): a planted
    # symlink is never followed and concurrent runs never share one.
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".tmp",
                                   dir=output.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        umask = os.umask(0o022)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # what a plain open() would have made, not mkstemp's 0600
        os.replace(tmp, output)
    except OSError as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
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
            print(inert(f"gpufleet: {name}: no NVIDIA GPU ({reason or 'nvidia-smi lists none'})"),
                  file=sys.stderr)


def cmd_facts(args: argparse.Namespace) -> int:
    from gpufleet.sweep.sweep import gather_facts  # noqa: PLC0415

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

    from gpufleet.report import Format, exit_code, render_doc, summarize  # noqa: PLC0415
    from gpufleet.rules import evaluate  # noqa: PLC0415
    from gpufleet.sweep.sweep import run_check  # noqa: PLC0415

    if getattr(args, "slurm", False):
        return _cmd_smoke_slurm(args)
    if getattr(args, "expect", None) is not None:
        raise UsageError("--expect goes with --slurm (with -i, the inventory has the variables)")
    specs = _specs(args)
    results = run_check(
        specs, level=args.level, multinode=args.multinode, force=args.force, forks=args.forks,
        connect_timeout=args.connect_timeout, probe_timeout=args.timeout,
        smoke_timeout=args.smoke_timeout or smoke_levels.timeout(args.level),
        accept_new_host_keys=args.accept_new_host_keys, raw_dir=args.save_raw,
        smoke_without_gpu=bool(args.inventory),
    )
    report = Report(hosts=results, specs={s.name: s for s in specs}, generated_at=_now(),
                    level=args.level)
    report = dataclasses.replace(report, findings=evaluate(report))
    report = dataclasses.replace(report, summary=summarize(report))
    doc = _document(report)
    if args.save is not None:
        report, doc = _with_history(report, args.save)
    tty = args.output is None and sys.stdout.isatty()
    width = shutil.get_terminal_size().columns if tty else 120
    _emit(render_doc(doc, Format(args.format), color=tty, width=width), args.output)
    if args.save is not None:
        from gpufleet.history import RunStore, StoreError  # noqa: PLC0415

        try:
            path = RunStore(args.save).save(doc)
        except StoreError as exc:
            raise UsageError(f"cannot save the report: {exc}") from exc
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


def _with_history(report: Report, store_dir: Path) -> tuple[Report, dict[str, Any]]:
    """The report with the drift findings (GF52x) and its "history" member from the store."""
    import dataclasses  # noqa: PLC0415

    from gpufleet.history import RunStore, StoreError, history_section  # noqa: PLC0415
    from gpufleet.report import summarize  # noqa: PLC0415
    from gpufleet.rules import sort_findings  # noqa: PLC0415
    from gpufleet.rules.history import drift_findings  # noqa: PLC0415

    store = RunStore(store_dir)
    try:
        entries = store.entries()
        drift = drift_findings(_document(report), entries)
        report = dataclasses.replace(report, findings=sort_findings((*report.findings, *drift)))
        report = dataclasses.replace(report, summary=summarize(report))
        doc = _document(report)
        doc["history"] = history_section(doc, entries, store.load)
    except StoreError as exc:
        raise UsageError(f"run store: {exc}") from exc
    return report, doc


def _read_report(path: Path) -> dict[str, Any]:
    """A saved JSON report, checked enough that every renderer can work on it."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path} is not a JSON report: {exc}") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("hosts"), dict):
        raise UsageError(f"{path} is not a gpufleet JSON report (no 'hosts')")
    doc.setdefault("findings", [])
    for name, h in doc["hosts"].items():
        if not isinstance(h, dict) or "status" not in h:
            raise UsageError(f"{path}: host {name!r} has no status")
    for f in doc["findings"]:
        if not isinstance(f, dict) or not {"rule", "severity", "hosts", "message"} <= set(f):
            raise UsageError(f"{path}: a finding lacks rule, severity, hosts or message")
        f.setdefault("remediation", "")
    return doc


def cmd_report(args: argparse.Namespace) -> int:
    from gpufleet.report import Format, render_doc  # noqa: PLC0415

    if args.from_ansible:  # the same as `gpufleet ansible-report RUN`
        return cmd_ansible_report(argparse.Namespace(
            results=args.run_file, format=args.format, output=args.output,
            fail_on=args.fail_on or "error"))
    if args.fail_on is not None:
        raise UsageError("report: --fail-on goes with --from-ansible (a saved report is "
                         "re-rendered as it is)")
    doc = _read_report(args.run_file)
    if args.store is not None:
        from gpufleet.history import RunStore, StoreError, history_section  # noqa: PLC0415

        store = RunStore(args.store)
        try:
            older = [e for e in store.entries()
                     if e["generated_at"] < str(doc.get("generated_at") or "")]
            doc["history"] = history_section(doc, older, store.load)
        except StoreError as exc:
            raise UsageError(f"run store: {exc}") from exc
    if args.output is not None and not args.output.parent.is_dir():
        raise UsageError(f"cannot write {args.output}: {args.output.parent} is not a directory")
    tty = args.output is None and sys.stdout.isatty()
    width = shutil.get_terminal_size().columns if tty else 120
    try:
        text = render_doc(doc, Format(args.format), color=tty, width=width)
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{args.run_file}: cannot render this report: {exc!r}") from exc
    _emit(text, args.output)
    return EXIT_OK


def cmd_history(args: argparse.Namespace) -> int:
    from gpufleet.history import RunStore, StoreError, history_section  # noqa: PLC0415
    from gpufleet.history.text import render_history  # noqa: PLC0415
    from gpufleet.rules.history import drift_findings  # noqa: PLC0415

    if args.store is None:
        raise UsageError("history: say where the runs are: --store DIR (or $GPUFLEET_STORE)")
    store = RunStore(Path(args.store))
    try:
        entries = store.entries()
        if not entries:
            raise UsageError(f"history: no saved runs in {args.store}")
        latest = store.load(entries[-1])
        names: list[str] = list(args.hosts)
        if args.inventory:
            from gpufleet.inventory import InventoryError, load_inventory  # noqa: PLC0415

            try:
                specs = load_inventory(args.inventory, ",".join(names) or None)
            except InventoryError as exc:
                raise UsageError(f"inventory: {exc}") from exc
            names = [s.name for s in specs]
        names = names or sorted(latest["hosts"])
        section = history_section(latest, entries[:-1], store.load, hosts=names)
        drift = drift_findings(latest, entries[:-1])
    except StoreError as exc:
        raise UsageError(f"run store: {exc}") from exc
    section["latest"] = {"run": entries[-1]["file"], "generated_at": entries[-1]["generated_at"]}
    section["drift"] = [f for f in _document_findings(drift) if set(f["hosts"]) & set(names)]
    if args.format == "json":
        _emit(json.dumps(section, indent=2, ensure_ascii=False), None)
    else:
        _emit(render_history(section, known=set(latest["hosts"])), None)
    return EXIT_FINDINGS if section["drift"] else EXIT_OK


def _document_findings(findings: Sequence[Any]) -> list[dict[str, Any]]:
    from gpufleet.model import to_jsonable  # noqa: PLC0415

    return [to_jsonable(f) for f in findings]


def inert(value: object) -> str:
    from gpufleet.report.sanitize import text  # noqa: PLC0415

    return text(value)


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
        smoke_timeout=args.smoke_timeout or smoke_levels.timeout(args.level),
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

    def cell(value: object) -> Text:  # host data: no markup, no escapes, no secrets
        return Text(inert(value))

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
            table.add_row(cell(name), status, *["-"] * 8)
            continue
        table.add_row(
            cell(name), status, *map(cell, (
                " ".join(filter(None, (f.os.id, f.os.version_id))) or "-",
                f.os.kernel or "-",
                _driver_cell(f),
                f.driver.cuda_version or "-",
                _gpus_cell(f),
                f.toolkit_version or "-",
                f.docker.server_version if f.docker and f.docker.server_version else "-",
                f.nccl_system_version or "-",
            )),
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
        entry = Text(f"  {inert(name)}: ",
                     style="bold red" if results[name].status != "ok" else "yellow")
        entry.append(inert(text))
        console.print(entry)
    # rich pads every cell; trailing blanks only get in the way of diffs and golden files.
    return "".join(line.rstrip() + "\n" for line in out.getvalue().splitlines())


# --------------------------------------------------------------------------- node-local mode


def _add_node_check(sub: Any) -> None:
    p = sub.add_parser(
        "node-check", help="check this node (Slurm HealthCheckProgram / prolog)",
        description="Check this machine through the local transport; with --slurm-drain, "
                    "drain or resume it in Slurm. Exit 0 healthy, 1 findings at or above "
                    "--fail-on, 2 usage error.")
    p.add_argument("--expect", type=Path, metavar="FILE",
                   help="expectations rendered by the roles (inventory variables); without "
                        "it only rules that need neither expectations nor peers apply")
    p.add_argument("--level", choices=("facts", "quick"), default="facts",
                   help="facts (default, about a second) or quick (adds the smoke test)")
    p.add_argument("--slurm-drain", action="store_true",
                   help="drain this node on findings at or above --fail-on (reason "
                        "'gpufleet: GFxxx message'); resume it when healthy, if the drain "
                        "was gpufleet's")
    p.add_argument("--node", metavar="NAME",
                   help="Slurm node name (default: $SLURMD_NODENAME, else the hostname)")
    p.add_argument("--fail-on", choices=("error", "warning", "info"), default="error",
                   help="severity that fails (exit 1) and drains (default error)")
    p.add_argument("--breaker-share", type=_share, default=0.1, metavar="F",
                   help="drain at most this share of a partition (at least one node) within "
                        "--breaker-window (default 0.1)")
    p.add_argument("--breaker-window", type=_positive(float), default=3600.0, metavar="S",
                   help="circuit breaker window in seconds (default 3600)")
    p.add_argument("--format", choices=FORMATS, default="table", help="report format")
    p.add_argument("-o", "--output", type=Path, metavar="FILE",
                   help="write the report to FILE instead of stdout")
    p.add_argument("--timeout", type=_positive(float), default=30.0, metavar="S",
                   help="seconds for the fact probe (default 30)")
    p.add_argument("--smoke-timeout", type=_positive(float), default=300.0, metavar="S",
                   help="seconds for the smoke test at --level quick (default 300)")
    p.add_argument("--force", action="store_true",
                   help="run the smoke test even where GPUs are busy")
    p.set_defaults(run=cmd_node_check)


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1]: {text!r}")
    return value


def cmd_node_check(args: argparse.Namespace) -> int:
    import dataclasses  # noqa: PLC0415

    from gpufleet.nodecheck import (  # noqa: PLC0415
        ExpectError,
        load_expectations,
        node_name,
        node_spec,
        run_node_check,
        slurm_findings,
    )
    from gpufleet.report import Format, exit_code, render, summarize  # noqa: PLC0415
    from gpufleet.rules import sort_findings  # noqa: PLC0415

    if args.output is not None and not args.output.parent.is_dir():
        raise UsageError(f"cannot write {args.output}: {args.output.parent} is not a directory")
    name = node_name(args.node)
    try:
        spec = node_spec(name, load_expectations(args.expect))
    except ExpectError as exc:
        raise UsageError(str(exc)) from exc
    report = run_node_check(spec, level=args.level, timeout=args.timeout,
                            smoke_timeout=args.smoke_timeout, force=args.force,
                            generated_at=_now())
    if args.slurm_drain:
        # slurmd kills a health check after 60 s with SIGTERM: unwind (clear a pending breaker
        # claim in Slurm) instead of dying in the middle.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(EXIT_INTERRUPTED))
        extra = slurm_findings(name, report.findings, fail_on=args.fail_on,
                               share=args.breaker_share, window_s=args.breaker_window)
        report = dataclasses.replace(report, findings=sort_findings([*report.findings, *extra]))
    report = dataclasses.replace(report, summary=summarize(report))
    tty = args.output is None and sys.stdout.isatty()
    _emit(render(report, Format(args.format), color=tty, width=120), args.output)
    return exit_code(report.findings, args.fail_on)


def _cmd_smoke_slurm(args: argparse.Namespace) -> int:
    import dataclasses  # noqa: PLC0415

    from gpufleet.nodecheck import ExpectError, load_expectations  # noqa: PLC0415
    from gpufleet.report import Format, exit_code, render, summarize  # noqa: PLC0415
    from gpufleet.rules import evaluate  # noqa: PLC0415
    from gpufleet.slurm_smoke import AllocationError, run_slurm_smoke  # noqa: PLC0415

    if args.inventory:
        raise UsageError("--slurm takes its nodes from the allocation, not from -i")
    try:
        results, specs = run_slurm_smoke(
            load_expectations(args.expect), level=args.level,
            timeout=args.smoke_timeout or smoke_levels.timeout(args.level),
            probe_timeout=args.timeout, force=args.force)
    except (AllocationError, ExpectError) as exc:
        raise UsageError(str(exc)) from exc
    report = Report(hosts=results, specs=specs, generated_at=_now(), level=args.level)
    report = dataclasses.replace(report, findings=evaluate(report))
    report = dataclasses.replace(report, summary=summarize(report))
    tty = args.output is None and sys.stdout.isatty()
    _emit(render(report, Format(args.format), color=tty, width=120), args.output)
    return exit_code(report.findings, args.fail_on)


# --------------------------------------------------------------------------- Ansible/AWX path


def _add_ansible_report(sub: Any) -> None:
    p = sub.add_parser(
        "ansible-report", help="the report over a playbook run's gpufleet.gpu.gpu_facts results",
        description="Judge gpufleet.gpu.gpu_facts results gathered by Ansible/AWX: a callback "
                    "or verify-playbook dump ({host: result}), an `ansible -t` directory, "
                    "ansible-runner job_events, or AWX job events JSON.")
    p.add_argument("results", type=Path, metavar="FILE|DIR")
    p.add_argument("--format", choices=FORMATS, default="table", help="report format")
    p.add_argument("-o", "--output", type=Path, metavar="FILE",
                   help="write the report to FILE instead of stdout")
    p.add_argument("--fail-on", choices=("error", "warning", "info"), default="error",
                   help="exit 1 when a finding is at or above this severity (default error)")
    p.set_defaults(run=cmd_ansible_report)


def cmd_ansible_report(args: argparse.Namespace) -> int:
    from gpufleet.ansible_results import (  # noqa: PLC0415
        AnsibleResultsError,
        expectations,
        load_ansible_results,
        report_from_results,
    )
    from gpufleet.nodecheck import ExpectError  # noqa: PLC0415
    from gpufleet.report import Format, exit_code, render  # noqa: PLC0415

    try:
        results = load_ansible_results(args.results)
        report = report_from_results(results, generated_at=_now(),
                                     expect=expectations(args.results))
    except (AnsibleResultsError, ExpectError) as exc:
        raise UsageError(str(exc)) from exc
    tty = args.output is None and sys.stdout.isatty()
    _emit(render(report, Format(args.format), color=tty, width=120), args.output)
    return exit_code(report.findings, args.fail_on)
