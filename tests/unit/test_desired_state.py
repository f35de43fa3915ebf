"""The desired-state variables are declared once (inventory/desired.py): the inventory loader, the
expectations file, the healthcheck role and the roles' argument_specs all agree with the table,
and the workspace expectations reach the rules through node-check's file and ansible-report."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.cli import main
from gpufleet.inventory import ExpectError, desired, load_expectations, node_spec
from gpufleet.model import ContainerInfo, Expectations, Facts, HostResult, Report, to_jsonable
from gpufleet.rules import evaluate
from paths import COLLECTION

REPO = Path(__file__).resolve().parents[2]
OWN = "sha256:" + "a" * 64  # the workspace's own image_digest
PINNED = "sha256:" + "b" * 64  # pytorch_image_digest
TOKEN = "tok-" + "s3cret" * 6
WORKSPACE = {"name": "lab", "user": "alice", "uid": 2001, "jupyter_port": 28101,
             "jupyter_token": TOKEN, "ssh_authorized_keys": ["ssh-ed25519 AAAA alice"],
             "image_digest": OWN}  # fmt: skip
# argument_specs type of each kind
SPEC_TYPE = {"text": "str", "int": "int", "number": "float", "flag": "bool", "workspaces": "list"}


def test_every_expectations_field_has_exactly_one_variable() -> None:
    fields = [f.name for f in dataclasses.fields(Expectations)]
    assert sorted(v.field for v in desired.VARS) == sorted(fields)
    # 14 the old allow-lists had, + 4, + 3 Xid escalation limits (issue 26), + 2 RDMA counter
    # thresholds and 1 BER threshold (issue 27), + gpufleet_perf_floors (issue 25), + 1 Xid 74
    # per-link limit (issue 26), + 1 remediation limit (issue 26)
    assert len(desired.NAMES) == len(desired.VARS) == 27


def test_healthcheck_role_lists_the_table() -> None:
    """YAML cannot import the table: the role's copy must equal it, names and order."""
    role = yaml.safe_load((COLLECTION / "roles/gpufleet_healthcheck/vars/main.yml").read_text())
    assert role["_gpufleet_healthcheck_expect_keys"] == [v.name for v in desired.VARS]
    assert tuple(role["_gpufleet_healthcheck_workspace_keys"]) == desired.WORKSPACE_KEYS


@pytest.mark.parametrize("spec", sorted((COLLECTION / "roles").glob("*/meta/argument_specs.yml")),
                         ids=lambda p: p.parts[-3])
def test_argument_specs_declare_what_the_scope_says(spec: Path) -> None:
    role = spec.parts[-3]
    options = yaml.safe_load(spec.read_text())["argument_specs"]["main"]["options"]
    declared = {name: o for name, o in options.items() if name in desired.NAMES}
    assert set(declared) == {v.name for v in desired.VARS if role in v.scope}, role
    for v in desired.VARS:
        if v.name in declared:
            assert declared[v.name]["type"] == SPEC_TYPE[v.kind], (role, v.name)


def test_every_scope_role_exists() -> None:
    roles = {p.name for p in (COLLECTION / "roles").iterdir() if p.is_dir()}
    assert {r for v in desired.VARS for r in v.scope} - {desired.AGENT} <= roles


def test_the_expectations_file_takes_every_variable(tmp_path: Path) -> None:
    values: dict[str, Any] = {"text": "x", "int": 3, "number": 2.5, "flag": True,
                              "workspaces": [WORKSPACE],
                              "floors": {"hbm_gbps": 1900.0}}  # fmt: skip
    path = tmp_path / "expect.yml"
    path.write_text(yaml.safe_dump({v.name: values[v.kind] for v in desired.VARS}))
    expect = node_spec("n1", load_expectations(path)).expect
    for v in desired.VARS:
        want = {"lab": OWN} if v.kind == "workspaces" else values[v.kind]
        assert getattr(expect, v.field) == want, v.name


