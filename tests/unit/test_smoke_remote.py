"""The host-side package as one unit: the shipped zip, the level table it gets as data, and the
check registry."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

from gpufleet.smoke import bundle, levels
from gpufleet.smoke.remote import ddp as remote_ddp
from gpufleet.smoke.remote import registry

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
    assert set(quick.checks) < set(full.checks)
