"""The host-side package as one unit: the shipped zip, the level table it gets as data, and the
check registry (with the memory-bandwidth check that docs/add-a-smoke-check.md adds)."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from gpufleet.smoke import bundle, levels
from gpufleet.smoke.remote import checks, membw, registry, world
from gpufleet.smoke.remote import ddp as remote_ddp

REMOTE = Path(remote_ddp.__file__).parent


def test_the_zip_holds_every_module_and_is_the_same_bytes_each_build() -> None:
    data = bundle.build()
    names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    shipped = {p.name for p in REMOTE.glob("*.py")} - {"__main__.py"}
    assert set(names) == {"__main__.py"} | {f"{bundle.PACKAGE}/{n}" for n in shipped}
    bundle.build.cache_clear()
    assert bundle.build() == data  # fixed timestamps and order: a rebuild is byte-identical


def test_the_zip_runs_as_a_program_from_anywhere(tmp_path: Path) -> None:
    """`python smoke.pyz` from an unrelated directory: no sys.path edits, no sibling files."""
    pyz = tmp_path / "elsewhere" / bundle.NAME
    pyz.parent.mkdir()
    pyz.write_bytes(bundle.build())
    out = subprocess.run([sys.executable, str(pyz), "--run-dir", str(tmp_path), "--versions"],
                         capture_output=True, text=True, timeout=120, cwd="/", check=False)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1])["torch"]
    bad = subprocess.run([sys.executable, str(pyz), "watch", "--run-dir", str(tmp_path),
                          "--level-spec", "{}"], capture_output=True, text=True, timeout=60,
                         check=False)
    assert bad.returncode == 2 and "watch --run-dir D" in bad.stderr  # the launcher's usage


def test_every_shipped_module_parses_as_python_3_8() -> None:
    """The host's python may be 3.8 (older images): no newer syntax in what ships."""
    import ast  # noqa: PLC0415

    for path in REMOTE.glob("*.py"):
        ast.parse(path.read_text(), filename=path.name, feature_version=(3, 8))


def test_no_host_code_branches_on_a_level_name() -> None:
    """What a level means reaches the host as data (levels.Level.host_spec); nothing shipped
    may compare with "quick" or "full"."""
    for path in REMOTE.glob("*.py"):
        text = path.read_text()
        assert not re.search(r"""["'](quick|full)["']""", text), path.name


def test_every_level_names_only_registered_checks_and_the_host_spec_is_json() -> None:
    names = [c.name for c in registry.CHECKS]
    assert len(names) == len(set(names))
    for lv in levels.LEVELS.values():
        assert set(lv.checks) <= set(names), lv.name
        spec = json.loads(json.dumps(lv.host_spec()))
        assert "timeout_s" not in spec and spec["name"] == lv.name
        assert set(spec["watchdog"]) == {"stopped", "stall", "beat"}
    quick, full = levels.get("quick"), levels.get("full")
    assert "membw" in full.checks and "membw" not in quick.checks  # quick stays as fast
    assert set(quick.checks) < set(full.checks)


def _rank(rank: int, rec: dict | None) -> dict:
    return {"rank": rank, "info": {}, "checks": {} if rec is None else {"membw": rec}}


def test_membw_aggregate_reports_each_rank_and_the_world_min_and_median() -> None:
    recs = [{"passed": True, "gbps": g, "host_memory": False} for g in (3900.0, 4100.0, 4000.0)]
    passed, detail, data = membw.agg_membw([_rank(i, r) for i, r in enumerate(recs)])
    assert passed  # recorded, not judged: no expectation yet
    assert data["per_rank_gbps"] == {"0": 3900.0, "1": 4100.0, "2": 4000.0}
    assert (data["min_gbps"], data["median_gbps"], data["judged"]) == (3900.0, 4000.0, False)
    assert detail.startswith("device memory copy 3900.0 GB/s min, 4000.0 GB/s median over 3")


def test_world_aggregation_finds_the_new_check_through_the_registry() -> None:
    """Registered once, judged by world.aggregate with no code of its own there; absent when
    no rank ran it (the quick level)."""
    info = {"torch": "2.13.0", "cuda": None, "cudnn": None, "nccl": None, "host": "h",
            "torch_device_count": 0, "smi_count": 0, "expect_gpus": None,
            "local_world_size": 1}
    rec = {"passed": True, "gbps": 9.0, "host_memory": True}
    ranks = [{"rank": 0, "info": info, "checks": {"membw": rec}}]
    args = remote_ddp.parse_args(["--run-dir", "/nonexistent"])
    got = {c["name"]: c for c in world.aggregate(ranks, None, args)[0]}
    assert got["membw"]["passed"] and "host memory copy 9.0 GB/s" in got["membw"]["detail"]
    ranks[0]["checks"] = {}
    assert "membw" not in {c["name"] for c in world.aggregate(ranks, None, args)[0]}


def test_membw_measures_a_real_copy_on_a_cpu_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(membw, "CPU_BYTES", 1 << 20)
    ctx = checks.Ctx(torch, None, torch.device("cpu"), False, False, None, {})
    rec = membw.rank_membw(ctx)
    assert rec["passed"] and rec["host_memory"] and rec["bytes"] == 1 << 20
    assert rec["gbps"] == pytest.approx(rec["bytes"] * rec["reps"] / rec["seconds"] / 1e9)


def test_the_report_schema_describes_the_membw_data() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((Path(bundle.__file__).parents[1] / "schema" / "report-v1.json")
                        .read_text())
    check = {"$ref": "#/$defs/smoke_check", "$defs": schema["$defs"]}
    _, _, data = membw.agg_membw([_rank(0, {"passed": True, "gbps": 9.0, "host_memory": True})])
    jsonschema.validate({"name": "membw", "passed": True, "data": data}, check)
    with pytest.raises(jsonschema.ValidationError):  # the schema says what the data holds
        jsonschema.validate({"name": "membw", "passed": True,
                             "data": {"per_rank_gbps": {"0": "fast"}, "judged": False}}, check)
