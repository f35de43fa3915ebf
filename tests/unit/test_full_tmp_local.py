"""A full /tmp on this machine, without a daemon (issue 22): a real 64 KiB tmpfs filled to the
last byte, in a mount namespace of its own (`unshare --mount`, as the sshd fleet does), with the
real probe.sh and the smoke's real preflight script run in it.

tests/fleet/test_full_tmp.py runs the same case end to end over SSH.
"""

from __future__ import annotations

import importlib
import shlex
import subprocess

from gpufleet.model import HostSpec
from gpufleet.probes.collect import parse_probe_output
from gpufleet.smoke import runner
from gpufleet.smoke.hostrun import HostRun
from gpufleet.transport.local import LocalTransport

collect = importlib.import_module("gpufleet.probes.collect")

FULL_TMP = ("mount -t tmpfs -o size=64k,mode=1777 gpufleet-full-tmp /tmp && "
            "{ dd if=/dev/zero of=/tmp/.fill bs=4096 2>/dev/null || true; } && ")


def _in_full_tmp(script: str, *args: str, stdin: str | None = None,
                 ) -> subprocess.CompletedProcess[str]:
    line = FULL_TMP + "exec sh -c " + shlex.quote(script) + " sh " + shlex.join(args)
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", line],
                          input=stdin, capture_output=True, text=True, timeout=60, check=False)


def test_probe_on_a_full_tmp_keeps_the_facts_and_says_where() -> None:
    probe = _in_full_tmp('exec sh -s -- "$@"', "tool_timeout=5", stdin=collect.probe_script())
    assert probe.returncode == 0, probe.stderr
    facts = parse_probe_output(probe.stdout)
    assert facts.tmpdir is not None and facts.tmpdir.path == "/tmp"
    assert facts.tmpdir.free_bytes == 0 and not facts.tmpdir.writable
    assert facts.tmpdir.fallback == "/dev/shm"
    # ef054d5: os and kernel "not collected" (cat/uname exited 1: their output had nowhere to go)
    assert facts.os.kernel and facts.os.id, facts.errors
    assert "os" not in facts.errors and "kernel" not in facts.errors


def test_probe_with_nowhere_to_write_stops_with_a_sentence() -> None:
    script = ("mount -t tmpfs -o size=4k,mode=1777 gpufleet-full-shm /dev/shm && "
              "dd if=/dev/zero of=/dev/shm/.fill bs=4096 2>/dev/null; "
              'HOME=/tmp exec sh -s -- "$@"')
    probe = _in_full_tmp(script, "tool_timeout=5", stdin=collect.probe_script())
    assert probe.returncode == 92, (probe.returncode, probe.stderr)
    assert "no space for temporary files: /tmp has 0 KiB free (No space left on device)" \
        in probe.stderr
    assert "==gpufleet== os" not in probe.stdout  # no section from a tool that could not write


def test_smoke_preflight_on_a_full_tmp_says_enospc_and_where() -> None:
    pre = _in_full_tmp(runner._PREFLIGHT, "gfsmoke-test")
    assert pre.returncode == 0, pre.stderr
    spec = HostSpec(name="full1", address="localhost", connection="local")
    h = HostRun(spec, LocalTransport(spec), None, "gfsmoke-test")
    sec = runner._sections(pre.stdout)
    h.run_dir = sec["rundir"]
    assert runner._no_room(h, sec["rundir_space"])
    assert h.error is not None and h.error.startswith(
        f"cannot upload the smoke bundle to {h.run_dir} on full1: no space left on device "
        "(ENOSPC): /tmp has 0 B free, the smoke needs ~")
    # and a roomy /tmp is not refused
    roomy = subprocess.run(["sh", "-c", runner._PREFLIGHT, "sh", "gfsmoke-test"],
                           capture_output=True, text=True, timeout=30, check=True)
    sec = runner._sections(roomy.stdout)
    subprocess.run(["rm", "-rf", sec["rundir"]], check=True)
    h.error = None
    assert not runner._no_room(h, sec["rundir_space"]) and h.error is None
