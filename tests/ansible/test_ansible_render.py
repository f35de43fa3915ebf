"""Decisions of the roles that no machine here can show for real, run on the controller against
declared inputs (issue 11): NVIDIA PCI detection from a fake sysfs tree."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_playbook
from harness.plays import PlayResult

pytestmark = [pytest.mark.ansible]

DETECT = Path(__file__).parent / "playbooks" / "render_detect.yml"
SECURE_BOOT = Path(__file__).parent / "playbooks" / "render_secure_boot.yml"
B200, H100, V100, GH200 = "0x2901", "0x2330", "0x1db4", "0x2342"
GPU_CLASS, NVSWITCH_CLASS = "0x030200", "0x068000"


def _inventory(tmp_path: Path) -> Path:
    """Only localhost: no group_vars, so the roles' defaults and the test's extra vars decide."""
    inv = tmp_path / "inventory.ini"
    inv.write_text("localhost ansible_connection=local\n")
    return inv


Device = tuple[str, str, str, bytes | None]
CX7 = ("0x15b3", "0x1021", "0x020700")
# case -> (PCI functions, nvidia_driver_kernel_modules)
CASES: dict[str, tuple[list[Device], str]] = {
    # Defect 11: on HGX B200 the NVSwitches are ConnectX-7 functions whose VPD says SW_MNG.
    "b200-hgx": (
        [("0x10de", B200, GPU_CLASS, None)] * 8
        + [(*CX7, b"\x82\x10ConnectX-7\x90\x20SMDL=SW_MNG"), (*CX7, b"\x82\x10ConnectX-7 NIC")],
        "auto",
    ),
    "h100-hgx": (
        [("0x10de", H100, GPU_CLASS, None)] * 8 + [("0x10de", "0x22a3", NVSWITCH_CLASS, None)] * 4,
        "auto",
    ),
    # Defect 12: no GPU visible means open; proprietary refused on Blackwell and Grace Hopper.
    "no-gpu": ([], "auto"),
    "v100": ([("0x10de", V100, GPU_CLASS, None)], "auto"),
    "h100-proprietary": ([("0x10de", H100, GPU_CLASS, None)], "proprietary"),
    "b200-proprietary": ([("0x10de", B200, GPU_CLASS, None)], "proprietary"),
    "gh200-proprietary": ([("0x10de", GH200, GPU_CLASS, None)], "proprietary"),
    # Issue 23 M5: 580 is the last branch for Maxwell, Pascal and Volta.
    "v100-590": ([("0x10de", V100, GPU_CLASS, None)], "auto"),
    "h100-590": ([("0x10de", H100, GPU_CLASS, None)], "auto"),
}
BRANCH = {"v100-590": "590", "h100-590": "590"}


def _sysfs(root: Path, devices: list[Device]) -> Path:
    root.mkdir(parents=True)
    for i, (vendor, device, cls, vpd) in enumerate(devices):
        d = root / f"0000:{i + 1:02x}:00.0"
        d.mkdir()
        (d / "vendor").write_text(vendor + "\n")
        (d / "device").write_text(device + "\n")
        (d / "class").write_text(cls + "\n")
        if vpd is not None:
            (d / "vpd").write_bytes(vpd)
    return root


@pytest.fixture(scope="module")
def detected(tmp_path_factory: pytest.TempPathFactory) -> tuple[PlayResult, dict[str, object]]:
    """One ansible-playbook run, one inventory host per case."""
    tmp = tmp_path_factory.mktemp("render-detect")
    hosts = {
        case: {
            "ansible_connection": "local",
            "render_sysfs": str(_sysfs(tmp / case, devices)),
            "nvidia_driver_kernel_modules": modules,
            "nvidia_driver_branch": BRANCH.get(case, "580"),
            "render_out": str(tmp / f"{case}.json"),
        }
        for case, (devices, modules) in CASES.items()
    }
    inventory = tmp / "inventory.json"
    inventory.write_text(json.dumps({"all": {"hosts": hosts}}))
    res = run_playbook(DETECT, inventory, tmp, "render-detect")
    decided = {
        case: json.loads(Path(str(h["render_out"])).read_text())
        for case, h in hosts.items()
        if Path(str(h["render_out"])).exists()
    }
    return res, decided


def test_blackwell_nvswitch_management_functions_enable_fm_and_nvlsm(
    detected: tuple[PlayResult, dict[str, object]],
) -> None:
    """Defect 11: the management functions are found (the ordinary NIC is not)."""
    res, decided = detected
    assert res.host("b200-hgx")["failed"] == 0, res.tail()
    assert decided["b200-hgx"] == {"flavor": "open", "fm": True, "nvlsm": True}
    assert "1 NVSwitch management function(s)" in res.flat, res.tail()


def test_hopper_with_nvswitches_gets_fm_without_nvlsm(
    detected: tuple[PlayResult, dict[str, object]],
) -> None:
    res, decided = detected
    assert decided["h100-hgx"] == {"flavor": "open", "fm": True, "nvlsm": False}, res.tail()


@pytest.mark.parametrize(
    ("case", "flavor"),
    [("no-gpu", "open"), ("v100", "proprietary"), ("h100-proprietary", "proprietary")],
)
def test_module_flavour_defaults_to_open(
    detected: tuple[PlayResult, dict[str, object]], case: str, flavor: str
) -> None:
    """Defect 12: with no GPU visible auto means open (NVIDIA's default since 560)."""
    res, decided = detected
    assert res.host(case)["failed"] == 0, res.tail()
    assert decided[case] == {"flavor": flavor, "fm": False, "nvlsm": False}


@pytest.mark.parametrize(
    ("case", "gpu"), [("b200-proprietary", B200), ("gh200-proprietary", GH200)]
)
def test_proprietary_modules_are_refused_on_blackwell_and_grace_hopper(
    detected: tuple[PlayResult, dict[str, object]], case: str, gpu: str
) -> None:
    """Defect 12: proprietary modules are unsupported on Blackwell and Grace Hopper."""
    res, decided = detected
    assert res.host(case)["failed"] == 1 and case not in decided, res.tail()
    assert f"does not support on Blackwell or Grace Hopper GPUs (device id(s) {gpu})" in res.flat


def test_590_is_refused_on_pre_turing_gpus(detected: tuple[PlayResult, dict[str, object]]) -> None:
    """Issue 23 M5: the role used to install 590 on a V100, which that driver never binds."""
    res, decided = detected
    assert res.host("v100-590")["failed"] == 1 and "v100-590" not in decided, res.tail()
    assert ("Driver branch 590 does not support the pre-Turing GPU(s) on this host (device id(s) "
            f"{V100})") in res.flat, res.tail()
    assert res.host("h100-590")["failed"] == 0, res.tail()
    assert decided["h100-590"] == {"flavor": "open", "fm": False, "nvlsm": False}


PLATFORM = Path(__file__).parent / "playbooks" / "render_platform.yml"
ROCKY9 = {
    "distribution": "Rocky",
    "os_family": "RedHat",
    "distribution_major_version": "9",
    "distribution_version": "9.6",
}
RHEL8 = {
    "distribution": "RedHat",
    "os_family": "RedHat",
    "distribution_major_version": "8",
    "distribution_version": "8.10",
}
UBUNTU2404 = {
    "distribution": "Ubuntu",
    "os_family": "Debian",
    "distribution_major_version": "24",
    "distribution_version": "24.04",
}
UBUNTU2204 = {
    "distribution": "Ubuntu",
    "os_family": "Debian",
    "distribution_major_version": "22",
    "distribution_version": "22.04",
}
DOCKER = "https://download.docker.com/linux/"
RHEL_REMOVES = ["podman", "runc"]


@pytest.mark.parametrize(
    ("facts", "flavor", "request_", "want"),
    [
        # Defects 5, 6, 7: RHEL/Rocky module stream, FM name by branch, Docker's /linux/rhel.
        (
            ROCKY9,
            "open",
            {"nvidia_driver_branch": "580"},
            {
                "driver": ["nvidia-open"],
                "fabricmanager": ["nvidia-fabricmanager"],
                "module_stream": "nvidia-driver:580-open",
                "docker_repo": DOCKER + "rhel",
            },
        ),
        (
            RHEL8,
            "proprietary",
            {"nvidia_driver_branch": "570"},
            {
                "driver": ["cuda-drivers"],
                "fabricmanager": ["nvidia-fabric-manager"],
                "module_stream": "nvidia-driver:570-dkms",
                "docker_repo": DOCKER + "rhel",
            },
        ),
        # Defect 8: 590 drops the branch from Ubuntu's names; the pinning package selects it.
        (
            UBUNTU2404,
            "open",
            {"nvidia_driver_branch": "590", "nvidia_driver_version": "590.44.01"},
            {
                # Issue 23 H1: NVIDIA's compute-only set is the default.
                "driver": ["libnvidia-compute", "nvidia-dkms-open", "nvidia-utils",
                           "nvidia-compute-utils"],
                # Issue 23 L7: NSCQ and IMEX pinned next to the fabric manager.
                "fabricmanager": ["nvidia-fabricmanager", "libnvidia-nscq", "nvidia-imex"],
                "pinning": "nvidia-driver-pinning-590.44.01",
                "docker_repo": DOCKER + "ubuntu",
            },
        ),
        (
            UBUNTU2204,
            "proprietary",
            {"nvidia_driver_branch": "575", "nvidia_driver_package_set": "full"},
            {
                "driver": ["cuda-drivers-575"],
                "fabricmanager": ["nvidia-fabricmanager-575", "libnvidia-nscq-575",
                                  "nvidia-imex-575"],
                "pinning": "nvidia-driver-pinning-575",
                "docker_repo": DOCKER + "ubuntu",
            },
        ),
    ],
    ids=["rocky9-580-open", "rhel8-570-proprietary", "ubuntu2404-590.44.01", "ubuntu2204-575"],
)
def test_rendered_platform_decisions(
    tmp_path: Path,
    facts: dict[str, str],
    flavor: str,
    request_: dict[str, str],
    want: dict[str, object],
) -> None:
    out = tmp_path / "decided.json"
    res = run_playbook(
        PLATFORM,
        _inventory(tmp_path),
        tmp_path,
        "render-platform",
        extra_vars={"ansible_facts": facts, "_nvidia_driver_flavor": flavor, "render_out": str(out)}
        | request_,
    )
    assert res.rc == 0, res.tail()
    decided = json.loads(out.read_text())
    assert {k: decided[k] for k in want} == want
    removes = decided["docker_removes_first"]
    assert all(p in removes for p in RHEL_REMOVES) == (facts["os_family"] == "RedHat"), removes


# The SecureBoot EFI variable: 4 bytes of attributes (NV, BS, RT: 0x06), then the value
# (https://docs.kernel.org/filesystems/efivarfs.html).
SB_CASES: dict[str, tuple[bytes | None, bool]] = {
    "sb-off": (b"\x06\x00\x00\x00\x00", False),
    "no-uefi": (None, False),
    "sb-on-no-key": (b"\x06\x00\x00\x00\x01", False),
    "sb-on-key": (b"\x06\x00\x00\x00\x01", True),
}


def test_secure_boot_without_an_enrolled_dkms_key_is_refused(tmp_path: Path) -> None:
    """Issue 23 M6: Secure Boot off or absent passes; on, without a DKMS signing key the role
    refuses before installing; with one that mokutil does not report enrolled (no mokutil on the
    controller: nothing reports it) it refuses too."""
    hosts = {}
    for case, (var, key) in SB_CASES.items():
        efivar = tmp_path / f"{case}-SecureBoot"
        if var is not None:
            efivar.write_bytes(var)
        cert = tmp_path / f"{case}-MOK.der"
        if key:
            cert.write_bytes(b"0\x82")
        hosts[case] = {"ansible_connection": "local", "render_efivar": str(efivar),
                       "render_certs": [str(cert)]}
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"all": {"hosts": hosts}}))
    res = run_playbook(SECURE_BOOT, inventory, tmp_path, "render-secure-boot")
    for case in ("sb-off", "no-uefi"):
        assert res.host(case)["failed"] == 0, res.tail()
        assert f"SECURE BOOT CHECK PASSED {case}" in res.flat, res.tail()
    assert res.host("sb-on-no-key")["failed"] == 1, res.tail()
    assert ("Refused before installing: UEFI Secure Boot is on and no DKMS signing key exists "
            f"({tmp_path}/sb-on-no-key-MOK.der)") in res.flat, res.tail()
    assert res.host("sb-on-key")["failed"] == 1, res.tail()
    assert (f"the DKMS signing key {tmp_path}/sb-on-key-MOK.der is not known to be enrolled"
            in res.flat), res.tail()
