"""Every simulated host profile, probed by the real probe script with its stand-ins (no sshd).

PATH puts tests/fleet/profiles/NAME/bin first (the fleet bind-mounts it over /usr/local/sbin)
and GPUFLEET_PROC_DRIVER_NVIDIA stands in for the tmpfs /proc/driver/nvidia. The facts asserted
here are the ones tests/fleet/profiles/README.md promises to the rules and fleet tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gpufleet.model import Facts, to_jsonable
from gpufleet.probes import parse_probe_output, probe_script
from gpufleet.probes.sections import split_sections

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "tests/fleet/profiles"


def _built() -> Path:
    import importlib.util  # noqa: PLC0415

    spec = importlib.util.spec_from_file_location("gpufleet_build_profiles",
                                                  SOURCE / "build_profiles.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return Path(mod.ensure_built())


PROFILES = _built()  # built from the overlays, as the fleet does at start
GOLDEN = REPO / "tests/fixtures/golden/profiles"
NAMES = sorted(p.name for p in PROFILES.iterdir() if (p / "bin").is_dir())
HANG_TIMEOUT = 1  # the hang profile costs this many seconds
TOOL_TIMEOUT = 10  # elsewhere: slack for a loaded CI machine; no stand-in should need it
IMAGE = "pytorch/pytorch:2.11.0-cuda13.0-cudnn9-runtime"
DIGEST = "sha256:991fe96ed17cd3758bd498c26e7953ec34ed6ce4c97b4f5748acb365582d2f19"
UUID0 = "GPU-e0ec50b6-f483-68ed-fb7b-ecc8879a76a1"


def probe(name: str, image: str = IMAGE) -> tuple[Facts, float]:
    facts, seconds, _ = probe_raw(name, image)
    return facts, seconds


def probe_raw(name: str, image: str = IMAGE) -> tuple[Facts, float, str]:
    profile = PROFILES / name
    env = {
        **os.environ,
        "PATH": f"{profile / 'bin'}:{os.environ['PATH']}",
        "GPUFLEET_PROC_DRIVER_NVIDIA": str(profile / "proc_driver_nvidia"),
        # The profiles carry no sysfs: not this machine's PCI bus either (pci_gpus is None).
        "GPUFLEET_SYS_PCI_DEVICES": str(profile / "sys_bus_pci_devices"),
        # Nor this machine's RDMA devices (ib_ports is empty).
        "GPUFLEET_SYS_CLASS_INFINIBAND": str(profile / "sys_class_infiniband"),
        # Nor this machine's kernel modules (gdr is empty).
        "GPUFLEET_SYS_MODULE": str(profile / "sys_module"),
        "GPUFLEET_SYS_KERNEL_MM": str(profile / "sys_kernel_mm"),
        # Nor this machine's kernels: the profile's /boot, if it has one (absent: kernels None).
        "GPUFLEET_BOOT": str(profile / "boot"),
        "GPUFLEET_REBOOT_REQUIRED": str(profile / "reboot-required"),
        "GPUFLEET_BOOT_ID": str(profile / "boot_id"),
    }
    start = time.monotonic()
    proc = subprocess.run(
        [
            "sh",
            "-s",
            "--",
            f"tool_timeout={HANG_TIMEOUT if name == 'nvidia-smi-hang' else TOOL_TIMEOUT}",
            f"image={image}",
        ],
        input=probe_script(),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return parse_probe_output(proc.stdout), time.monotonic() - start, proc.stdout


@pytest.fixture(scope="module")
def facts() -> dict[str, Facts]:
    with ThreadPoolExecutor(4) as pool:
        return dict(zip(NAMES, (f for f, _ in pool.map(probe, NAMES)), strict=True))


def test_a_profile_is_one_short_overlay_on_the_capture() -> None:
    """Profiles are data: one small TOML overlay each, built (not committed) at fleet start."""
    overlays = sorted((SOURCE / "overlays").glob("*.toml"))
    assert {p.stem for p in overlays} == set(NAMES)
    assert max(p.stat().st_size for p in overlays) < 2048
    assert not [p for p in SOURCE.iterdir() if p.is_dir() and p.name != "overlays"]
    proc = subprocess.run([sys.executable, str(SOURCE / "build_profiles.py")],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()) == PROFILES  # same content, same cached tree


def test_every_named_profile_exists() -> None:
    assert set(NAMES) == {
        "h200x2",
        "h200x8",
        "a100x8",
        "b200x8",
        "driver-drift",
        "nvml-mismatch",
        "no-nvidia-smi",
        "nvidia-smi-hang",
        "ecc-remap",
        "xid",
        "pcie-degraded",
        "nvlink-down",
        "persistence-off",
        "old-toolkit",
        "wrong-digest",
        "busy",
        "fabric-incomplete",
        "gpu-missing",
        "pcie-only-8gpu",
        "h100-pcie-nv12",
        "nvlink-slow",
        "nccl-conf",
        "nccl-env",
        "old-driver-580",
        "old-runc",
        "docker-authz",
        "old-cuda-image",
        "security-at-floor",
        "reboot-pending",
        "recovery-reset",
        "recovery-reboot",
        "reboot-again",
        "xid79-lost",
        "xid13-burst",
        "xid-leaky",
        "xid79-repeat",
        "xid74-link",
        "xid74-spread",
    }


HEALTHY_2GPU = (
    "h200x2",
    "ecc-remap",
    "xid",
    "pcie-degraded",
    "nvlink-down",
    "persistence-off",
    "old-toolkit",
    "wrong-digest",
    "busy",
    "driver-drift",
)


@pytest.mark.parametrize("name", HEALTHY_2GPU)
def test_two_gpu_profiles_share_the_real_capture(facts: dict[str, Facts], name: str) -> None:
    f = facts[name]
    assert f.errors == {}
    assert [g.bus_id for g in f.gpus] == ["00000000:00:06.0", "00000000:00:07.0"]
    assert f.gpus[0].uuid == UUID0
    assert {g.name for g in f.gpus} == {"NVIDIA H200"}
    assert {g.memory_total_mib for g in f.gpus} == {143771}
    assert f.topology is not None and f.topology.devices == ("GPU0", "GPU1")
    assert f.fabric is not None and f.fabric.gpu_states == {0: "Completed", 1: "Completed"}
    assert f.fabric.manager_running is None and f.fabric.nvswitch_count == 0
    assert f.nccl_system_version == "2.28.3"
    assert f.docker is not None and f.docker.default_runtime == "nvidia"
    assert f.docker.runtimes == ("io.containerd.runc.v2", "nvidia", "runc")
    assert f.containerd_version == "1.7.27"
    assert f.os.kernel == os.uname().release


def test_h200x2_is_healthy(facts: dict[str, Facts]) -> None:
    f = facts["h200x2"]
    assert (f.driver.version, f.driver.kernel_module_version, f.driver.cuda_version) == (
        "580.159.04",
        "580.159.04",
        "13.0",
    )
    assert f.driver.kernel_module_flavor == "open"
    for g in f.gpus:
        assert g.persistence_mode is True and g.ecc_uncorrected_volatile == 0
        assert (g.remapped_rows_pending, g.remapped_rows_failed) == (False, False)
        assert (g.pcie_gen_current, g.pcie_width_current) == (g.pcie_gen_max, g.pcie_width_max)
        assert g.throttle_reasons == ("gpu_idle",)
    assert f.topology is not None and f.topology.links["GPU0"]["GPU1"] == "NV18"
    assert [sum(link.active for link in n.links) for n in f.nvlink] == [18, 18]
    assert f.toolkit_version == "1.19.1"
    assert f.image is not None and f.image.digests == (f"pytorch/pytorch@{DIGEST}",)
    assert f.xid_events == () and f.gpu_processes == ()


def test_h200x8(facts: dict[str, Facts]) -> None:
    f = facts["h200x8"]
    assert f.errors == {}
    assert f.gpu_count == 8
    assert [g.bus_id for g in f.gpus][:2] == ["00000000:18:00.0", "00000000:2A:00.0"]
    assert len({g.uuid for g in f.gpus}) == 8
    topo = f.topology
    assert topo is not None
    gpus = [d for d in topo.devices if d.startswith("GPU")]
    assert {topo.links[a][b] for a in gpus for b in gpus if a != b} == {"NV18"}
    assert topo.nics == {f"NIC{i}": f"mlx5_{i}" for i in range(8)}
    assert topo.links["GPU3"]["NIC3"] == "PIX" and topo.links["GPU3"]["NIC4"] == "SYS"
    assert topo.numa_affinity["GPU4"] == "1" and topo.cpu_affinity["GPU0"] == "0-55,112-167"
    assert len(f.nvlink) == 8 and all(len(n.links) == 18 for n in f.nvlink)
    assert f.fabric is not None
    assert set(f.fabric.gpu_states.values()) == {"Completed"} and len(f.fabric.gpu_states) == 8
    assert (f.fabric.manager_running, f.fabric.nvswitch_count) == (True, 4)


def test_fabric_incomplete(facts: dict[str, Facts]) -> None:
    f = facts["fabric-incomplete"]
    assert f.gpu_count == 8
    assert f.fabric is not None
    assert set(f.fabric.gpu_states.values()) == {"In Progress"}
    assert (f.fabric.manager_running, f.fabric.nvswitch_count) == (False, 4)


def test_gpu_missing(facts: dict[str, Facts]) -> None:
    f = facts["gpu-missing"]
    assert f.gpu_count == 7
    assert "00000000:AB:00.0" not in {g.bus_id for g in f.gpus}
    assert f.topology is not None and "GPU7" not in f.topology.devices
    assert len(f.nvlink) == 7


def test_driver_drift(facts: dict[str, Facts]) -> None:
    d = facts["driver-drift"].driver
    assert (d.version, d.kernel_module_version, d.cuda_version) == (
        "570.172.08",
        "570.172.08",
        "12.8",
    )


def test_nvml_mismatch(facts: dict[str, Facts]) -> None:
    f = facts["nvml-mismatch"]
    assert f.errors == {
        "nvidia_smi": "NVML: Driver/library version mismatch (NVML library version 580.159)"
    }
    assert (f.driver.version, f.driver.kernel_module_version) == ("580.159.04", "580.95.05")
    assert f.driver.kernel_module_flavor == "proprietary"
    assert f.gpus == () and f.topology is None and f.driver.cuda_version is None
    assert f.toolkit_version == "1.19.1"  # the rest of the host still reports


def test_no_nvidia_smi(facts: dict[str, Facts]) -> None:
    f = facts["no-nvidia-smi"]
    assert f.gpus == () and f.driver.version is None and f.driver.kernel_module_version is None
    assert f.errors["nvidia_smi"] == "nvidia-smi: not found"
    assert f.errors["toolkit"] == "nvidia-ctk: not found"
    assert f.errors["kernel_module"].startswith("/proc/driver/nvidia/version: not present")
    # This machine's docker client has no engine; a machine without the client says not found.
    assert f.docker is None
    assert f.errors["docker"] in (
        "docker: not found",
        "docker: Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
        "Is the docker daemon running?",
    )
    assert f.errors["nccl"] == "no system libnccl in the ldconfig cache"
    assert f.fabric is None and f.xid_events == ()
    assert f.os.id is not None


def test_nvidia_smi_hang_reports_hung_and_keeps_the_rest() -> None:
    f, seconds, raw = probe_raw("nvidia-smi-hang")
    assert f.errors == {"nvidia_smi": f"nvidia-smi hung (no answer in {HANG_TIMEOUT} s)"}
    assert f.gpus == ()
    assert f.driver.version == "580.159.04"  # from libnvidia-ml, not from nvidia-smi
    assert f.driver.kernel_module_version == "580.159.04"
    assert f.toolkit_version == "1.19.1" and f.nccl_system_version == "2.28.3"
    assert f.docker is not None and f.image is not None
    # One timeout, not one per nvidia-smi call: later calls are skipped. Counted on the probe's own
    # sections, not on the wall clock (a loaded machine stretches the probe, not the count).
    sections = split_sections(raw).values()
    killed = [s.name for s in sections if s.rc in (124, 137) and not s.stderr.startswith("skipped")]
    skipped = [s.name for s in sections if s.stderr.startswith("skipped: nvidia-smi hung")]
    assert len(killed) == 1 and skipped, (killed, skipped, seconds)


def test_ecc_remap(facts: dict[str, Facts]) -> None:
    g0, g1 = facts["ecc-remap"].gpus
    assert (g0.ecc_uncorrected_volatile, g0.remapped_rows_pending) == (0, False)
    assert (g1.ecc_uncorrected_volatile, g1.ecc_uncorrected_aggregate) == (2, 7)
    assert (g1.remapped_rows_pending, g1.remapped_rows_failed) == (True, True)


def test_xid(facts: dict[str, Facts]) -> None:
    events = facts["xid"].xid_events
    assert [(e.xid, e.bus_id, e.timestamp) for e in events] == [
        (48, "00000000:00:07.0", "[ 8123.456789]"),
        (79, "00000000:00:07.0", "[ 8123.460012]"),
    ]


def test_recovery_action_profiles(facts: dict[str, Facts]) -> None:
    """The driver's "GPU Recovery Action" per GPU, read from the profile's `nvidia-smi -q`."""
    assert facts["h200x2"].gpu_recovery is not None
    assert {r.action for r in facts["h200x2"].gpu_recovery} == {"none"}  # the real capture
    reset = {r.bus_id: r.action for r in facts["recovery-reset"].gpu_recovery or ()}
    assert reset == {"00000000:00:06.0": "none", "00000000:00:07.0": "gpu_reset"}
    reboot = {r.bus_id: r.action for r in facts["recovery-reboot"].gpu_recovery or ()}
    assert reboot["00000000:00:06.0"] == "node_reboot"
    assert [e.xid for e in facts["recovery-reboot"].xid_events] == [31, 154]


def test_reboot_stand_in_refuses_outside_a_simulated_boot(tmp_path: Path) -> None:
    """bin/gpufleet-sim-reboot SIGTERMs PID 1 of the boot it runs in: outside a fleet host's boot
    (no matching $state/pidns) it must refuse, or it would signal this machine's init. Inside
    one, the answers after the reboot are the base's (tests/fleet/test_remediate.py reboots)."""
    bin_dir = PROFILES / "recovery-reboot" / "bin"
    env = {**os.environ, "GPUFLEET_SIM_STATE": str(tmp_path)}
    (tmp_path / "pidns").write_text("pid:[1]\n")  # some other namespace
    res = subprocess.run([str(bin_dir / "gpufleet-sim-reboot")], env=env, capture_output=True,
                         text=True, timeout=10, check=False)
    assert res.returncode == 1 and "refused" in res.stderr, res
    assert not (PROFILES / "reboot-again" / "bin" / ".data" / "rebooted-q.txt").exists()

    def ask(*argv: str) -> str:
        return subprocess.run([str(bin_dir / argv[0]), *argv[1:]], env=env, capture_output=True,
                              text=True, timeout=10, check=True).stdout

    assert "Xid" in ask("dmesg") and "Reboot" in ask("nvidia-smi", "-q")
    (tmp_path / "reboot").write_text("")  # what the fleet writes in a boot after a reboot
    assert "Xid" not in ask("dmesg")
    assert "Reboot" not in ask("nvidia-smi", "-q") and "GPU 1:" in ask("nvidia-smi", "-L")


