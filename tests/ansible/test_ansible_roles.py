"""Converge a real Debian 12 target over SSH with the collection's roles and prove the result.

The target is a debootstrap chroot running its own sshd on 127.0.0.70-99 (host key verified).
Debian's real non-free driver packages come from Debian's archive, the NVIDIA Container Toolkit
from a signed local apt mirror of stand-in packages (the air-gapped mirror path). No systemd runs
in the chroot, so service tasks must be skipped visibly.
"""

from __future__ import annotations

import json
import shutil
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
BOOT_KERNEL = Path(__file__).parent / "playbooks" / "boot_kernel.yml"
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


def test_toolkit_leftovers_go_and_the_cdi_refresh_output_stays(
    converged: PlayResult, role_lab: RoleLab
) -> None:
    """One toolkit run, two issue 23 items. L1: a "default-runtime": "nvidia" the toolkit once set
    goes when nvidia_container_toolkit_default_runtime is false (nvidia-ctk itself never removes
    it); the administrator's keys stay. L10: nvidia-cdi-refresh.env points the refresh at
    /etc/cdi/nvidia.yaml (the path the role removes as an older gpufleet's static spec): that
    file is the refresh's and stays."""
    assert converged.rc == 0, "converge failed; see test_converge_succeeds"
    path = role_lab.target.root / "etc/docker/daemon.json"
    before = json.loads(path.read_text())
    path.write_text(json.dumps(before | {"default-runtime": "nvidia"}) + "\n")
    env = role_lab.target.root / "etc/nvidia-container-toolkit/nvidia-cdi-refresh.env"
    spec = role_lab.target.root / "etc/cdi/nvidia.yaml"
    env.parent.mkdir(parents=True, exist_ok=True)
    env.write_text('NVIDIA_CTK_CDI_OUTPUT_FILE_PATH="/etc/cdi/nvidia.yaml"\n')
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text("---\ncdiVersion: 0.5.0\nkind: nvidia.com/gpu\n")
    tags = ("--tags", "container_runtime,nvidia_container_toolkit")
    try:
        res = role_lab.play(SITE, "toolkit-leftovers", *tags, extra_vars=role_lab.converge_vars())
        kept = spec.exists()
    finally:
        env.unlink()
        spec.unlink(missing_ok=True)
    assert res.rc == 0 and res.host()["failed"] == 0, res.tail()
    assert json.loads(path.read_text()) == before, res.tail()
    assert kept, "the refresh's own output was removed\n" + res.tail()
    assert "(they write /etc/cdi/nvidia.yaml at boot" in res.flat, res.tail()


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


def test_upgrade_driver_playbook_drains_waits_for_gpu_work_and_undrains(
    converged: PlayResult, role_lab: RoleLab
) -> None:
    """Issue 23 M9: the drain comes first, then the play waits for the running job to end (here
    the "scheduler", the drain command, ends it 3 s later) and upgrades, then undrains; checking
    for GPU processes before the drain skipped this host."""
    assert converged.rc == 0, "converge failed; see test_converge_succeeds"
    log = role_lab.logdir / "drain-events.txt"
    gpu = tg.start_gpu_process(role_lab.target)
    try:
        extra = role_lab.converge_vars() | {
            "upgrade_driver_serial": 1,
            "upgrade_driver_drain_command": [
                "sh",
                "-c",
                f"echo drain {{{{ inventory_hostname }}}} >> {log}; "
                f"(sleep 3; kill {gpu.pid}) >/dev/null 2>&1 &",
            ],
            "upgrade_driver_undrain_command": [
                "sh",
                "-c",
                f"echo undrain {{{{ inventory_hostname }}}} >> {log}",
            ],
            "upgrade_driver_drain_poll": 1,
        }
        res = role_lab.play("playbooks/upgrade_driver.yml", "upgrade-driver", extra_vars=extra)
    finally:
        stop_pid(gpu)
    assert res.rc == 0 and res.host()["failed"] == 0, res.tail()
    assert log.read_text().splitlines() == ["drain deb12", "undrain deb12"], res.tail()
    assert "FAILED - RETRYING: [deb12]: Find processes that hold NVIDIA device files" in res.flat
    assert "SKIPPED deb12" not in res.flat and "NOT UPGRADED" not in res.flat, res.tail()
    # Same version: only the drain and undrain commands change anything.
    assert res.host()["changed"] == 2, res.tail()


