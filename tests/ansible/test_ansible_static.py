"""Static checks of the gpufleet.gpu collection: ansible-lint (production profile), syntax checks,
and a built collection that installs and runs by FQCN from outside this checkout."""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

import pytest

from conftest import REPO, VENV_BIN, ansible_env, run_playbook
from paths import COLLECTION

pytestmark = [pytest.mark.ansible]

PLAYBOOKS = ["playbooks/site.yml", "playbooks/upgrade_driver.yml", "playbooks/verify.yml",
             "playbooks/verify_fanout.yml"]


@pytest.mark.slow
def test_ansible_lint_production_profile_is_clean() -> None:
    proc = subprocess.run(
        [str(VENV_BIN / "ansible-lint"), "--profile", "production", "--offline", "--nocolor"],
        cwd=REPO,
        env=ansible_env(),
        text=True,
        capture_output=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-6000:]


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_playbook_syntax(playbook: str) -> None:
    proc = subprocess.run(
        [
            str(VENV_BIN / "ansible-playbook"),
            "--syntax-check",
            "-i",
            "inventory.example/hosts.yml",
            str(COLLECTION / playbook),
        ],
        cwd=REPO,
        env=ansible_env(),
        text=True,
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


FQCN_PLAY = """\
- name: Use the installed collection by FQCN
  hosts: localhost
  connection: local
  gather_facts: true
  gather_subset: [min]
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
  tasks:
    - name: The toolkit role refuses a version below the floor
      ansible.builtin.include_role:
        name: gpufleet.gpu.nvidia_container_toolkit
      vars:
        nvidia_container_toolkit_version: "1.17.8"
"""


@pytest.mark.slow
def test_built_collection_installs_and_runs_by_fqcn(tmp_path: Path) -> None:
    env = ansible_env(config=None)
    build = subprocess.run(
        [
            str(VENV_BIN / "ansible-galaxy"),
            "collection",
            "build",
            str(COLLECTION),
            "--output-path",
            str(tmp_path),
        ],
        cwd=tmp_path,
        env=env,
        text=True,
        capture_output=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    artifact = tmp_path / "gpufleet-gpu-0.1.0.tar.gz"
    with tarfile.open(artifact) as tf:
        names = set(tf.getnames())
    for must in (
        "MANIFEST.json",
        "meta/runtime.yml",
        "roles/nvidia_driver/meta/argument_specs.yml",
        "playbooks/site.yml",
    ):
        assert must in names, f"{must} missing from the artifact"
    # The collection directory holds nothing else (the agent and its tests live outside it).
    tops = {n.split("/")[0] for n in names} | {"/".join(n.split("/")[:2]) for n in names
                                             if n.startswith("tests/")}
    assert tops <= {"MANIFEST.json", "FILES.json", "README.md", "CHANGELOG.md", "meta", "roles",
                    "playbooks", "plugins", "tests", "tests/sanity"}, sorted(tops)

    collections = tmp_path / "collections"
    install = subprocess.run(
        [
            str(VENV_BIN / "ansible-galaxy"),
            "collection",
            "install",
            str(artifact),
            "-p",
            str(collections),
        ],
        cwd=tmp_path,
        env=env,
        text=True,
        capture_output=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    env["ANSIBLE_COLLECTIONS_PATH"] = str(collections)

    # Each plugin's documentation renders from the installed artifact (what Galaxy shows).
    for kind, name, must in (
        ("role", "gpufleet.gpu.nvidia_driver", "nvidia_driver_kernel_modules"),
        ("module", "gpufleet.gpu.gpu_facts", "Seconds for the probe"),
        ("module", "gpufleet.gpu.apt_source_present", "Repository URI"),
        ("callback", "gpufleet.gpu.gpufleet_report", "GPUFLEET_REPORT_FORMAT"),
        ("filter", "gpufleet.gpu.pytorch_workspace_plan", "docker create"),
        ("filter", "gpufleet.gpu.pytorch_workspace_actions", "NAME|WORKSPACE|CONFIG|STATE"),
    ):
        doc = subprocess.run(
            [str(VENV_BIN / "ansible-doc"), "-t", kind, name],
            cwd=tmp_path,
            env=env,
            text=True,
            capture_output=True,
            timeout=120,
        )
        assert doc.returncode == 0 and must in doc.stdout, (name, doc.stdout + doc.stderr)
        assert str(COLLECTION) not in doc.stdout, f"{name} documented from the checkout"

    play = tmp_path / "fqcn.yml"
    play.write_text(FQCN_PLAY)
    (tmp_path / "logs").mkdir()
    res = run_playbook(play, Path("localhost,"), tmp_path / "logs", "fqcn", env=env, cwd=tmp_path)
    assert res.rc != 0, res.tail()
    refused = "Refused: NVIDIA Container Toolkit 1.17.8 is below the security floor"
    assert refused in res.flat, res.tail()
