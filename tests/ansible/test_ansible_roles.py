"""Converge a real Debian 12 target over SSH with the collection's roles and prove the result.

The target is a debootstrap chroot running its own sshd on 127.0.0.70-99 (host key verified).
Debian's real non-free driver packages come from Debian's archive, the NVIDIA Container Toolkit
from a signed local apt mirror of stand-in packages (the air-gapped mirror path). No systemd runs
in the chroot, so service tasks must be skipped visibly.
"""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import roletarget as tg
import tomllib

from conftest import RoleLab
from harness.plays import PlayResult
from harness.processes import stop_pid

pytestmark = [pytest.mark.ansible, pytest.mark.slow]

SITE = "playbooks/site.yml"
VERIFY = Path(__file__).parent / "playbooks" / "verify_converged.yml"
USER_DAEMON_JSON = {"registry-mirrors": ["http://127.0.0.1:5000"]}


def _installed(lab: RoleLab, package: str) -> bool:
    out = (
        lab.target.chroot("dpkg-query", "-W", "-f=${db:Status-Abbrev}", package).stdout
        if package in lab.target.chroot("dpkg-query", "-W", "-f=${Package}\n").stdout.split()
        else ""
    )
    return out.startswith("ii")


def test_preflight_refuses_missing_kernel_headers(role_lab: RoleLab) -> None:
    extra = role_lab.converge_vars()
    del extra["nvidia_driver_kernel_headers_required"]  # the default: required
    res = role_lab.play(SITE, "preflight-headers", "--tags", "nvidia_driver", extra_vars=extra)
    assert res.rc != 0 and res.host()["failed"] == 1, res.tail()
    assert "Kernel headers for the running kernel" in res.flat, res.tail()
    assert not _installed(role_lab, "nvidia-smi"), (
        "the preflight failed but packages were installed"
    )


def test_toolkit_below_security_floor_is_refused(role_lab: RoleLab) -> None:
    extra = role_lab.converge_vars() | {"nvidia_container_toolkit_version": "1.17.8"}
    res = role_lab.play(
        SITE, "toolkit-floor", "--tags", "nvidia_container_toolkit", extra_vars=extra
    )
    assert res.rc != 0 and res.host()["failed"] == 1, res.tail()
    assert (
        "Refused: NVIDIA Container Toolkit 1.17.8 is below the security floor 1.19.1" in res.flat
    ), res.tail()
    assert res.host()["changed"] == 0, res.tail()
    assert not _installed(role_lab, "nvidia-container-toolkit")


@pytest.fixture(scope="module")
def converged(role_lab: RoleLab) -> Iterator[PlayResult]:
    # An administrator's own daemon.json key, which the roles must keep.
    docker_dir = role_lab.target.root / "etc/docker"
    docker_dir.mkdir(parents=True, exist_ok=True)
    (docker_dir / "daemon.json").write_text(json.dumps(USER_DAEMON_JSON) + "\n")
    yield role_lab.play(SITE, "converge", extra_vars=role_lab.converge_vars())


def test_converge_succeeds(converged: PlayResult) -> None:
    h = converged.host()
    assert converged.rc == 0 and h["failed"] == 0 and h["unreachable"] == 0, converged.tail()
    assert h["changed"] > 0, converged.tail()


def test_service_tasks_are_skipped_visibly_without_systemd(converged: PlayResult) -> None:
    for marker in (
        "SKIPPED runtime tasks",
        "SKIPPED enabling/starting docker",
        "SKIPPED pull/verify/prune",
    ):
        assert marker in converged.flat, f"missing '{marker}'\n{converged.tail()}"
    assert "service manager is 'systemd'" not in converged.flat


def test_image_cuda_check_passes_for_the_installed_driver(
    converged: PlayResult, role_lab: RoleLab
) -> None:
    expect = f"(CUDA 12.1) runs on driver {role_lab.driver_version} (installed libnvidia-ml"
    assert expect in converged.flat, converged.tail()


def test_second_run_reports_no_change(converged: PlayResult, role_lab: RoleLab) -> None:
    assert converged.rc == 0, "converge failed; see test_converge_succeeds"
    res = role_lab.play(SITE, "idempotence", extra_vars=role_lab.converge_vars())
    assert res.rc == 0 and res.host()["changed"] == 0, res.tail()


def test_check_mode_on_converged_host_reports_no_change(
    converged: PlayResult, role_lab: RoleLab
) -> None:
    assert converged.rc == 0, "converge failed; see test_converge_succeeds"
    res = role_lab.play(
        SITE, "check-mode", "--check", "--diff", extra_vars=role_lab.converge_vars()
    )
    assert res.rc == 0 and res.host()["failed"] == 0, res.tail()
    assert res.host()["changed"] == 0, res.tail()