def test_lost_gpu_profile_shows_8_on_the_bus_and_7_enumerated(facts: dict[str, Facts]) -> None:
    f = facts["xid79-lost"]
    assert f.pci_gpus is not None and len(f.pci_gpus) == 8 and len(f.gpus) == 7
    (ev,) = [e for e in f.xid_events if e.xid == 79]
    assert (ev.bus_id, ev.timestamp, ev.this_boot) == (
        "00000000:AB:00.0", "2026-11-29T03:12:45,123456+00:00", True)
    assert facts["h200x2"].pci_gpus is None  # profiles without a PCI tree have no sysfs


def test_pcie_degraded(facts: dict[str, Facts]) -> None:
    g0, g1 = facts["pcie-degraded"].gpus
    assert (g0.pcie_gen_current, g0.pcie_width_current) == (5, 16)
    assert (g1.pcie_gen_current, g1.pcie_gen_max, g1.pcie_width_current, g1.pcie_width_max) == (
        4,
        5,
        8,
        16,
    )


def test_nvlink_down(facts: dict[str, Facts]) -> None:
    f = facts["nvlink-down"]
    for gpu in f.nvlink:
        assert [link.link for link in gpu.links if not link.active] == [3, 11]
    assert f.topology is not None and f.topology.links["GPU0"]["GPU1"] == "NV16"