def test_unknown_variable_is_named(tmp_path: Path) -> None:
    path = tmp_path / "expect.yml"
    path.write_text("pytorch_workspace: []\n")
    with pytest.raises(ExpectError, match=r"unknown variable\(s\) pytorch_workspace \(known:"):
        load_expectations(path)


def test_carried_keeps_no_token() -> None:
    out = desired.carried("pytorch_workspaces", [WORKSPACE, {**WORKSPACE, "state": "absent"}])
    assert out == [{"name": "lab", "image_digest": OWN},
                   {"name": "lab", "state": "absent", "image_digest": OWN}]
    assert TOKEN not in json.dumps(out)
    assert desired.carried("pytorch_image_digest", PINNED) == PINNED


def _workspace(digest: str) -> ContainerInfo:
    return ContainerInfo(id="c" * 12, name="gpufleet-ws-lab", image=f"reg/pt@{digest}",
                         image_digest=digest, workspace="lab", user="alice", uid=2001,
                         memory_bytes=1 << 30, jupyter_status=403, ssh_password_auth=False)


def _gf8(variables: dict[str, Any], *containers: ContainerInfo) -> dict[str, dict[str, Any]]:
    spec = node_spec("n1", variables)
    facts = Facts(containers=containers)
    report = Report(hosts={"n1": HostResult("n1", "ok", facts=facts)}, specs={"n1": spec})
    return {f.rule: dict(f.evidence) for f in evaluate(report) if f.rule.startswith("GF8")}


def test_node_check_file_judges_a_workspace_against_its_own_digest(tmp_path: Path) -> None:
    """Failed on main: the expectations file refused pytorch_workspaces (unknown variable)."""
    path = tmp_path / "expect.yml"
    path.write_text(yaml.safe_dump({"pytorch_image_digest": PINNED,
                                    "pytorch_workspaces": [WORKSPACE]}))
    variables = load_expectations(path)
    assert _gf8(variables, _workspace(OWN)) == {}  # its own digest, not the pin, is right
    found = _gf8(variables, _workspace(PINNED))
    assert found["GF801"]["expected"] == OWN and set(found) == {"GF801"}
    assert set(_gf8(variables)) == {"GF808"}  # declared, not running


def _results(tmp_path: Path, expect: dict[str, Any], *containers: ContainerInfo) -> Path:
    path = tmp_path / "results.json"
    facts = to_jsonable(Facts(containers=containers))
    path.write_text(json.dumps({"n1": {"ansible_facts": {"gpufleet": facts},
                                       "gpufleet_expect": expect}}))
    return path


def _ansible_report(path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    with pytest.raises(SystemExit):
        main(["ansible-report", str(path), "--format", "json"])
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def test_ansible_report_judges_a_workspace_against_its_own_digest(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    expect = {"pytorch_image_digest": PINNED,
              "pytorch_workspaces": desired.carried("pytorch_workspaces", [WORKSPACE])}
    own = _ansible_report(_results(tmp_path, expect, _workspace(OWN)), capsys)
    assert not [f for f in own["findings"] if f["rule"].startswith("GF8")]
    pinned = _ansible_report(_results(tmp_path, expect, _workspace(PINNED)), capsys)
    (gf801,) = [f for f in pinned["findings"] if f["rule"] == "GF801"]
    assert gf801["evidence"]["expected"] == OWN
    missing = _ansible_report(_results(tmp_path, expect), capsys)
    assert [f["rule"] for f in missing["findings"] if f["rule"].startswith("GF8")] == ["GF808"]


def test_docs_table_is_the_table() -> None:
    """docs/desired-state.md lists every variable as the table declares it."""
    text = (REPO / "docs/desired-state.md").read_text()
    for v in desired.VARS:
        row = f"| `{v.name}` | `{v.field}` | {v.kind} | {', '.join(v.scope)} | {v.doc} |"
        assert row in text, v.name


def test_known_vars_json_is_what_the_roles_and_playbooks_declare() -> None:
    """The agent ships without the collection: its copy of the names and choices must be current
    (python scripts/known_vars.py rewrites it)."""
    r = subprocess.run([sys.executable, str(COLLECTION.parents[2] / "scripts/known_vars.py"),
                        "--check"], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
