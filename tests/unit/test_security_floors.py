"""The security-floor audit: the data file's every floor has a source, and each component is judged
against it (GF303, GF307-GF310), plus the pending-reboot rule (GF007)."""

from __future__ import annotations

import copy
import dataclasses
import re
from datetime import date
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]

from gpufleet.model import (
    DockerInfo,
    DriverInfo,
    Facts,
    HostResult,
    ImageInfo,
    KernelsInfo,
    OsInfo,
    Report,
)
from gpufleet.rules import evaluate, security
from gpufleet.rules.security import FloorsError, fixed_for, load_floors, parse_floors

DATA = yaml.safe_load(
    (security.resources.files("gpufleet.rules") / security.FLOORS_FILE).read_text())


def test_every_floor_names_its_source_date_and_cves() -> None:
    comps, floors = load_floors()
    assert {c.rule for c in comps.values()} == {"GF303", "GF307", "GF308", "GF309", "GF310"}
    assert floors
    for fl in floors:
        where = f"{fl.component} {fl.advisory}"
        assert re.match(r"^(https://\S+|NVIDIA/product-security@[0-9a-f]{12}:\d{4}/\d+/\d+\.md)$",
                        fl.source), where
        assert date.fromisoformat(fl.date) <= date(2026, 12, 1), where
        assert fl.cves and all(re.fullmatch(r"CVE-\d{4}-\d{4,}", c) for c in fl.cves), where
        # a release or an upstream pre-release ("1.4.0-rc.3"), as vkey orders it
        assert fl.fixed and all(re.fullmatch(r"\d+(\.\d+)*(-rc\.\d+)?", v)
                                for v in fl.fixed.values()), where
    # Newest last inside each component (the data file's own rule), so a reader sees the history.
    for comp in comps:
        dates = [fl.date for fl in floors if fl.component == comp]
        assert dates == sorted(dates), comp


@pytest.mark.parametrize("field, value, said", [
    ("source", "", "missing source"),
    ("source", "the internet", "source must be a URL or repo@commit:path"),
    ("severity", "critical", "severity 'critical' is not one of"),
    ("component", "kernel", "unknown component 'kernel'"),
    ("cves", [], "missing cves"),
])
def test_a_floor_without_a_source_or_with_a_wrong_field_is_refused(field: str, value: Any,
                                                                    said: str) -> None:
    data = copy.deepcopy(DATA)
    data["floors"][2][field] = value
    with pytest.raises(FloorsError, match=re.escape(said)) as info:
        parse_floors(data)
    assert "floors[2]" in str(info.value)


def _floor(component: str, when: str) -> security.Floor:
    return next(fl for fl in load_floors()[1] if fl.component == component and fl.date == when)


@pytest.mark.parametrize("version, july, may", [
    ("580.159.04", None, None),  # the 2xH200 capture's driver: past every floor
    ("580.159.03", None, None),  # exactly at the May 2026 floor
    ("580.126.09", None, "580.159.03"),
    ("570.172.08", None, ""),  # July 2025 fixed R570 at this version; May 2026 fixes no R570
    ("570.148.08", "570.172.08", ""),
    ("595.71.05", None, None),
    ("600.20.01", None, None),  # a branch newer than every bulletin: not judged
    ("470.256.02", "", ""),  # an old branch no bulletin fixes
])
def test_driver_floors_follow_the_branch(version: str, july: str | None, may: str | None) -> None:
    assert fixed_for(_floor("driver", "2025-07-24"), version, branch_lines=True) == july
    assert fixed_for(_floor("driver", "2026-05-21"), version, branch_lines=True) == may


def _host(name: str = "gpu1", **facts: Any) -> HostResult:
    base = Facts(os=OsInfo(kernel="6.8.0-45-generic"),
                 driver=DriverInfo(version="580.159.04", kernel_module_version="580.159.04"),
                 toolkit_version="1.19.1",
                 docker=DockerInfo(server_version="29.3.1", runc_commit="v1.3.3-0-gd842d771"))
    return HostResult(name=name, status="ok", facts=dataclasses.replace(base, **facts))


def _found(*hosts: HostResult) -> dict[str, list[Any]]:
    report = Report(hosts={h.name: h for h in hosts})
    out: dict[str, list[Any]] = {}
    for f in evaluate(report):
        if f.rule in security.RULES:
            out.setdefault(f.rule, []).append(f)
    return out


def test_a_host_at_every_floor_gets_no_security_finding() -> None:
    at_floor = _host(
        driver=DriverInfo(version="580.159.03"), toolkit_version="1.19.1",
        docker=DockerInfo(server_version="29.3.1", runc_commit="v1.3.3-0-gd842d771",
                          authz_plugins=("opa-docker-authz",)),
        image=ImageInfo(ref="r:t", env=("CUDA_VERSION=13.1.0",)),
        kernels=KernelsInfo(("6.8.0-40-generic", "6.8.0-45-generic"), False))
    assert _found(at_floor) == {}


