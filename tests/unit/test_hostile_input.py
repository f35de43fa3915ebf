"""Hostile input and odd setups (issue 10): one regression test per defect that needs no sshd.

Items refer to the issue's numbering; the SSH ones live in tests/transport/test_hostile_ssh.py,
the become upload in tests/fleet/test_become_fleet.py, the parser fuzz in test_parser_fuzz.py.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import subprocess
import threading
import urllib.parse
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from test_rules_builders import NOW, fleet, gpu

from gpufleet import cli
from gpufleet.cli.output import Output
from gpufleet.inventory import load_inventory
from gpufleet.model import (
    CommandResult,
    DriverInfo,
    Expectations,
    Facts,
    HostResult,
    HostSpec,
    SmokeResult,
)
from gpufleet.probes import topology
from gpufleet.probes.gpus import parse_query_gpu_csv
from gpufleet.probes.topology import parse_nvlink_status
from gpufleet.report import Format, document, facts_table, redact, render, render_doc
from gpufleet.report.diff import diff_reports
from gpufleet.rules import evaluate
from gpufleet.smoke import verdict
from gpufleet.smoke.command import build_command
from gpufleet.smoke.hostrun import HostRun
from gpufleet.smoke.remote import ddp as smoke_ddp
from gpufleet.smoke.runner import SmokeOptions
from gpufleet.sweep.sweep import raw_file_name
from gpufleet.transport.local import LocalTransport

collect = importlib.import_module("gpufleet.probes.collect")  # the package exports a function

OSC52 = "\x1b]52;c;ZXZpbCBjbGlwYm9hcmQ=\x07"  # a clipboard write from a host
MARKUP = "580.159.04[/]"
LINK = "[link=https://evil.example]click[/link]"
ESCAPES = ("\x1b", "\x07", "\x9b", "\x9d")


def _facts_result(name: str = "gpu1", **driver: str) -> HostResult:
    facts = Facts(driver=DriverInfo(**driver), gpus=(gpu(0),))
    return HostResult(name=name, status="ok", facts=facts)


def _hostile_report() -> object:
    r = fleet({"gpu01": {"facts": {"driver": DriverInfo(version=MARKUP + OSC52,
                                                        kernel_module_version=MARKUP,
                                                        cuda_version=LINK)},
                         "smoke": {"log_tail": "tool said \x1b[2J\x1b]8;;https://x\x07hi"}},
               "gpu02": {"status": "unreachable", "error": f"ssh: {OSC52}\x1b[31mred [/] {LINK}",
                         "facts": None, "smoke": None}})
    return dataclasses.replace(r, findings=evaluate(r, now=NOW))


# --------------------------------------------------------------------------- 4, 6: ssh args


def _inventory(tmp_path: Path, line: str) -> Path:
    path = tmp_path / "hosts.ini"
    path.write_text(f"[gpu]\n{line}\n")
    return path


def test_4_first_strict_host_key_checking_value_wins(tmp_path: Path) -> None:
    inv = _inventory(tmp_path, "gpu1 ansible_host=10.0.0.1 ansible_ssh_common_args="
                               "'-o StrictHostKeyChecking=yes -o StrictHostKeyChecking=no "
                               "-o UserKnownHostsFile=/first -o UserKnownHostsFile=/second'")
    spec = load_inventory([str(inv)])[0]
    assert spec.strict_host_key_checking is True  # ssh(1): the first value given wins
    assert spec.known_hosts_files == ("/first",)


def test_6_bad_port_in_ssh_args_exits_2_with_a_message(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    inv = _inventory(tmp_path, "gpu1 ansible_host=10.0.0.1 ansible_ssh_common_args='-p 22x'")
    with pytest.raises(SystemExit) as info:
        cli.main(["facts", "-i", str(inv)])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "gpu1" in err and "22x" in err and "port" in err
    assert "Traceback" not in err


def test_6_host_named_like_an_option_stays_a_value_in_the_smoke_argv() -> None:
    spec = HostSpec(name="-gpu1", address="10.0.0.1", expect=Expectations())
    h = HostRun(spec, LocalTransport(spec), Facts(), "gfsmoke-test")
    h.run_dir, h.script = "/tmp/gpufleet-smoke.abc", "/tmp/gpufleet-smoke.abc/smoke.pyz"
    argv = build_command(h, level="quick", opts=SmokeOptions(), nproc=2, ref=None,
                         timeout=100, rendezvous=None)
    script_args = argv[argv.index(h.script) + 1:]
    if "--spawn" in script_args:
        script_args = script_args[script_args.index("--spawn") + 2:]
    args = smoke_ddp.parse_args(["--run-dir", h.run_dir, *script_args])
    assert args.host == "-gpu1"


# --------------------------------------------------------------------------- 8: probe temp dir


def test_8_probe_never_reuses_a_planted_temp_dir(tmp_path: Path) -> None:
    """mktemp fails; the fallback path already exists as a symlink to a victim directory."""
    victim = tmp_path / "victim"
    victim.mkdir()
    fakebin = tmp_path / "bin"
    fakebin.mkdir()
    planted: list[Path] = []
    # The fake mktemp plants the link for its parent shell's pid (the probe's $$) and fails.
    (fakebin / "mktemp").write_text(
        "#!/bin/sh\n"
        f'for p in $PPID $(cut -d" " -f4 /proc/$PPID/stat); do '
        f'ln -s {victim} /tmp/gpufleet-probe.$p 2>/dev/null; echo $p >> {tmp_path}/planted; '
        "done\nexit 1\n")
    (fakebin / "mktemp").chmod(0o755)
    env = {**os.environ, "PATH": f"{fakebin}:{os.environ['PATH']}", "TMPDIR": "/tmp"}
    try:
        proc = subprocess.run(["sh", "-s", "--", "tool_timeout=2"],
                              input=collect.probe_script(), capture_output=True, text=True,
                              env=env, timeout=120, check=False)
    finally:
        for pid in (tmp_path / "planted").read_text().split():
            link = Path(f"/tmp/gpufleet-probe.{pid}")
            if link.is_symlink():
                link.unlink()
                planted.append(link)
    assert planted, "the fake mktemp did not run"
    assert list(victim.iterdir()) == [], "the probe wrote into a directory it did not make"
    assert proc.returncode != 0
    assert "private temporary directory" in proc.stderr


# --------------------------------------------------------------------------- 9, 10: files


def test_9_output_file_never_follows_a_planted_temp_symlink(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "report.prom"
    (tmp_path / f".{out.name}.tmp").symlink_to(victim)  # the old fixed temp name
    Output(out).write("report\n")
    assert out.read_text() == "report\n"
    assert victim.read_text() == "precious\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == [f".{out.name}.tmp"]
    assert oct(out.stat().st_mode & 0o777) != oct(0o600)  # readable like a plain write


def test_9_concurrent_writers_each_use_their_own_temp_file(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "report.json"
    seen: list[str] = []
    real_replace = os.replace
    barrier = threading.Barrier(2)

    def slow_replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        seen.append(str(src))
        barrier.wait(5)  # both temp files exist at once
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", slow_replace)
    threads = [threading.Thread(target=Output(out).write, args=(f"run {i}\n",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(set(seen)) == 2, seen
    assert out.read_text() in ("run 0\n", "run 1\n")


def test_10_save_raw_names_are_unique_and_reversible() -> None:
    names = ["gpu/1", "gpu_1", "gpu@1", "gpu%2F1", "..", "-x"]
    files = [raw_file_name(n) for n in names]
    assert len(set(files)) == len(names)
    assert all("/" not in f and f not in (".txt", "..txt") for f in files)
    assert [urllib.parse.unquote(f.removesuffix(".txt")) for f in files] == names


# --------------------------------------------------------------------------- 11-14: reports


def test_11_markup_and_escapes_in_facts_table_are_inert_text() -> None:
    results = {"gpu1": _facts_result(version=MARKUP + OSC52, cuda_version=LINK)}
    for color in (False, True):
        text = facts_table(results, color=color)
        assert MARKUP in text and "[link=https://evil.example]" in text
        assert "\x1b]" not in text and "\x07" not in text  # no OSC (52 clipboard, 8 hyperlink)


def test_11_every_renderer_and_diff_treat_host_data_as_text() -> None:
    report = _hostile_report()
    for fmt in Format:
        for color in (False, True):
            text = render(report, fmt, color=color)  # type: ignore[arg-type]
            if fmt is not Format.table or not color:
                assert not any(c in text for c in ESCAPES), (fmt, color)
            else:  # the table's own colours only: SGR, never OSC
                assert "\x1b]" not in text and "\x07" not in text
            if fmt in (Format.table, Format.json, Format.html):
                assert "580.159.04" in text
    old = json.loads(render(report, Format.json))  # type: ignore[arg-type]
    new = json.loads(json.dumps(old))
    new["hosts"]["gpu01"]["facts"]["driver"]["version"] = "581.0" + OSC52 + "[/]"
    text = diff_reports(old, new)
    assert "581.0[/]" in text and not any(c in text for c in ESCAPES)


def test_12_junit_is_well_formed_whatever_the_tools_printed() -> None:
    doc = document(_hostile_report())  # type: ignore[arg-type]
    doc["hosts"]["gpu02"]["error"] = "bad \x1b[1m \x00 \ufffe \ud800 bytes"  # as read from disk
    xml = render_doc(doc, Format.junit)
    ET.fromstring(xml.encode("utf-8"))  # raises on characters XML cannot hold


def test_12_markdown_cannot_turn_a_version_into_a_link_or_image() -> None:
    r = fleet({"gpu01": {"facts": {"driver": DriverInfo(version="![x](https://evil.example/a.png)"),
                                   "gpus": (gpu(0, name="[click](https://evil.example)"),)}}})
    text = render(r, Format.markdown)
    assert "](https://evil.example" not in text
    assert "\\!\\[x\\]\\(https://evil.example/a.png\\)" in text


def test_13_non_finite_numbers_render_as_missing_in_every_format() -> None:
    nan, inf = float("nan"), float("inf")
    r = fleet({"gpu01": {"smoke": {"busbw_gbps": {1 << 20: nan, 4 << 30: inf},
                                   "matmul_tflops": {0: inf}}}})
    for fmt in Format:
        text = render(r, fmt)
        assert "inf" not in text.lower().replace("info", "") and "nan" not in text.lower()
    # and a result.json carrying them, as a host could write it
    parsed = verdict.loads('{"busbw_gbps": {"1048576": NaN, "4294967296": 1e999, "8": 2.5}}')
    assert parsed == {"busbw_gbps": {"1048576": None, "4294967296": None, "8": 2.5}}


def test_14_facts_table_redacts_what_json_redacts() -> None:
    err = ("docker: Error response from daemon: Get "
           "https://deploy:s3cr3t-pw@registry.example/v2/: unauthorized")
    facts = Facts(driver=DriverInfo(version="580.159.04"), errors={"docker": err})
    text = facts_table({"gpu1": HostResult(name="gpu1", status="ok", facts=facts)})
    assert "s3cr3t-pw" not in text and "registry.example" in text
    assert "s3cr3t-pw" not in json.dumps(document(fleet({"gpu01": {"facts": {"errors": {
        "docker": err}}}})))


@pytest.mark.parametrize("text", [
    '{"password": "hunter2"}',
    "{'AWS_SECRET_ACCESS_KEY': 'hunter2'}",
    'env: {"HF_TOKEN":"hunter2", "x": 1}',
    "API_KEY = 'hunter2'",
])
def test_14_quoted_keys_are_redacted(text: str) -> None:
    assert "hunter2" not in redact(text)


# --------------------------------------------------------------------------- 16, 17


def test_16_huge_rank_in_a_progress_file_is_ignored_with_a_note() -> None:
    spec = HostSpec(name="gpu1", address="10.0.0.1")
    h = HostRun(spec, LocalTransport(spec), Facts(), "gfsmoke-test")
    h.nproc = 2
    h.files = {
        "rank0.progress": json.dumps({"rank": 0, "state": "in", "seq": 3, "phase": "ddp"}),
        "rank1.progress": json.dumps({"rank": 1, "state": "before", "seq": 2, "phase": "ddp"}),
        "rank9.progress": json.dumps({"rank": 10**12, "state": "before", "seq": 0}),
    }
    # the controller's timeout fired: the verdict then says which rank held the others up
    h.launch = CommandResult(rc=None, stdout="", stderr="", duration_s=30.0, timed_out=True)
    done = threading.Event()
    got: list[SmokeResult] = []

    def judge() -> None:
        got.append(verdict.result(h, [h], "quick", 1.0))
        done.set()

    threading.Thread(target=judge, daemon=True).start()
    assert done.wait(10), "the verdict looped over the crafted rank number"
    assert got[0].hung_ranks == () or 10**12 not in got[0].hung_ranks
    assert "rank(s) 1 hung" in (got[0].error or "")
    assert "ignored rank file" in (got[0].error or "")


def test_17_unreadable_nvlink_speed_costs_only_that_speed() -> None:
    links = parse_nvlink_status("GPU 0: NVIDIA H200 (UUID: GPU-x)\n\t Link 0: 26.56.2 GB/s\n"
                                "\t Link 1: 26.562 GB/s\n")
    assert [(link.link, link.active, link.speed_gbps) for link in links[0].links] == [
        (0, True, None), (1, True, 26.562)]


def test_17_a_csv_field_over_the_csv_limit_keeps_the_other_rows() -> None:
    header = "index, name, uuid"
    text = (f"{header}\n0, NVIDIA H200, GPU-a\n1, {'x' * (200 << 10)}, GPU-b\n"
            "2, NVIDIA H200, GPU-c\n")
    gpus = parse_query_gpu_csv(text)
    assert [g.index for g in gpus] == [0, 2]


def test_17_a_parser_crash_is_a_could_not_read_error_not_a_lost_host(
        monkeypatch: pytest.MonkeyPatch, fixtures_dir: Path) -> None:
    text = (fixtures_dir / "h200x2-probe-2026-11-30" / "probe-idle.txt").read_text()

    def boom(_: str) -> object:
        raise ValueError("odd line")

    monkeypatch.setattr(topology, "parse_topo_m", boom)
    facts = collect.parse_probe_output(text)
    assert "could not read topology" in facts.errors["topology"]
    assert len(facts.gpus) == 2 and facts.driver.version  # the rest was read


def test_17_an_odd_result_json_is_a_failed_run_with_the_reason() -> None:
    spec = HostSpec(name="gpu1", address="10.0.0.1")
    h = HostRun(spec, LocalTransport(spec), Facts(), "gfsmoke-test")
    h.nproc = 2
    h.files = {"result.json": json.dumps({"status": "pass", "ranks": [{"host": "gpu1"}],
                                          "busbw_gbps": {"x": "fast"}})}
    res = verdict.result(h, [h], "quick", 1.0)
    assert res.status == "error"
    assert "could not read result.json" in (res.error or "")