def test_verify_asserts_real_state(converged: PlayResult, role_lab: RoleLab) -> None:
    assert converged.rc == 0, "converge failed; see test_converge_succeeds"
    res = role_lab.play(
        VERIFY,
        "verify-state",
        extra_vars={
            "verify_driver_version": role_lab.driver_version,
            "verify_toolkit_version": "1.19.1",
            "verify_mirror_url": role_lab.mirror.url,
        },
    )
    assert res.rc == 0 and res.host()["failed"] == 0, res.tail()


def test_daemon_json_merges_and_keeps_existing_keys(
    converged: PlayResult, role_lab: RoleLab
) -> None:
    assert converged.rc == 0, "converge failed; see test_converge_succeeds"
    data = json.loads((role_lab.target.root / "etc/docker/daemon.json").read_text())
    assert data == USER_DAEMON_JSON | {
        "log-driver": "json-file",
        "log-opts": {"max-size": "10m", "max-file": "3"},
        "live-restore": True,
        "runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}},
    }


def test_image_needing_newer_cuda_than_driver_is_refused(
    converged: PlayResult, role_lab: RoleLab
) -> None:
    assert converged.rc == 0, "converge failed; see test_converge_succeeds"
    extra = role_lab.converge_vars() | {
        "pytorch_image": "pytorch/pytorch:2.9.0-cuda13.0-cudnn9-runtime"
    }
    res = role_lab.play(SITE, "image-cuda-refused", "--tags", "pytorch_image", extra_vars=extra)
    assert res.rc != 0 and res.host()["failed"] == 1, res.tail()
    assert "needs CUDA 13.0, which needs driver >= 580.65.06" in res.flat, res.tail()


def test_upgrade_driver_playbook_drains_and_undrains(
    converged: PlayResult, role_lab: RoleLab
) -> None:
    assert converged.rc == 0, "converge failed; see test_converge_succeeds"
    log = role_lab.logdir / "drain-events.txt"
    extra = role_lab.converge_vars() | {
        "upgrade_driver_serial": 1,
        "upgrade_driver_drain_command": [
            "sh",
            "-c",
            f"echo drain {{{{ inventory_hostname }}}} >> {log}",
        ],
        "upgrade_driver_undrain_command": [
            "sh",
            "-c",
            f"echo undrain {{{{ inventory_hostname }}}} >> {log}",
        ],
    }
    res = role_lab.play("playbooks/upgrade_driver.yml", "upgrade-driver", extra_vars=extra)
    assert res.rc == 0 and res.host()["failed"] == 0, res.tail()
    assert log.read_text().splitlines() == ["drain deb12", "undrain deb12"], res.tail()
    # Same version: only the drain and undrain commands change anything.
    assert res.host()["changed"] == 2, res.tail()


def test_upgrade_driver_playbook_skips_a_host_with_gpu_processes(
    converged: PlayResult, role_lab: RoleLab
) -> None:
    assert converged.rc == 0, "converge failed; see test_converge_succeeds"
    log = role_lab.logdir / "drain-events-busy.txt"
    extra = role_lab.converge_vars() | {
        "upgrade_driver_drain_command": ["sh", "-c", f"echo drain >> {log}"],
        "upgrade_driver_undrain_command": ["sh", "-c", f"echo undrain >> {log}"],
    }
    gpu = tg.start_gpu_process(role_lab.target)
    try:
        res = role_lab.play("playbooks/upgrade_driver.yml", "upgrade-busy", extra_vars=extra)
    finally:
        stop_pid(gpu)
    assert res.rc == 0 and res.host()["failed"] == 0, res.tail()
    assert f"SKIPPED deb12: GPU processes running ({gpu.pid} sleep)" in res.flat, res.tail()
    assert not log.exists(), "a busy host was drained"
    assert res.host()["changed"] == 0, res.tail()


