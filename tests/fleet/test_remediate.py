"""The remediation ladder's reset rung over real SSH: playbooks/remediate_gpu_reset.yml run by
real ansible-playbook against simulated hosts, whose nvidia-smi answers a reset (profile
recovery-reset: Xid 94 with the driver asking for a reset; after `nvidia-smi -r -i 1` it reports
recovery action None). `gpufleet check` judges the host before and after."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from fleetlib import Fleet, make_fleet

from paths import COLLECTION

pytestmark = [pytest.mark.fleet, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
HOSTS = [("gpu-reset", "recovery-reset"), ("gpu-again", "recovery-reset"), ("gpu-busy", "busy"),
         ("gpu-reboot", "recovery-reboot"), ("gpu-reboots", "reboot-again")]
# The one point a reboot is replaced (a real one would take the CI machine down): shutdown's
# stand-in, the profile's bin/gpufleet-sim-reboot, as ansible.builtin.reboot's reboot_command. It
# takes the simulated host down for real (its sshd and every session die) and the fleet boots it
# again with a new boot id, a fresh driver state and kernel log (tests/fleet/profiles/README.md,
# contract 7). Everything else is ansible.builtin.reboot's own: boot id read from
# /proc/sys/kernel/random/boot_id before, the command, reconnecting until the boot id differs,
# the test command.
SIM_REBOOT = ["-e", "remediate_reboot_command=/usr/local/sbin/gpufleet-sim-reboot",
              "-e", "remediate_reboot_timeout=120"]  # under _play's 180 s, so Ansible says why


@pytest.fixture(scope="module")
def rfleet(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with make_fleet(tmp_path_factory.mktemp("remediate"), HOSTS) as f:
        f.env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
        yield f


def _play(fleet: Fleet, host: str, *extra: str,
          playbook: str = "remediate_gpu_reset.yml") -> subprocess.CompletedProcess[str]:
    bin_dir = Path(fleet.env["PATH"].split(":")[0])
    argv = [str(bin_dir / "ansible-playbook"), "-i", str(fleet.inventory), "-l", host,
            str(COLLECTION / "playbooks" / playbook), *extra]
    try:
        return subprocess.run(argv, cwd=REPO, env=fleet.env, capture_output=True, text=True,
                              timeout=180, check=False)
    except subprocess.TimeoutExpired as exc:  # say where it stuck
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else str(exc.stdout)
        pytest.fail(f"{playbook} on {host} still running after 180 s:\n{out[-3000:]}")


def _check(fleet: Fleet, host: str) -> dict[str, Any]:
    res = fleet.run_cli("check", "-i", str(fleet.inventory), "-l", host, "--level", "facts",
                        "--format", "json")
    return json.loads(res.stdout)


def _errors(doc: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(f["rule"], f["evidence"].get("xid")) for f in doc["findings"]
            if f["severity"] == "error"]


def test_reset_clears_the_drivers_recovery_action(rfleet: Fleet) -> None:
    assert _errors(_check(rfleet, "gpu-reset")) == [("GF405", 94)]
    play = _play(rfleet, "gpu-reset", "-e", "remediate_gpu=1")
    assert play.returncode == 0, play.stdout[-3000:]
    assert "GPU 1 reset; recovery action None" in play.stdout
    after = _check(rfleet, "gpu-reset")
    assert _errors(after) == []
    (xid,) = [f for f in after["findings"] if f["rule"] == "GF406"]
    assert xid["evidence"]["decided_by"] == "driver recovery action"
    assert xid["evidence"]["bucket"] == "none"


def test_preconditions_refuse_and_change_nothing(rfleet: Fleet) -> None:
    wrong = _play(rfleet, "gpu-again", "-e", "remediate_gpu=7")
    assert wrong.returncode != 0 and "must be the index of a GPU" in wrong.stdout
    missing = _play(rfleet, "gpu-again")
    assert missing.returncode != 0 and "must be the index of a GPU" in missing.stdout
    assert _errors(_check(rfleet, "gpu-again")) == [("GF405", 94)]  # not reset
    busy = _play(rfleet, "gpu-busy", "-e", "remediate_gpu=0")
    assert busy.returncode != 0 and "is in use" in busy.stdout, busy.stdout[-2000:]
    assert "TASK [Reset the GPU]" not in busy.stdout


def test_bug_report_is_collected_into_the_rma_bundle(rfleet: Fleet, tmp_path: Path) -> None:
    """playbooks/collect_bug_report.yml over SSH: the simulated host's nvidia-bug-report.sh
    (its shape: tests/fleet/profiles/build_profiles.py BUG_REPORT) writes the log as root in a
    private directory, the play fetches it and `gpufleet rma-bundle` packs it with the host's
    saved runs; the node keeps nothing."""
    import gzip  # noqa: PLC0415
    import tarfile  # noqa: PLC0415

    store, dest = tmp_path / "runs", tmp_path / "rma"
    saved = rfleet.run_cli("check", "-i", str(rfleet.inventory), "-l", "gpu-again", "--level",
                           "facts", "--format", "json", "--save", str(store))
    assert saved.returncode == 1, saved.stderr[-2000:]  # GF405: the Xid 94 it holds
    bin_dir = Path(rfleet.env["PATH"].split(":")[0])
    play = subprocess.run(
        [str(bin_dir / "ansible-playbook"), "-i", str(rfleet.inventory), "-l", "gpu-again",
         str(COLLECTION / "playbooks/collect_bug_report.yml"),
         "-e", f"collect_bug_report_dest={dest}",
         "-e", f"collect_bug_report_store={store}",
         "-e", f"collect_bug_report_gpufleet={bin_dir / 'gpufleet'}"],
        cwd=REPO, env=rfleet.env, capture_output=True, text=True, timeout=180, check=False)
    assert play.returncode == 0, play.stdout[-3000:]
    log = gzip.decompress((dest / "gpu-again" / "nvidia-bug-report.log.gz").read_bytes()).decode()
    assert log.lstrip("_\n").startswith("Start of NVIDIA bug report log file.")
    assert "GPU Recovery Action" in log and "Xid (PCI:0000:00:07): 94" in log
    with tarfile.open(dest / "gpu-again" / "rma-gpu-again.tar.gz") as tar:
        names = tar.getnames()
        manifest = json.loads(tar.extractfile("rma-gpu-again/manifest.json").read())  # type: ignore[union-attr]
    assert "rma-gpu-again/nvidia-bug-report.log.gz" in names
    assert "nvidia-bug-report.log.gz" in manifest["files"] and manifest["host"] == "gpu-again"
    left = subprocess.run(rfleet.ssh_argv("gpu-again", "ls -d /tmp/gpufleet-bug-report.* "
                                          "2>/dev/null | wc -l"),
                          capture_output=True, text=True, timeout=30, check=False)
    assert left.stdout.strip() == "0", left.stdout + left.stderr


def test_reboot_rung_check_mode_and_a_busy_node_change_nothing(rfleet: Fleet) -> None:
    """playbooks/remediate_reboot.yml on profile recovery-reboot (the driver asks for a node
    reboot): check mode reboots nothing, and a node with a GPU process is refused before the
    reboot task."""
    assert ("GF405", 31) in _errors(_check(rfleet, "gpu-reboot"))
    dry = _play(rfleet, "gpu-reboot", "--check", *SIM_REBOOT, playbook="remediate_reboot.yml")
    assert dry.returncode == 0, dry.stdout[-3000:]
    assert ("GF405", 31) in _errors(_check(rfleet, "gpu-reboot"))  # nothing rebooted
    busy = _play(rfleet, "gpu-busy", *SIM_REBOOT, playbook="remediate_reboot.yml")
    assert busy.returncode != 0 and "still runs GPU processes" in busy.stdout, busy.stdout[-3000:]
    assert "TASK [Reboot the node]" not in busy.stdout


def _boot_id(fleet: Fleet, host: str) -> str:
    res = subprocess.run(fleet.ssh_argv(host, "cat /proc/sys/kernel/random/boot_id"),
                         capture_output=True, text=True, timeout=30, check=False)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def test_reboot_rung_reboots_and_the_node_comes_back_healthy(rfleet: Fleet) -> None:
    """The reboot itself: the host goes down (the module reconnects), comes back as a new boot,
    the driver no longer asks for anything and the kernel log is this boot's, so gpufleet
    reports it healthy; the boot id gpufleet reads is the new one."""
    before = _check(rfleet, "gpu-reboot")
    assert ("GF405", 31) in _errors(before)
    play = _play(rfleet, "gpu-reboot", *SIM_REBOOT, playbook="remediate_reboot.yml")
    assert play.returncode == 0, play.stdout[-3000:]
    assert "rebooted; 2 GPU(s), recovery action None" in play.stdout
    after = _check(rfleet, "gpu-reboot")
    assert _errors(after) == [], after["findings"]
    booted = after["hosts"]["gpu-reboot"]["facts"]["boot_id"]
    assert booted == _boot_id(rfleet, "gpu-reboot")
    assert booted != before["hosts"]["gpu-reboot"]["facts"]["boot_id"]


def test_a_gpu_that_asks_again_after_two_reboots_is_held_for_rma(rfleet: Fleet,
                                                                    tmp_path: Path) -> None:
    """Profile reboot-again: the GPU asks for a reboot again in every boot. The rung reboots and
    then fails, naming the next rung; the third boot that asks is past gpud's limit of 2
    reboots (GF432, counted by boot id over the saved runs)."""
    store = str(tmp_path / "runs")
    boots = []
    for n in range(3):
        doc = rfleet.check_json("-l", "gpu-reboots", "--save", store)
        boots.append(doc["hosts"]["gpu-reboots"]["facts"]["boot_id"])
        held = [f for f in doc["findings"] if f["rule"] == "GF432"]
        assert bool(held) == (n == 2), (n, held)
        if n < 2:
            play = _play(rfleet, "gpu-reboots", *SIM_REBOOT, playbook="remediate_reboot.yml")
            flat = " ".join(play.stdout.split())  # the callback wraps long messages
            assert play.returncode != 0 and "TASK [Reboot the node]" in play.stdout, flat[-3000:]
            assert "recovery actions Reboot, None: next rung, the driver/fabric manager " \
                   "reinstall (playbooks/remediate_reinstall.yml" in flat, flat[-3000:]
    assert len(set(boots)) == 3, boots
    (rma,) = held
    assert rma["severity"] == "error" and rma["evidence"]["count"] == 3, rma
    assert sorted(rma["evidence"]["boot_ids"]) == sorted(boots), rma
