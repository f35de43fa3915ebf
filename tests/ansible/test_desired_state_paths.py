"""The desired state through the Ansible side, run on the controller (localhost, no daemons):
the healthcheck role renders every desired-state variable and no workspace token, and the
gpu_facts action passes pytorch_workspaces on (without tokens) so ansible-report fires GF808."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import VENV_BIN, ansible_env, run_playbook
from gpufleet.inventory import desired, load_expectations, node_spec

pytestmark = [pytest.mark.ansible]

REPO = Path(__file__).resolve().parents[2]
TOKEN = "tok-" + "s3cret" * 6
OWN = "sha256:" + "a" * 64
VARIABLES = {
    "pytorch_image": "reg/pt:1", "pytorch_image_digest": "sha256:" + "b" * 64,
    "gpufleet_domain": "rack7", "gpufleet_slurm_node": "gpu-a17",
    "gpufleet_multinode_min_busbw_gbps": 40.5,
    "pytorch_workspaces": [{"name": "lab", "user": "alice", "uid": 2001, "jupyter_port": 28101,
                            "jupyter_token": TOKEN, "ssh_authorized_keys": ["ssh-ed25519 A a"],
                            "image_digest": OWN}],
}  # fmt: skip


def test_healthcheck_expect_file_has_every_variable_and_no_token(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"all": {"hosts": {"n1": {
        "ansible_connection": "local", "render_root": str(tmp_path), **VARIABLES}}}}))
    res = run_playbook(REPO / "tests/ansible/playbooks/render_healthcheck.yml", inventory,
                       tmp_path, "render-healthcheck")
    assert res.rc == 0, res.tail()
    assert TOKEN not in res.output  # no_log on the task that reads the tokens
    text = (tmp_path / "etc" / "expect.yml").read_text()
    assert TOKEN not in text and "jupyter_token" not in text
    rendered = yaml.safe_load(text)
    assert rendered["pytorch_workspaces"] == [{"name": "lab", "image_digest": OWN}]
    assert set(rendered) == set(VARIABLES) <= desired.NAMES
    expect = node_spec("n1", load_expectations(tmp_path / "etc" / "expect.yml")).expect
    assert expect.workspaces == {"lab": OWN} and expect.domain == "rack7"
    assert expect.slurm_node == "gpu-a17" and expect.multinode_min_busbw_gbps == 40.5


def test_gpu_facts_passes_workspaces_on_and_ansible_report_fires_gf808(tmp_path: Path) -> None:
    """Failed on main: the action's own allow-list dropped pytorch_workspaces."""
    extra = tmp_path / "vars.json"
    extra.write_text(json.dumps(VARIABLES))
    tree = tmp_path / "tree"
    adhoc = subprocess.run(
        [str(VENV_BIN / "ansible"), "-i", "localhost,", "localhost", "-c", "local",
         "-e", f"ansible_python_interpreter={VENV_BIN / 'python'}", "-e", f"@{extra}",
         "-m", "gpufleet.gpu.gpu_facts", "-t", str(tree)],
        cwd=REPO, env=ansible_env(), capture_output=True, text=True, timeout=180, check=False)
    assert adhoc.returncode == 0, adhoc.stdout[-3000:] + adhoc.stderr[-3000:]
    result = (tree / "localhost").read_text()
    assert TOKEN not in result and TOKEN not in adhoc.stdout
    assert json.loads(result)["gpufleet_expect"]["pytorch_workspaces"] == [
        {"name": "lab", "image_digest": OWN}]
    report = subprocess.run([str(VENV_BIN / "gpufleet"), "ansible-report", str(tree),
                             "--format", "json"], capture_output=True, text=True, timeout=60,
                            check=False)
    findings = json.loads(report.stdout)["findings"]
    assert [f["evidence"]["workspace"] for f in findings if f["rule"] == "GF808"] == ["lab"]