def _fake_cli(path: Path, argv_log: Path, exit_code: int) -> None:
    """Stand-in for the gpufleet CLI: records its argv, prints a report line, exits as told."""
    path.write_text(
        "#!/bin/sh\n"
        f"printf '%s\\n' \"$@\" > {argv_log}\n"
        "echo 'gpufleet stand-in report'\n"
        f"exit {exit_code}\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.mark.parametrize(("exit_code", "play_ok"), [(0, True), (1, False)])
def test_verify_playbook_runs_gpufleet_check_for_the_play_hosts(
    role_lab: RoleLab, exit_code: int, play_ok: bool
) -> None:
    cli = role_lab.logdir / f"gpufleet-{exit_code}"
    argv_log = role_lab.logdir / f"gpufleet-{exit_code}.argv"
    _fake_cli(cli, argv_log, exit_code)
    res = role_lab.play(
        "playbooks/verify.yml", f"verify-cli-{exit_code}", extra_vars={"gpufleet_cli": str(cli)}
    )
    assert argv_log.read_text().splitlines() == [
        "check",
        "-i",
        str(role_lab.inventory),
        "-l",
        "deb12",
    ]
    assert (res.rc == 0) is play_ok, res.tail()
    if not play_ok:
        assert "gpufleet check exited 1 (findings at or above --fail-on)" in res.flat, res.tail()


USER_CONTAINERD_CONFIG = """version = 2
imports = ["/etc/containerd/site/*.toml"]

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.example/pause:3.9"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = true
"""


def test_containerd_engine_gets_the_nvidia_runtime_as_a_drop_in(
    converged: PlayResult, role_lab: RoleLab
) -> None:
    """Runs last: switches the converged target's engine to containerd (Debian's real package),
    over an administrator's config.toml with its own imports and CRI section. nvidia-ctk is the
    stand-in with v1.19.1's flag semantics (--config is the top-level file, the drop-in defaults
    under /etc)."""
    assert converged.rc == 0, "converge failed; see test_converge_succeeds"
    etc = role_lab.target.root / "etc/containerd"
    etc.mkdir(parents=True, exist_ok=True)
    (etc / "config.toml").write_text(USER_CONTAINERD_CONFIG)
    extra = role_lab.converge_vars() | {"container_runtime_engine": "containerd"}
    tags = ("--tags", "container_runtime,nvidia_container_toolkit")
    res = role_lab.play(SITE, "containerd", *tags, extra_vars=extra)
    assert res.rc == 0 and res.host()["failed"] == 0, res.tail()
    config = tomllib.loads((etc / "config.toml").read_text())
    assert config["imports"] == ["/etc/containerd/site/*.toml", "/etc/containerd/conf.d/*.toml"]
    dropin_path = etc / "conf.d/99-nvidia.toml"
    dropin = tomllib.loads(dropin_path.read_text())
    cri = dropin["plugins"]["io.containerd.grpc.v1.cri"]
    # The CRI section travels with the drop-in (containerd < 2.1 replaces imported plugin sections).
    assert cri["sandbox_image"] == "registry.example/pause:3.9", dropin
    assert cri["containerd"]["runtimes"]["nvidia"] == {
        "runtime_type": "io.containerd.runc.v2",
        "options": {"SystemdCgroup": True, "BinaryName": "/usr/bin/nvidia-container-runtime"},
    }, dropin
    again = role_lab.play(SITE, "containerd-again", *tags, extra_vars=extra)
    assert again.rc == 0 and again.host()["changed"] == 0, again.tail()
    # --check writes nothing under /etc (nvidia-ctk's default drop-in path included).
    dropin_path.unlink()
    check = role_lab.play(SITE, "containerd-check", "--check", *tags, extra_vars=extra)
    assert check.rc == 0 and check.host()["failed"] == 0, check.tail()
    assert not dropin_path.exists(), "--check wrote " + dropin_path.read_text()


def test_toolkit_moves_all_held_packages_to_a_new_pinned_version(
    converged: PlayResult, role_lab: RoleLab
) -> None:
    """Runs last: re-pins the toolkit (to 1.17.8, with the floor lowered on purpose). NVIDIA's
    dependency shape (tools >= version) would leave mixed versions unless all four are pinned."""
    assert converged.rc == 0, "converge failed; see test_converge_succeeds"
    extra = role_lab.converge_vars() | {
        "nvidia_container_toolkit_version": "1.17.8",
        "nvidia_container_toolkit_security_floor": "1.17.8",
    }
    res = role_lab.play(
        SITE, "toolkit-repin", "--tags", "nvidia_container_toolkit", extra_vars=extra
    )
    assert res.rc == 0 and res.host()["failed"] == 0, res.tail()
    status = role_lab.target.chroot(
        "dpkg-query",
        "-W",
        "-f=${Package} ${Version} ${db:Status-Abbrev}\n",
        "nvidia-container-toolkit",
        "nvidia-container-toolkit-base",
        "libnvidia-container-tools",
        "libnvidia-container1",
    ).stdout.split("\n")
    assert sorted(line.strip() for line in status if line) == [
        "libnvidia-container-tools 1.17.8-1 hi",
        "libnvidia-container1 1.17.8-1 hi",
        "nvidia-container-toolkit 1.17.8-1 hi",
        "nvidia-container-toolkit-base 1.17.8-1 hi",
    ], res.tail()