def test_upgrade_driver_playbook_fails_naming_a_host_still_busy(
    converged: PlayResult, role_lab: RoleLab
) -> None:
    """Issue 23 M9 and L15: still busy after the drain's wait, the host is left alone and undrained,
    and the rollout fails naming it; without a drain command and with skipped hosts allowed, the
    play only warns."""
    assert converged.rc == 0, "converge failed; see test_converge_succeeds"
    log = role_lab.logdir / "drain-events-busy.txt"
    extra = role_lab.converge_vars() | {
        "upgrade_driver_drain_command": ["sh", "-c", f"echo drain >> {log}"],
        "upgrade_driver_undrain_command": ["sh", "-c", f"echo undrain >> {log}"],
        "upgrade_driver_drain_timeout": 2,
        "upgrade_driver_drain_poll": 1,
    }
    gpu = tg.start_gpu_process(role_lab.target)
    try:
        res = role_lab.play("playbooks/upgrade_driver.yml", "upgrade-busy", extra_vars=extra)
        warn = role_lab.play("playbooks/upgrade_driver.yml", "upgrade-busy-allowed",
                             extra_vars=role_lab.converge_vars()
                             | {"upgrade_driver_skipped_allowed": True})
    finally:
        stop_pid(gpu)
    busy = f"GPU processes running ({gpu.pid} sleep)"
    assert res.rc != 0 and res.host()["failed"] == 1, res.tail()
    assert f"SKIPPED deb12: {busy} 2 s after the drain" in res.flat, res.tail()
    assert (f"NOT UPGRADED (busy, still on the old driver): deb12: {busy} 2 s after the drain"
            in res.flat), res.tail()
    assert log.read_text().splitlines() == ["drain", "undrain"], res.tail()
    assert res.host()["changed"] == 2, res.tail()
    assert warn.rc == 0 and warn.host()["changed"] == 0, warn.tail()
    assert f"WARNING: NOT UPGRADED (busy, still on the old driver): deb12: {busy}" in warn.flat


KERNEL = "6.99.0-1-amd64"


def _depmod(root: Path) -> None:
    """What DKMS's depmod (or a kernel package) writes: modules.dep for KERNEL in the target."""
    tg.run(["depmod", "-b", str(root), KERNEL])


