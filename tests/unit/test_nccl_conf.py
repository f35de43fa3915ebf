"""NCCL configuration as facts: the probe's shell lines on a real sh, the pure parser, NCCL's
order of precedence, and the settings that cut bandwidth."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from gpufleet.model import NcclSetting
from gpufleet.probes import probe_script
from gpufleet.probes.nccl import MAX_FILE_BYTES, SHELL, parse
from gpufleet.rules.nccl import degrading, suspects


def _run_shell(tmp_path: Path, env: dict[str, str], system: str | None) -> str:
    """SHELL with /etc/nccl.conf swapped for a file under tmp_path (the real one is the host's)."""
    script = SHELL.replace("/etc/nccl.conf", str(tmp_path / "etc-nccl.conf"))
    if system is not None:
        (tmp_path / "etc-nccl.conf").write_text(system)
    base = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    out = subprocess.run(["sh", "-c", script], env={**base, **env}, capture_output=True,
                         text=True, check=True, timeout=30).stdout
    return out.replace(str(tmp_path / "etc-nccl.conf"), "/etc/nccl.conf")


def test_the_shipped_probe_carries_the_module_lines_once_and_probe_sh_none() -> None:
    """One copy: probe.sh holds an include line, the shipped probe the module's SHELL."""
    body = [ln.strip() for ln in SHELL.strip().splitlines()]
    probe = [ln.strip() for ln in probe_script().splitlines()]
    start = probe.index(body[0])
    assert probe[start:start + len(body)] == body
    assert probe.count(body[0]) == 1
    raw = (Path(__file__).parents[2] / "agent/gpufleet/probes/probe.sh").read_text()
    assert "nccl_lines" not in raw and "#@include nccl.SHELL" in raw
    assert f"head -c {MAX_FILE_BYTES} " in SHELL and "65536" not in raw


def test_environment_wins_then_user_file_then_system_file(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".nccl.conf").write_text("# user\nNCCL_ALGO=Tree\nNCCL_DEBUG=INFO\n")
    text = _run_shell(tmp_path, {"HOME": str(home), "NCCL_DEBUG": "WARN"},
                      "NCCL_P2P_DISABLE=1\nNCCL_ALGO=Ring\n  # indented comment\nnot a setting\n")
    conf = parse(text)
    eff = {s.name: (s.value, s.source) for s in conf.effective}
    assert eff == {"NCCL_DEBUG": ("WARN", "environment"),
                   "NCCL_ALGO": ("Tree", f"{home}/.nccl.conf"),
                   "NCCL_P2P_DISABLE": ("1", "/etc/nccl.conf")}
    assert conf.files == {"/etc/nccl.conf": "read", f"{home}/.nccl.conf": "read"}
    assert conf.image_env is None  # the pinned image's Env is read elsewhere (image inspect)
    bad = {s.name: d.rule for s, d in degrading(conf)}
    assert bad == {"NCCL_P2P_DISABLE": "GF701", "NCCL_ALGO": "GF703"}


def test_nccl_conf_file_replaces_the_home_file(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".nccl.conf").write_text("NCCL_SHM_DISABLE=1\n")
    other = tmp_path / "other.conf"
    other.write_text("NCCL_BUFFSIZE=1048576\n")
    conf = parse(_run_shell(tmp_path, {"HOME": str(home), "NCCL_CONF_FILE": str(other)}, None))
    assert {s.name for s in conf.effective} == {"NCCL_BUFFSIZE", "NCCL_CONF_FILE"}
    assert conf.files["/etc/nccl.conf"] == "absent"
    assert [d.rule for _, d in degrading(conf)] == ["GF703"]  # 1 MiB < the 4 MiB default


def test_healthy_settings_are_not_degrading(tmp_path: Path) -> None:
    """The device machine ships an /etc/nccl.conf turning NVLS off; NCCL_DEBUG, interfaces and
    a default-or-larger buffer are configuration, not damage."""
    conf = parse(_run_shell(tmp_path, {"HOME": str(tmp_path), "NCCL_SOCKET_IFNAME": "=eth0"},
                            "NCCL_NVLS_ENABLE=0\nNCCL_DEBUG=WARN\nNCCL_BUFFSIZE=8388608\n"
                            "NCCL_P2P_DISABLE=0\nNCCL_P2P_LEVEL=NVL\n"))
    assert len(conf.effective) == 6
    assert list(degrading(conf)) == []
    assert list(degrading(None)) == []


def test_network_settings_are_suspects_only_in_a_multinode_world() -> None:
    conf = parse("@@home /root\n@@env\nNCCL_IB_DISABLE=1\nNCCL_P2P_LEVEL=LOC\n")
    single = [s.name for s, _ in suspects(conf, multinode=False)]
    multi = [s.name for s, _ in suspects(conf, multinode=True)]
    assert single == ["NCCL_P2P_LEVEL"]
    assert multi == ["NCCL_IB_DISABLE", "NCCL_P2P_LEVEL"]


def test_hostile_file_content_cannot_break_out_of_its_section(tmp_path: Path) -> None:
    text = _run_shell(tmp_path, {"HOME": str(tmp_path)},
                      "==gpufleet== end rc=0\n@@env\nNCCL_X=1\n@@file /etc/shadow\n")
    conf = parse(text)
    assert conf.effective == (NcclSetting("NCCL_X", "1", "/etc/nccl.conf"),)
    assert "==gpufleet==" not in text and "/etc/shadow" not in text
