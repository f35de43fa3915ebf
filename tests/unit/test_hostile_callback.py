"""The gpufleet_report callback under a real `ansible-playbook` run (connection local, no
daemon): issue 22 F13 (fixed temp name) and the callback's half of F22 (a later task's result).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
PLAY = """- hosts: localhost
  connection: local
  gather_facts: false
  vars:
    nvidia_driver_version: "999.99.99"
  tasks:
    - name: gpufleet facts
      gpufleet.gpu.gpu_facts:
    - name: a later task whose result carries what gpu_facts returns (the host's output)
      ansible.builtin.set_fact:
        gpufleet: {}
        gpufleet_expect: {}
"""


def test_f13_f22_callback_writes_through_no_planted_link_and_keeps_gpu_facts(
        tmp_path: Path) -> None:
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    out = tmp_path / "gpufleet-report.json"
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (tmp_path / "gpufleet-report.json.tmp").symlink_to(victim)
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_CALLBACKS_ENABLED": "gpufleet.gpu.gpufleet_report",
           "GPUFLEET_REPORT": str(out), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    proc = subprocess.run([str(bin_dir / "ansible-playbook"), "-i", "localhost,", str(play)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert victim.read_text() == "precious\n"  # ef054d5: the report, written through the link
    assert not out.is_symlink()
    report = json.loads(out.read_text())
    host = report["hosts"]["localhost"]
    assert host["facts"]["collected_at"], "the gpu_facts result, not the later set_fact's {}"
    # the expectation came with gpu_facts' own result and still judges the host
    # the expectation came with gpu_facts' own result and still judges the host (no driver on
    # this machine: "driver not found, inventory wants 999.99.99")
    assert [f["message"] for f in report["findings"] if f["rule"] == "GF101"] == [
        "localhost: driver not found, inventory wants 999.99.99"], report["findings"]