def _module(path: Path, version: str) -> None:
    """An ELF object whose .modinfo section names the version, as a built nvidia.ko's does (modinfo
    reads only that section)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    info = path.with_suffix(".modinfo")
    info.write_bytes(f"version={version}\0license=NVIDIA\0name=nvidia\0".encode())
    tg.run(["objcopy", "-I", "binary", "-O", "elf64-x86-64",
            "--rename-section", ".data=.modinfo", str(info), str(path)])
    info.unlink()


def test_no_reboot_into_a_default_kernel_without_the_module(
    converged: PlayResult, role_lab: RoleLab
) -> None:
    """Issue 23 M21: a newer installed kernel is the default boot entry; without the driver's module
    built for it (or with an older driver's), the reboot is refused; with it, allowed."""
    assert converged.rc == 0, "converge failed; see test_converge_succeeds"
    root, version = role_lab.target.root, role_lab.driver_version
    boot, mods = root / f"boot/vmlinuz-{KERNEL}", root / f"lib/modules/{KERNEL}"
    extra = {"boot_kernel_driver_version": version}
    try:
        boot.parent.mkdir(exist_ok=True)
        boot.write_bytes(b"")
        mods.mkdir(parents=True)
        _depmod(root)
        none = role_lab.play(BOOT_KERNEL, "boot-kernel-none", extra_vars=extra)
        _module(mods / "updates/dkms/nvidia.ko", "535.0.01")
        _depmod(root)
        old = role_lab.play(BOOT_KERNEL, "boot-kernel-old", extra_vars=extra)
        _module(mods / "updates/dkms/nvidia.ko", version)
        _depmod(root)
        ok = role_lab.play(BOOT_KERNEL, "boot-kernel-ok", extra_vars=extra)
    finally:
        boot.unlink(missing_ok=True)
        shutil.rmtree(mods, ignore_errors=True)
    refused = f"Refused to reboot: the default boot kernel {KERNEL} has"
    assert none.rc != 0 and f"{refused} no NVIDIA module, not {version}" in none.flat, none.tail()
    assert old.rc != 0, old.tail()
    assert f"{refused} NVIDIA module 535.0.01, not {version}" in old.flat, old.tail()
    assert ok.rc == 0 and f"default boot kernel {KERNEL} has NVIDIA module {version}" in ok.flat


def _fake_cli(path: Path, argv_log: Path, exit_code: int) -> None:
    """Stand-in for the gpufleet CLI: records its argv, prints a JSON report of deb12 (the
    report-v1 shape of agent/gpufleet/schema/report-v1.json, reduced to what verify.yml reads),
    exits as told."""
    path.write_text(
        "#!/bin/sh\n"
        f"printf '%s\\n' \"$@\" > {argv_log}\n"
        "echo '{\"schema\": \"gpufleet.report/v1\", \"hosts\": {\"deb12\": {\"status\": \"ok\"}}, "
        "\"findings\": []}'\n"
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
        "--format",
        "json",
    ]
    assert (res.rc == 0) is play_ok, res.tail()
    if not play_ok:
        assert "gpufleet check exited 1 (findings at or above --fail-on)" in res.flat, res.tail()


# The config.toml Docker's containerd.io ships (docker/containerd-packaging@6551934:
# common/containerd.toml), licence header and most commented-out defaults left out: no version,
# CRI disabled.
DOCKER_CONTAINERD_CONFIG = """disabled_plugins = ["cri"]

#root = "/var/lib/containerd"
#[grpc]
#  address = "/run/containerd/containerd.sock"
"""


def test_containerd_from_dockers_package_gets_cri_and_the_systemd_cgroup_driver(
    converged: PlayResult, role_lab: RoleLab
) -> None:
    """Issue 23 M7, M8: over containerd.io's own config.toml (read as version 1, CRI disabled)
    the role names the version (2 for Debian's containerd 1.6; L12: 3 from containerd 2), enables
    CRI and gives runc, and through nvidia-ctk the nvidia runtime, the systemd cgroup driver.
    Idempotent."""
    assert converged.rc == 0, "converge failed; see test_converge_succeeds"
    etc = role_lab.target.root / "etc/containerd"
    etc.mkdir(parents=True, exist_ok=True)
    (etc / "config.toml").write_text(DOCKER_CONTAINERD_CONFIG)
    extra = role_lab.converge_vars() | {
        "container_runtime_engine": "containerd",
        "container_runtime_containerd_systemd_cgroup": True,
    }
    tags = ("--tags", "container_runtime,nvidia_container_toolkit")
    res = role_lab.play(SITE, "containerd-docker-config", *tags, extra_vars=extra)
    assert res.rc == 0 and res.host()["failed"] == 0, res.tail()
    config = tomllib.loads((etc / "config.toml").read_text())
    assert config["version"] == 2 and config["disabled_plugins"] == [], config
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["containerd"]["runtimes"]["runc"] == {
        "runtime_type": "io.containerd.runc.v2",
        "options": {"SystemdCgroup": True},
    }, config
    dropin = tomllib.loads((etc / "conf.d/99-nvidia.toml").read_text())
    assert "disabled_plugins" not in dropin, dropin
    nvidia = dropin["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["nvidia"]
    assert nvidia["options"] == {
        "SystemdCgroup": True,
        "BinaryName": "/usr/bin/nvidia-container-runtime",
    }, dropin
    again = role_lab.play(SITE, "containerd-docker-config-again", *tags, extra_vars=extra)
    assert again.rc == 0 and again.host()["changed"] == 0, again.tail()


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
    # Below 1.18 the role writes the static spec; like nvidia-ctk's own it names the driver's
    # versioned library files, which is what goes stale when the driver changes (G17).
    spec = (role_lab.target.root / "etc/cdi/nvidia.yaml").read_text()
    assert f"--host-driver-version={role_lab.driver_version}" in spec, spec
    assert f"libnvidia-ml.so.{role_lab.driver_version}\n" in spec, spec


# `containerd --version` as containerd's binaries print it: App.Name, version.Package,
# App.Version, version.Revision (containerd/containerd@0e95d5b:cmd/containerd/command/main.go,
# cli.VersionPrinter); Package is filled at link time with the module path
# (containerd/containerd@0340e84:version/version.go), github.com/containerd/containerd/v2 from 2.0
# (the module's /v2 path; inferred for the binary's text); App.Version is the release tag with its
# "v". The revisions are placeholders of the right form (inferred); the role reads only the version.
CONTAINERD_VERSION_OUTPUT = {
    "2.1.4": "containerd github.com/containerd/containerd/v2 v2.1.4 " + "75cb2b71" * 5,
    "1.7.27": "containerd github.com/containerd/containerd v1.7.27 " + "05044ec0" * 5,
}


@pytest.mark.parametrize(
    ("release", "version", "cri"),
    [("2.1.4", 3, "io.containerd.cri.v1.runtime"), ("1.7.27", 2, "io.containerd.grpc.v1.cri")],
)
def test_a_new_containerd_config_has_the_version_of_the_installed_containerd(
    role_lab: RoleLab, release: str, version: int, cri: str
) -> None:
    """Issue 23 L12: with no config.toml, the role writes `version = 3` (and runc's options
    under containerd 2's CRI runtime plugin) for a containerd that reports 2.x, `version = 2`
    for 1.7: a version-3 drop-in is not loaded under a version-2 root on containerd 2
    (containerd/containerd#12891). A stand-in `containerd` in /usr/local/bin (first on the
    target's PATH) prints the version; the target's config.toml is put back afterwards."""
    root = role_lab.target.root
    etc = root / "etc/containerd"
    saved = etc / "config.toml.l12"
    standin = root / "usr/local/bin/containerd"
    standin.parent.mkdir(parents=True, exist_ok=True)
    standin.write_text(f"#!/bin/sh\necho '{CONTAINERD_VERSION_OUTPUT[release]}'\n")
    standin.chmod(0o755)
    had_config = (etc / "config.toml").exists()
    if had_config:
        (etc / "config.toml").rename(saved)
    try:
        res = role_lab.play(
            Path(__file__).parent / "playbooks/containerd_config.yml",
            f"containerd-config-{release}",
            extra_vars={"container_runtime_containerd_systemd_cgroup": True},
        )
        assert res.rc == 0 and res.host()["failed"] == 0, res.tail()
        config = tomllib.loads((etc / "config.toml").read_text())
        assert config["version"] == version, config
        assert config["imports"] == ["/etc/containerd/conf.d/*.toml"], config
        runc = config["plugins"][cri]["containerd"]["runtimes"]["runc"]
        assert runc["options"] == {"SystemdCgroup": True}, config
    finally:
        standin.unlink()
        (etc / "config.toml").unlink(missing_ok=True)
        if had_config:
            saved.rename(etc / "config.toml")
