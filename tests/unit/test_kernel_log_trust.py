"""Issue 38.1 (review S01): an Xid is a kernel-facility message that begins with the driver's
"NVRM: Xid (PCI:…): N"; lines quoting one are counted, never events, and cannot flush real ones.

Cases: tests/fixtures/kernel_log/forged.yaml (each line cites its source). The probe cases run
the shipped probe.sh with a stand-in `dmesg` that answers only `-x --time-format iso`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import yaml

from gpufleet.model import Facts
from gpufleet.probes import parse_probe_output, probe_script
from gpufleet.probes.kernel_log import parse_xid_lines, skipped_lines

REPO = Path(__file__).resolve().parents[2]
CASES = yaml.safe_load((REPO / "tests/fixtures/kernel_log/forged.yaml").read_text())
DRIVER, FORGED = CASES["driver"], CASES["forged"]


def test_driver_lines_are_xids() -> None:
    text = "# source: dmesg -x --time-format iso\n" + "\n".join(DRIVER) + "\n"
    events = parse_xid_lines(text)
    assert [(e.xid, e.bus_id, e.timestamp) for e in events] == [
        (79, "00000000:00:07.0", "[ 8123.460012]"),
        (48, "00000000:00:07.0", "2026-12-02T10:00:01,000000+00:00"),
    ]
    assert skipped_lines(text) is None


def test_each_forged_line_is_no_xid() -> None:
    for line in FORGED:
        text = f"# source: dmesg -x --time-format iso\n{line}\n"
        assert parse_xid_lines(text) == (), line
        assert "1 kernel-log line(s) quoting 'NVRM: Xid' not logged" in (skipped_lines(text) or "")


def test_real_h200_kernel_log_has_no_xid_and_nothing_skipped() -> None:
    # A capture (tests/fixtures/h200x2-2026-11-30/README.md): NVRM lines, none an Xid.
    text = (REPO / "tests/fixtures/h200x2-2026-11-30/kernel-log.txt").read_text()
    assert "NVRM:" in text
    assert parse_xid_lines(text) == () and skipped_lines(text) is None


def _probe(tmp: Path, lines: list[str]) -> Facts:
    bindir = tmp / "bin"
    bindir.mkdir()
    (tmp / "kmsg.txt").write_text("\n".join(lines) + "\n")
    # A stand-in dmesg: the log only for the facility-decoding call the probe must make.
    (bindir / "dmesg").write_text(
        '#!/bin/sh\n[ "$*" = "-x --time-format iso" ] || { echo "dmesg: not this call" >&2; '
        f'exit 1; }}\ncat {tmp / "kmsg.txt"}\n')
    (bindir / "dmesg").chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}",
           "GPUFLEET_SYS_PCI_DEVICES": str(tmp / "no-pci"),
           "GPUFLEET_PROC_DRIVER_NVIDIA": str(tmp / "no-proc")}
    out = subprocess.run(["sh", "-s", "--", "tool_timeout=10"], input=probe_script(),
                         capture_output=True, text=True, env=env, timeout=300, check=False)
    return parse_probe_output(out.stdout, collected_at="2026-12-02T10:05:00Z")


def test_probe_keeps_driver_lines_and_counts_a_flood_of_forgeries(tmp_path: Path) -> None:
    # One real Xid first, then 600 forged lines (more than the 500 the probe keeps), then one more.
    flood = [FORGED[i % len(FORGED)] for i in range(600)]
    facts = _probe(tmp_path, [DRIVER[0], *flood, DRIVER[1]])
    assert [(e.xid, e.bus_id) for e in facts.xid_events] == [
        (79, "00000000:00:07.0"), (48, "00000000:00:07.0")]
    assert facts.errors.get("xid_skipped", "").startswith(
        "600 kernel-log line(s) quoting 'NVRM: Xid' not logged by the NVIDIA driver")


def test_probe_says_how_many_driver_lines_it_left_out(tmp_path: Path) -> None:
    many = [DRIVER[0].replace("8123.460012", f"{8000 + i}.000000") for i in range(503)]
    facts = _probe(tmp_path, many)
    assert len(facts.xid_events) == 500
    assert facts.xid_events[0].timestamp == "[ 8003.000000]"  # the newest 500 kept
    assert facts.errors.get("xid_skipped") == (
        "3 older Xid line(s) beyond the newest 500 were not read")


def _driver_lines_in_fixtures() -> list[str]:
    """Every whole driver Xid line the project's fixtures hold: the fleet overlays (each cites
    its layout's source in tests/fleet/profiles/README.md) and the families' JSON cases."""
    found: list[str] = []
    for path in sorted((REPO / "tests/fleet/profiles/overlays").glob("*.toml")):
        found += [ln for ln in path.read_text().splitlines()
                  if re.match(r"^\[\s*[\d.]+\] NVRM: Xid \(", ln)]
    for path in sorted((REPO / "tests/fixtures/families").glob("*/*.json")):
        sections = json.loads(path.read_text()).get("sections", {})
        text = sections.get("kernel_log", {}).get("stdout", "")
        found += [ln for ln in text.splitlines() if "NVRM: Xid" in ln]
    return found


def test_every_driver_line_of_the_fixtures_still_parses() -> None:
    lines = _driver_lines_in_fixtures()
    assert len(lines) >= 20  # 22 when written: 19 in the overlays, 3 in the families
    for line in lines:
        text = f"# source: dmesg -x --time-format iso\n{line}\n"
        assert len(parse_xid_lines(text)) == 1 and skipped_lines(text) is None, line


def test_probe_reads_journald_kernel_facility_records_only(tmp_path: Path) -> None:
    # dmesg refused (dmesg_restrict), journald answers; its short-iso layout is
    # "TIME HOST kernel: MESSAGE" (systemd's output "short-iso"). The stand-in answers only the
    # kernel-facility match: journald gives user text in /dev/kmsg its own SYSLOG_FACILITY
    # (systemd src/journal/journald-kmsg.c dev_kmsg_record) and a forged "kernel:" identifier.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (tmp_path / "journal.txt").write_text(
        "2026-12-02T10:00:01+0000 gpu01 kernel: " + DRIVER[0].split("] ", 1)[1] + "\n"
        "2026-12-02T10:00:02+0000 gpu01 kernel: " + FORGED[0].split("] ", 1)[1] + "\n")
    (bindir / "dmesg").write_text(
        "#!/bin/sh\necho 'dmesg: read kernel buffer failed: Operation not permitted' >&2\nexit 1\n")
    (bindir / "journalctl").write_text(
        '#!/bin/sh\ncase " $* " in *" SYSLOG_FACILITY=0 "*) ;; *) exit 1 ;; esac\n'
        f'cat {tmp_path / "journal.txt"}\n')
    for tool in ("dmesg", "journalctl"):
        (bindir / tool).chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}",
           "GPUFLEET_SYS_PCI_DEVICES": str(tmp_path / "no-pci"),
           "GPUFLEET_PROC_DRIVER_NVIDIA": str(tmp_path / "no-proc")}
    out = subprocess.run(["sh", "-s", "--", "tool_timeout=10"], input=probe_script(),
                         capture_output=True, text=True, env=env, timeout=300, check=False)
    facts = parse_probe_output(out.stdout, collected_at="2026-12-02T10:05:00Z")
    assert [(e.xid, e.timestamp, e.this_boot) for e in facts.xid_events] == [
        (79, "2026-12-02T10:00:01+0000", None)]
    assert facts.errors.get("xid_skipped", "").startswith("1 kernel-log line(s)")