def test_persistence_off(facts: dict[str, Facts]) -> None:
    assert [g.persistence_mode for g in facts["persistence-off"].gpus] == [False, False]


def test_old_toolkit(facts: dict[str, Facts]) -> None:
    assert facts["old-toolkit"].toolkit_version == "1.16.1"


def test_wrong_digest(facts: dict[str, Facts]) -> None:
    image = facts["wrong-digest"].image
    assert image is not None and image.ref == IMAGE
    assert len(image.digests) == 1 and DIGEST not in image.digests[0]


def test_busy(facts: dict[str, Facts]) -> None:
    (process,) = facts["busy"].gpu_processes
    assert (process.pid, process.name, process.gpu_uuid, process.used_memory_mib) == (
        48213,
        "python3",
        UUID0,
        81920,
    )


def test_any_image_ref_is_present_but_the_absent_one() -> None:
    present, _ = probe("h200x2", image="registry.example:5000/team/pytorch:25.10")
    assert present.image is not None
    assert present.image.digests == (f"registry.example:5000/team/pytorch@{DIGEST}",)
    absent, _ = probe("h200x2", image="gpufleet/absent:never")
    assert absent.image is not None and absent.image.digests == ()
    assert "image" not in absent.errors


@pytest.mark.parametrize("name", NAMES)
def test_profile_facts_golden(facts: dict[str, Facts], name: str) -> None:
    """The whole parsed Facts of each profile, for rules and reports to build on.

    `os` is this machine's (the profiles do not simulate it) and is left out, and so are the
    docker/image errors and the containerd version of no-nvidia-smi, which come from this
    machine's own docker client and containerd (present or not).
    Regenerate with GPUFLEET_UPDATE_GOLDEN=1 and read the diff.
    """
    got = json.loads(json.dumps(to_jsonable(facts[name])))
    got.pop("os")
    got.pop("nccl_config")  # this machine's files and environment: test_nccl_conf.py
    got.pop("tmpdir")  # this machine's /tmp and its free bytes: test_full_tmp_local.py
    if name == "no-nvidia-smi":
        for family in ("docker", "image"):
            got["errors"].pop(family)
        got["errors"].pop("containerd", None)
        got.pop("containerd_version")
    path = GOLDEN / f"{name}.json"
    if os.environ.get("GPUFLEET_UPDATE_GOLDEN") == "1":
        GOLDEN.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(got, indent=2, sort_keys=True) + "\n")
    assert path.exists(), f"no golden file {path}; run with GPUFLEET_UPDATE_GOLDEN=1"
    assert got == json.loads(path.read_text()), f"{name} facts differ from {path.name}"
