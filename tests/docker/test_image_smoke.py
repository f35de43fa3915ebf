"""The smoke test inside the pinned image, over SSH, on the real engine.

`gpufleet_smoke_runtime: docker` on the target: `docker run` of repository@digest with torchrun
(CPU host: no --gpus; gloo), one host and a two-host world (host network, c10d). A rank made to
hang is named in the verdict and its container is gone afterwards; so is the container of a run
interrupted with Ctrl-C.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from dockerlib import DockerLab
from imagetarget import HOSTS, ImageTarget, PlayResult

from conftest import report_json

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SMOKE_LABEL = "gpufleet.smoke"


@pytest.fixture
def engine(converged: PlayResult, docker_lab: DockerLab) -> DockerLab:
    """The converged target's engine with the pinned image; no smoke container before a test."""
    assert converged.rc == 0, f"converge failed; see test_image_roles.py\n{converged.tail()}"
    docker_lab.pull_test_image()
    assert docker_lab.containers(SMOKE_LABEL) == []
    return docker_lab


def _started_containers(lab: DockerLab, since: float) -> list[dict[str, Any]]:
    """`docker events`: containers started with the smoke label since then (the real record)."""
    out = lab.docker("events", "--since", f"{since:.3f}", "--until", f"{time.time():.3f}",
                     "--filter", "event=start", "--filter", f"label={SMOKE_LABEL}",
                     "--format", "{{json .}}").stdout  # fmt: skip
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def _passed(smoke: dict[str, Any]) -> None:
    failed = [c for c in smoke["checks"] if not c["passed"]]
    assert smoke["status"] == "pass", (smoke["error"], failed, smoke["log_tail"])


def test_smoke_runs_in_the_pinned_image_over_ssh(image_target: ImageTarget,
                                                 engine: DockerLab) -> None:
    t0 = time.time()
    proc = image_target.cli("smoke", "-l", HOSTS[0], "--format", "json")
    smoke = report_json(proc)["hosts"][HOSTS[0]]["smoke"]  # type: ignore[index]
    _passed(smoke)
    assert smoke["backend"] == "gloo" and smoke["world_size"] == 2
    assert all(r["torch"] == "2.13.0+cpu" and r["device"] == "cpu" for r in smoke["ranks"])
    started = _started_containers(engine, t0)
    images = {e["Actor"]["Attributes"]["image"] for e in started}
    assert images == {engine.ref.rsplit(":", 1)[0] + ":2.13.0@" + engine.digest}, started
    assert engine.containers(SMOKE_LABEL) == []
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_multinode_world_of_two_containers(image_target: ImageTarget, engine: DockerLab) -> None:
    t0 = time.time()
    proc = image_target.cli("smoke", "--multinode", "--format", "json")
    report = report_json(proc)
    for name in HOSTS:
        smoke = report["hosts"][name]["smoke"]  # type: ignore[index]
        _passed(smoke)
        assert smoke["world_size"] == 4 and smoke["hosts"] == list(HOSTS)
        assert sorted({r["host"] for r in smoke["ranks"]}) == sorted(HOSTS)
    names = [e["Actor"]["Attributes"]["name"] for e in _started_containers(engine, t0)]
    runs = sorted(n for n in names if n.endswith(tuple(f"-{h}" for h in HOSTS)))
    # one torchrun container per host, named <run id>-<host>, both of the same run
    assert len(runs) == 2 and runs[0].rsplit("-img-", 1)[0] == runs[1].rsplit("-img-", 1)[0], names
    assert engine.containers(SMOKE_LABEL) == []
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_hung_rank_in_the_container_is_named_and_its_container_removed(
    image_target: ImageTarget, engine: DockerLab
) -> None:
    t = time.monotonic()
    proc = image_target.cli("smoke", "-l", HOSTS[0], "--format", "json", "--smoke-timeout", "300",
                            env={"GPUFLEET_SMOKE_TEST_HANG": "1", "GPUFLEET_SMOKE_PG_TIMEOUT": "5"})
    smoke = report_json(proc)["hosts"][HOSTS[0]]["smoke"]  # type: ignore[index]
    assert smoke["status"] == "timeout", smoke
    assert smoke["hung_ranks"] == [1]
    assert "rank(s) 1 hung (before collective" in smoke["error"]
    assert time.monotonic() - t < 300  # the process-group timeout, not the run's
    assert engine.containers(SMOKE_LABEL) == []  # `docker ps -a` empty of our label
    assert proc.returncode == 1


def test_ctrl_c_during_a_container_run_leaves_no_container(
    image_target: ImageTarget, engine: DockerLab
) -> None:
    cmd = [sys.executable, "-m", "gpufleet", "smoke", "-i", str(image_target.inventory),
           "-l", HOSTS[0], "--format", "json", "--smoke-timeout", "600"]  # fmt: skip
    # The run must still be going when Ctrl-C comes: the launcher's stall watchdog (15 s at
    # quick) would otherwise end the hung world first.
    env = {**image_target.cli_env(), "GPUFLEET_SMOKE_TEST_HANG": "1",
           "GPUFLEET_SMOKE_PG_TIMEOUT": "300", "GPUFLEET_SMOKE_WATCHDOG_STALL": "600"}  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, cwd=image_target.logdir, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while not (run_id := _torchrun_container(engine)):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no smoke container appeared"
            time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    # The CLI's cleanup or, when Ctrl-C cut it short, the run's reaper removes the container.
    deadline = time.monotonic() + 15
    while (left := engine.docker("ps", "-a", "--filter", f"label={SMOKE_LABEL}", "--format",
                                 "{{.Names}} {{.Status}} {{.Command}}").stdout):  # fmt: skip
        assert time.monotonic() < deadline, f"{left}\nCLI stderr:\n{err[-3000:]}"
        time.sleep(0.5)
    assert _marked(f"GPUFLEET_SMOKE_RUN={run_id}") == []  # no rank of that run survived


def _torchrun_container(lab: DockerLab) -> str:
    """The run id of a running torchrun container of a smoke run, or ""."""
    out = lab.docker("ps", "--no-trunc", "--filter", f"label={SMOKE_LABEL}", "--format",
                     '{{.Command}} {{.Label "gpufleet.smoke"}}').stdout  # fmt: skip
    runs = [line.split()[-1] for line in out.splitlines() if "torchrun" in line]
    return runs[0] if runs else ""


def _marked(marker: str) -> list[int]:
    """Processes on this machine whose environment carries the marker (containers' too)."""
    found = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and marker.encode() in (d / "environ").read_bytes().split(b"\0"):
                found.append(int(d.name))
        except OSError:
            continue
    return found
