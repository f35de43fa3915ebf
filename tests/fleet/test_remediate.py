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
HOSTS = [("gpu-reset", "recovery-reset"), ("gpu-again", "recovery-reset"), ("gpu-busy", "busy")]


@pytest.fixture(scope="module")
def rfleet(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with make_fleet(tmp_path_factory.mktemp("remediate"), HOSTS) as f:
        f.env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
        yield f


def _play(fleet: Fleet, host: str, *extra: str) -> subprocess.CompletedProcess[str]:
    bin_dir = Path(fleet.env["PATH"].split(":")[0])
    return subprocess.run(
        [str(bin_dir / "ansible-playbook"), "-i", str(fleet.inventory), "-l", host,
         str(COLLECTION / "playbooks/remediate_gpu_reset.yml"), *extra],
        cwd=REPO, env=fleet.env, capture_output=True, text=True, timeout=180, check=False)


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
