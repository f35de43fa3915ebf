"""The RDMA fabric rules (GF450-GF462) on simulated sysfs trees, through the shipped probe.

Each case under tests/fixtures/fabric/ is one short file: the host's ports in a first run
(`ports`, or `hosts` for several), what changed by a second run `hours` later (`after`), what
`mlxlink -c` prints per device in the second run (`mlxlink`: a stand-in whose sources
tests/harness/sysfs_ib.py write_mlxlink names), and the findings expected (`expect`: rule -> the
NIC, or the host for group rules; {} = none). The tree is written in the kernel's layout
(tests/harness/sysfs_ib.py names the sources), the real
probe.sh reads it, the real parser and rules judge it.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.model import Expectations, Facts, HostResult, HostSpec, Report, to_jsonable
from gpufleet.probes import probe_script
from gpufleet.probes.collect import parse_probe_output
from gpufleet.rules import evaluate
from gpufleet.rules.fabric_delta import delta_findings
from harness.sysfs_ib import merged, write_mlxlink, write_tree

CASES = sorted((Path(__file__).parents[1] / "fixtures" / "fabric").glob("*.yaml"))
T0 = datetime(2026, 12, 1, 6, 0, tzinfo=timezone.utc)


def probe(root: Path, ports: dict[str, Any], when: datetime,
          mlxlink: dict[str, Any] | None = None) -> Facts:
    env = {**os.environ, **write_tree(root, ports),
           "GPUFLEET_SYS_PCI_DEVICES": str(root / "no-pci")}
    if mlxlink is not None:  # a stand-in mlxlink first on PATH
        env["PATH"] = f"{write_mlxlink(root / 'bin', mlxlink)}:{env['PATH']}"
    out = subprocess.run(["sh", "-s", "--"], input=probe_script(), capture_output=True,
                         text=True, env=env, timeout=120, check=False).stdout
    return parse_probe_output(out, collected_at=when.isoformat())


def doc(facts: dict[str, Facts]) -> dict[str, Any]:
    return {"hosts": {h: {"status": "ok", "facts": to_jsonable(f)} for h, f in facts.items()}}


def run_case(case: dict[str, Any], tmp: Path) -> set[tuple[str, str]]:
    hosts = case.get("hosts") or {"gpu01": case["ports"]}
    t1 = T0 + timedelta(hours=case["hours"])
    before, after = {}, {}
    for host, ports in hosts.items():
        before[host] = probe(tmp / host / "0", ports, T0)
        changed = {n: merged(p, (case.get("after") or {}).get(n)) for n, p in ports.items()}
        after[host] = probe(tmp / host / "1", changed, t1, case.get("mlxlink"))
    limits = Expectations(**case.get("vars", {}))
    specs = {h: HostSpec(h, h, groups=("rack1",), expect=limits) for h in hosts}
    report = Report(hosts={h: HostResult(h, "ok", facts=f) for h, f in after.items()},
                    specs=specs)
    found = [f for f in evaluate(report) if f.rule.startswith(("GF45", "GF46"))]
    found += delta_findings(doc(after), doc(before), {h: limits for h in hosts})
    return {(f.rule, str(f.evidence.get("nic") or f.hosts[0])) for f in found}


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_fabric_case(path: Path, tmp_path: Path) -> None:
    case = yaml.safe_load(path.read_text())
    assert case["source"], f"{path.name}: every simulated tree says where its facts come from"
    assert run_case(case, tmp_path) == set(case["expect"].items())


def test_the_probe_reads_every_part_of_a_port(tmp_path: Path) -> None:
    ports = {"mlx5_0/1": {"link_layer": "Ethernet", "netdev": "ens1f0np0", "carrier_changes": 9,
                          "counters": {"link_downed": 2}, "hw_counters": {"rnr_nak_retry_err": 5},
                          "pkeys": ["0xffff", "0x8001"]}}
    facts = probe(tmp_path, ports, T0)
    (link,) = facts.ib_links or ()
    assert (link.device, link.port, link.state, link.phys_state, link.link_layer) == (
        "mlx5_0", "1", "ACTIVE", "LinkUp", "Ethernet")
    assert link.counters["link_downed"] == 2 and len(link.counters) == 16
    assert link.hw_counters["rnr_nak_retry_err"] == 5
    assert link.pkeys == ("0x8001", "0xffff")  # the empty 0x0000 slots are not listed
    assert (link.netdev, link.carrier_changes) == ("ens1f0np0", 9)
    assert link.ber is None and link.ber_note == "mlxlink not installed"
    assert facts.ib_ports and facts.ib_ports[0].rate_gbit == 400.0
    assert "ib_links" not in facts.errors


def test_hostile_lines_are_skipped_not_trusted() -> None:
    from gpufleet.probes.ib import parse_ib_links  # noqa: PLC0415

    text = ("state 4: ACTIVE\n"  # before any port: no port to give it to
            "port mlx5_0 1\nstate 4: ACTIVE\ncounter link_downed 18446744073709551615999\n"
            "counter symbol_error N/A (no PMA)\ncounter $(reboot) 1\npkey 0 0xffff\n"
            "netdev ../../etc\ncarrier_changes 4\nport bad/dev 1\n")
    (link,) = parse_ib_links(text)
    assert link.state == "ACTIVE" and link.counters == {} and link.pkeys == ("0xffff",)
    assert link.netdev is None and link.carrier_changes is None
    assert dataclasses.replace(link) == link


def test_check_save_judges_counters_against_the_stores_last_run(tmp_path: Path) -> None:
    # The path `gpufleet check --save DIR` takes (cli/saved.py with_history): the previous
    # run from the store is the "before" of every counter.
    from gpufleet.cli.saved import with_history  # noqa: PLC0415
    from gpufleet.history.store import RunStore  # noqa: PLC0415
    from gpufleet.report import document  # noqa: PLC0415
    from gpufleet.report.pipeline import judge  # noqa: PLC0415

    ports = {"mlx5_0/1": {}, "mlx5_1/1": {}}
    runs = []
    for i, change in enumerate(({}, {"mlx5_1/1": {"counters": {"link_downed": 1}}})):
        when = T0 + timedelta(hours=4 * i)
        facts = probe(tmp_path / str(i), {n: merged(p, change.get(n)) for n, p in ports.items()},
                      when)
        runs.append(judge(Report(hosts={"gpu01": HostResult("gpu01", "ok", facts=facts)},
                                 generated_at=when.isoformat())))
    store = tmp_path / "store"
    RunStore(store).save(document(runs[0]))
    report, _ = with_history(runs[1], store)
    (hit,) = [f for f in report.findings if f.rule == "GF455"]
    assert hit.evidence["nic"] == "mlx5_1/1" and hit.evidence["delta"] == 1
    assert hit.evidence["interval_h"] == 4.0 and hit.severity == "error"


def test_check_save_compares_each_host_with_its_own_last_run(tmp_path: Path) -> None:
    # `check --save` of gpu01 and gpu02, then of gpu02 alone (`-l gpu02`), then of gpu01: its
    # counters are compared with the first run, the last one that has it, not with gpu02's.
    from gpufleet.cli.saved import with_history  # noqa: PLC0415
    from gpufleet.history.store import RunStore  # noqa: PLC0415
    from gpufleet.report import document  # noqa: PLC0415
    from gpufleet.report.pipeline import judge  # noqa: PLC0415

    def run(i: int, hosts: dict[str, dict[str, Any]]) -> Report:
        when = T0 + timedelta(hours=2 * i)
        results = {h: HostResult(h, "ok", facts=probe(tmp_path / f"{i}{h}", ports, when))
                   for h, ports in hosts.items()}
        return judge(Report(hosts=results, generated_at=when.isoformat()))

    up = {"mlx5_0/1": {}}
    down = {"mlx5_0/1": {"counters": {"link_downed": 1}}}
    store = RunStore(tmp_path / "store")
    store.save(document(run(0, {"gpu01": up, "gpu02": up})))
    store.save(document(run(1, {"gpu02": up})))
    report, _ = with_history(run(2, {"gpu01": down}), tmp_path / "store")
    (hit,) = [f for f in report.findings if f.rule == "GF455"]
    assert hit.hosts == ("gpu01",) and hit.evidence["interval_h"] == 4.0


def _nvlink_doc(replay: int, recovery: int, when: datetime) -> dict[str, Any]:
    from gpufleet.probes.nvlink_errors import parse_nvlink_errors  # noqa: PLC0415

    # The format of `nvidia-smi nvlink -e` (stas00/ml-engineering@62d4359e
    # compute/accelerator/nvidia/debug.md, an H100); the counts are the case's.
    text = ("GPU 1: NVIDIA H200 (UUID: GPU-e0ec50b6-f483-68ed-fb7b-ecc8879a76a2)\n"
            "\t Link 4: Replay Errors: 0\n\t Link 4: Recovery Errors: 0\n\t Link 4: CRC Errors: 0\n"
            f"\t Link 5: Replay Errors: {replay}\n\t Link 5: Recovery Errors: {recovery}\n"
            "\t Link 5: CRC Errors: 2\n")
    facts = Facts(collected_at=when.isoformat(), nvlink_errors=parse_nvlink_errors(text))
    return doc({"gpu01": facts})


def test_nvlink_replays_rising_are_named_with_gpu_and_link() -> None:
    t1 = T0 + timedelta(hours=12)
    (f,) = delta_findings(_nvlink_doc(310, 0, t1), _nvlink_doc(12, 0, T0))
    assert f.rule == "GF459" and f.severity == "warning"
    assert (f.evidence["gpu"], f.evidence["link"], f.evidence["deltas"]) == (1, 5, {"replay": 298})
    (g,) = delta_findings(_nvlink_doc(12, 1, t1), _nvlink_doc(12, 0, T0))
    assert g.severity == "error" and g.evidence["deltas"] == {"recovery": 1}
    assert delta_findings(_nvlink_doc(12, 0, t1), _nvlink_doc(12, 0, T0)) == []
    assert delta_findings(_nvlink_doc(0, 0, t1), _nvlink_doc(12, 0, T0)) == []  # reset


def test_mlxlink_ber_is_read_per_device_and_failures_say_why(tmp_path: Path) -> None:
    ports = {"mlx5_0/1": {}, "mlx5_1/1": {}, "mlx5_2/1": {}, "mlx5_3/1": {
        "state": "1: DOWN", "phys_state": "2: Polling"}}
    facts = probe(tmp_path, ports, T0, {
        "mlx5_0": {"ber": "15E-255", "raw": "3E-10", "color": True},
        "mlx5_1": {"fail": "-E- Failed to open the device"}})
    by = {link.device: link for link in facts.ib_links or ()}
    assert (by["mlx5_0"].ber, by["mlx5_0"].raw_ber, by["mlx5_0"].ber_note) == (
        "15E-255", "3E-10", None)
    assert by["mlx5_1"].ber is None
    assert by["mlx5_1"].ber_note == "mlxlink exit 1: -E- Failed to open the device"
    assert by["mlx5_2"].ber_note == "mlxlink exit 1: -E- Failed to open device: mlx5_2"
    assert by["mlx5_3"].ber_note == "port not ACTIVE"  # not asked: GF450's


def test_hostile_mlxlink_lines_are_not_trusted() -> None:
    from gpufleet.probes.ib import parse_mlxlink  # noqa: PLC0415

    text = ("> Effective Physical BER : 1E-3\n"  # before any device line: nobody's
            "device mlx5_0 rc=0\n"
            "> Effective Physical BER : $(reboot)\n"
            "device mlx5_9 rc=0\n"
            "Effective Physical BER : 1E-3\n"  # unprefixed: not a line mlxlink printed
            "> Raw Physical BER : 2E-5\n")
    got = parse_mlxlink(text)
    assert got["mlx5_0"] == {"note": "mlxlink printed no Effective Physical BER: "
                                     "Effective Physical BER : $(reboot)"}
    assert got["mlx5_9"] == {"raw_ber": "2E-5", "note": "mlxlink printed no Effective "
                                                        "Physical BER: Raw Physical BER : 2E-5"}


def test_mlxlink_is_asked_for_every_device_at_once(tmp_path: Path) -> None:
    # mlxlink takes about a second per call on a real HCA; 4 devices must be asked at once, not one
    # after the other. Proven by order, not by the clock (a loaded machine stretches the probe):
    # each stand-in call logs "start", sleeps 5 s, logs "end"; asked at once, all four start
    # before any ends.
    ports = {f"mlx5_{i}/1": {} for i in range(4)}
    bindir = write_mlxlink(tmp_path / "bin", {f"mlx5_{i}": {"ber": "15E-255"} for i in range(4)})
    script = bindir / "mlxlink"
    log = tmp_path / "mlxlink.log"
    script.write_text(script.read_text().replace(
        "#!/bin/sh\n", f"#!/bin/sh\necho start >>{log}\nsleep 5\necho end >>{log}\n", 1))
    env = {**os.environ, **write_tree(tmp_path, ports), "PATH": f"{bindir}:{os.environ['PATH']}",
           "GPUFLEET_SYS_PCI_DEVICES": str(tmp_path / "no-pci")}
    out = subprocess.run(["sh", "-s", "--"], input=probe_script(), capture_output=True,
                         text=True, env=env, timeout=120, check=False).stdout
    links = parse_probe_output(out, collected_at=T0.isoformat()).ib_links or ()
    assert [link.ber for link in links] == ["15E-255"] * 4
    order = log.read_text().split()
    assert order == ["start"] * 4 + ["end"] * 4, f"mlxlink was asked one at a time: {order}"