def test_each_component_below_its_floor_is_named_with_its_advisory() -> None:
    found = _found(_host(
        driver=DriverInfo(version="580.126.09"), toolkit_version="1.17.3",
        docker=DockerInfo(server_version="27.0.3", runc_commit="v1.1.11-0-g4bccb38c",
                          authz_plugins=("opa-docker-authz",)),
        image=ImageInfo(ref="r:t", env=("PATH=/usr/bin", "CUDA_VERSION=12.8.1"))))
    assert sorted(found) == ["GF303", "GF307", "GF308", "GF309", "GF310"]
    sev = {rule: fs[0].severity for rule, fs in found.items()}
    assert sev == {"GF303": "error", "GF307": "warning", "GF308": "error", "GF309": "error",
                   "GF310": "info"}
    drv = found["GF307"][0]
    assert drv.evidence["fixed"] == "580.159.03"
    assert [a["source"] for a in drv.evidence["advisories"]] == [
        "NVIDIA/product-security@dbb4ada05315:2026/5821/5821.md"]
    assert "CVE-2026-24187" in drv.evidence["cves"]
    assert "nvidia_driver_version=580.159.03" in drv.remediation
    assert "-l gpu1" in drv.remediation
    runc = found["GF308"][0]
    assert runc.evidence["fixed"] == "1.2.8" and "CVE-2024-21626" in runc.evidence["cves"]
    assert "upgrade runc on gpu1 to 1.2.8" in runc.remediation
    assert found["GF309"][0].evidence["fixed"] == "29.3.1"
    assert found["GF303"][0].evidence["fixed"] == "1.19.1"
    assert "CUDA 13.1" in found["GF310"][0].remediation


def test_a_branch_without_a_fix_is_told_to_move_branch() -> None:
    f = _found(_host(driver=DriverInfo(version="570.211.01")))["GF307"][0]
    assert "gets no fix on R570 from NVIDIA bulletin 5821" in f.message
    assert "nvidia_driver_branch=595" in f.remediation and "R580" in f.remediation


def test_docker_advisories_apply_only_with_an_authz_plugin() -> None:
    plain = _host(docker=DockerInfo(server_version="27.0.3", runc_commit="v1.3.3-0-gd842d771"))
    assert "GF309" not in _found(plain)


def test_distribution_builds_are_info_and_say_why() -> None:
    # The real Debian 12 daemon (tests/fixtures/families/docker/debian-docker-io.json): runc
    # 1.1.5+ds1-1+deb12u1 carries Debian's backport of CVE-2024-21626 (DSA-5615-1).
    debian = _host(docker=DockerInfo(server_version="20.10.24+dfsg1",
                                     runc_commit="1.1.5+ds1-1+deb12u1",
                                     authz_plugins=("authz-broker",)))
    found = _found(debian)
    assert {r: fs[0].severity for r, fs in found.items()} == {"GF308": "info", "GF309": "info"}
    assert "distribution build" in found["GF308"][0].message
    assert found["GF308"][0].evidence["distribution_build"] is True


@pytest.mark.parametrize("commit, flagged", [
    ("v1.4.0-rc.1-0-g1a2b3c4", True), ("v1.4.0-rc.2", True), ("v1.4.0-rc.3", False),
    ("v1.4.0", False)])
def test_runc_pre_releases_below_the_fix_are_flagged(commit: str, flagged: bool) -> None:
    # The November 2025 fix shipped in v1.4.0-rc.3 (security_floors.yaml, review S08).
    found = _found(_host(docker=DockerInfo(server_version="29.3.1", runc_commit=commit)))
    assert ("GF308" in found) is flagged, found
    if flagged:
        assert found["GF308"][0].evidence["fixed"] == "1.4.0-rc.3"


def test_a_runc_commit_without_a_version_is_not_judged() -> None:
    bare = _host(docker=DockerInfo(server_version="29.3.1",
                                   runc_commit="4bccb38cc9cf198d52bebf2b3a90cd14e7af8c06"))
    assert _found(bare) == {}


@pytest.mark.parametrize("kernels, running, expect", [
    (KernelsInfo(("6.8.0-45-generic", "6.8.0-100-generic"), False), "6.8.0-45-generic",
     "runs kernel 6.8.0-45-generic, the newest installed is 6.8.0-100-generic"),
    (KernelsInfo(("6.8.0-45-generic",), True), "6.8.0-45-generic",
     "/var/run/reboot-required exists"),
    (KernelsInfo(("6.8.0-45-generic", "6.8.0-100-generic"), False), "6.8.0-100-generic", None),
    (KernelsInfo((), None), "6.8.0-45-generic", None),
    (None, "6.8.0-45-generic", None),
])
def test_a_newer_installed_kernel_means_a_reboot_is_pending(
        kernels: KernelsInfo | None, running: str, expect: str | None) -> None:
    found = _found(_host(kernels=kernels, os=OsInfo(kernel=running))).get("GF007", [])
    assert [f.message.split("reboot pending: ")[1] for f in found] == ([expect] if expect else [])
    for f in found:
        assert f.severity == "warning" and "ansible.builtin.reboot" in f.remediation
