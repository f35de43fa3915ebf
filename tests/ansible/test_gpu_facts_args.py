"""gpufleet.gpu.gpu_facts checks its arguments with the one spec the module documents
(plugins/module_utils/gpu_facts_spec.py): a real ansible-playbook run on this machine (connection
local, no daemons; about 3 s)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, VENV_BIN, ansible_env

pytestmark = [pytest.mark.ansible]

PLAY = """\
- name: gpu_facts arguments
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: A timeout that is not a number
      gpufleet.gpu.gpu_facts:
        timeout: soon
      register: bad_type
      ignore_errors: true
    - name: A misspelt option
      gpufleet.gpu.gpu_facts:
        timout: 5
      register: unknown
      ignore_errors: true
    - name: A number given as a string, converted as the spec says
      gpufleet.gpu.gpu_facts:
        timeout: "20"
      register: good
    - name: Keep the results
      ansible.builtin.copy:
        content: "{{ {'bad_type': bad_type, 'unknown': unknown, 'good': good} | to_json }}"
        dest: "{{ out }}"
        mode: "0600"
"""


def test_gpu_facts_validates_its_arguments_with_the_documented_spec(tmp_path: Path) -> None:
    play, out = tmp_path / "args.yml", tmp_path / "results.json"
    play.write_text(PLAY)
    proc = subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), "-i", "localhost,", str(play),
         "-e", f"out={out}", "-e", f"ansible_python_interpreter={sys.executable}"],
        cwd=REPO, env=ansible_env(), text=True, capture_output=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    res = json.loads(out.read_text())
    assert res["bad_type"]["failed"], res["bad_type"]
    assert "unable to convert to float" in res["bad_type"]["msg"], res["bad_type"]
    assert res["unknown"]["failed"], res["unknown"]
    assert res["unknown"]["msg"] == "Invalid options for gpufleet.gpu.gpu_facts: timout"
    assert not res["good"].get("failed"), res["good"]
    assert "gpus" in res["good"]["ansible_facts"]["gpufleet"], res["good"]
