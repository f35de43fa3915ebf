"""Security floors: each host's driver, container toolkit, runc, Docker Engine and image CUDA
against the advisories in `security_floors.yaml` (GF303, GF307-GF310), and a kernel update that
waits for a reboot (GF007).

A floor is the version that fixes an advisory on one release line (a driver branch, a runc minor).
A host fails a floor when its component is on that line and below it, or, for the driver, on an
older branch the advisory no longer fixes. One finding per host and component lists every floor
it fails; the worst floor decides the severity; a distribution build (Debian's `+ds1-1+deb12u1`,
Ubuntu's `ubuntu` revisions) is info, because distributions backport fixes under the old version.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from gpufleet.model import SEVERITY_ORDER, Facts, Finding, HostResult, Severity
from gpufleet.probes.kernels import release_key
from gpufleet.rules.base import Ctx, branch_of, finding, vsort, vtuple
from gpufleet.rules.catalog import _UPGRADE

RULES: tuple[str, ...] = ("GF007", "GF303", "GF307", "GF308", "GF309", "GF310")

FLOORS_FILE = "security_floors.yaml"
_SEVERITIES = ("info", "warning", "error")
# A version string a distribution built: Debian's +ds/+dfsg and ~ suffixes, a Debian or Ubuntu
# revision, RHEL/Fedora release tags.
_DISTRO = re.compile(r"\+ds|\+dfsg|~|ubuntu|deb\d|\.el\d|\.fc\d|-\d+$")
# runc's `commit:` line as upstream builds print it (git describe): v1.3.3-0-gd842d771.
_UPSTREAM_RUNC = re.compile(r"^v?(\d+\.\d+\.\d+(?:-rc\.?\d+)?)(?:-\d+-g[0-9a-f]+)?(?:-dirty)?$")


@dataclass(frozen=True)
class Floor:
    component: str
    advisory: str
    date: str
    source: str
    severity: Severity
    fixed: Mapping[str, str]  # release line ("580", "1.3", "0" = any other) -> fixed version
    cves: tuple[str, ...]
    needs: str | None = None  # "authz": applies only to a daemon with an AuthZ plugin
    why: str | None = None  # why gpufleet's severity is what it is


@dataclass(frozen=True)
class Component:
    name: str
    rule: str
    what: str


class FloorsError(ValueError):
    """security_floors.yaml does not have the shape this module reads."""


def parse_floors(data: Mapping[str, Any]) -> tuple[dict[str, Component], tuple[Floor, ...]]:
    """The YAML's mappings -> components and floors, refusing a floor without a source."""
    comps = {name: Component(name, str(c["rule"]), str(c["what"]))
             for name, c in dict(data.get("component", {})).items()}
    floors = []
    for i, raw in enumerate(data.get("floors", [])):
        where = f"{FLOORS_FILE} floors[{i}]"
        missing = [k for k in ("component", "advisory", "date", "source", "severity", "fixed",
                               "cves") if not raw.get(k)]
        if missing:
            raise FloorsError(f"{where}: missing {', '.join(missing)}")
        if raw["component"] not in comps:
            raise FloorsError(f"{where}: unknown component {raw['component']!r}")
        if raw["severity"] not in _SEVERITIES:
            raise FloorsError(f"{where}: severity {raw['severity']!r} is not one of "
                              f"{', '.join(_SEVERITIES)}")
        if not re.match(r"^(https://|[\w.-]+/[\w.-]+@[0-9a-f]{7,40}:\S+$)", raw["source"]):
            raise FloorsError(f"{where}: source must be a URL or repo@commit:path")
        floors.append(Floor(
            component=raw["component"], advisory=raw["advisory"], date=str(raw["date"]),
            source=raw["source"], severity=raw["severity"],
            fixed={str(k): str(v) for k, v in raw["fixed"].items()},
            cves=tuple(raw["cves"]), needs=raw.get("needs"), why=raw.get("why"),
        ))
    return comps, tuple(floors)


@cache
def load_floors() -> tuple[dict[str, Component], tuple[Floor, ...]]:
    import yaml  # type: ignore[import-untyped]  # noqa: PLC0415  # ansible dependency

    text = resources.files("gpufleet.rules").joinpath(FLOORS_FILE).read_text(encoding="utf-8")
    return parse_floors(yaml.safe_load(text))


def fixed_for(floor: Floor, version: str, *, branch_lines: bool = False) -> str | None:
    """The fixed version of `floor` on `version`'s release line; None when it is not affected.

    The longest line key that is a prefix of the version decides ("1.3" before "1"); "0" is any
    other line. With `branch_lines` (drivers), a branch the floor does not list is unaffected when
    it is newer than every listed branch and unfixed ("" = move branch) when it is older.
    """
    line, have = vtuple(version) or (), vsort(version)
    keys = sorted(floor.fixed, key=lambda k: -len(vtuple(k) or ()))
    for key in keys:
        kt = vtuple(key) or ()
        if key != "0" and line[: len(kt)] == kt:
            return floor.fixed[key] if have < vsort(floor.fixed[key]) else None
    if branch_lines:
        listed = [(vtuple(k) or (0,))[0] for k in floor.fixed]
        return "" if line and line[0] < max(listed) else None
    if "0" in floor.fixed:
        return floor.fixed["0"] if have < vsort(floor.fixed["0"]) else None
    lowest = min(floor.fixed.values(), key=vsort)
    return lowest if have < vsort(lowest) else None


def runc_version(commit: str | None) -> tuple[str | None, bool]:
    """docker info's RuncCommit.ID -> (version, is a distribution build); (None, False) if none."""
    if not commit:
        return None, False
    m = _UPSTREAM_RUNC.match(commit)
    if m:
        return m.group(1), False
    if re.match(r"^\d+\.\d+", commit):
        return commit, True
    return None, False  # a bare commit hash says no version


def image_cuda(f: Facts) -> str | None:
    for item in (f.image.env or ()) if f.image else ():
        key, _, value = item.partition("=")
        if key == "CUDA_VERSION" and re.match(r"^\d+\.\d+", value):
            return value
    return None


def _versions(f: Facts) -> dict[str, tuple[str | None, bool]]:
    """component -> (version the host runs, is a distribution build)."""
    docker = f.docker
    server = docker.server_version if docker else None
    return {
        "driver": (f.driver.version or f.driver.kernel_module_version, False),
        "toolkit": (f.toolkit_version, False),
        "runc": runc_version(docker.runc_commit if docker else None),
        "docker": (server, bool(server and _DISTRO.search(server))),
        "cuda": (image_cuda(f), False),
    }


def _remedy(comp: str, version: str, fixed: list[str], newest: Floor | None, host: str) -> str:
    upgrade = _UPGRADE.replace("{host}", host)
    best = max((v for v in fixed if v), key=vsort, default="")
    if comp == "driver":
        if "" in fixed or not best:
            branches = sorted(newest.fixed, key=vsort) if newest else []
            return (upgrade + f" -e nvidia_driver_branch={branches[-1] if branches else '?'} "
                    f"-e nvidia_driver_version='' (R{branch_of(version)} gets no fix for "
                    f"{newest.advisory if newest else 'the newest bulletin'}; fixed branches: "
                    + ", ".join(f"R{b}" for b in branches) + ")")
        return upgrade + f" -e nvidia_driver_version={best} (or newer on R{branch_of(version)})"
    if comp == "runc":
        return (f"upgrade runc on {host} to {best} or later (Docker's containerd.io package, or "
                "the distribution's runc update)")
    if comp == "docker":
        return (f"ansible-playbook gpufleet.gpu.site --tags container_runtime -l {host} "
                f"(Docker Engine {best} or later)")
    return best


def _component(h: HostResult, f: Facts, comp: Component, floors: tuple[Floor, ...]
               ) -> Iterator[Finding]:
    version, distro = _versions(f)[comp.name]
    if not version:
        return
    mine = [fl for fl in floors if fl.component == comp.name]
    if any(fl.needs == "authz" for fl in mine) and not (f.docker and f.docker.authz_plugins):
        mine = [fl for fl in mine if fl.needs != "authz"]
    failed: list[tuple[Floor, str]] = []
    for fl in mine:
        fix = fixed_for(fl, version, branch_lines=comp.name == "driver")
        if fix is not None:
            failed.append((fl, fix))
    if not failed:
        return
    worst: Severity = max((fl.severity for fl, _ in failed), key=lambda s: SEVERITY_ORDER[s])
    if distro:
        worst = "info"
    newest = max(mine, key=lambda fl: fl.date)
    fixes = [fix for _, fix in failed]
    best = max((v for v in fixes if v), key=vsort, default="")
    cves = sorted({c for fl, _ in failed for c in fl.cves})
    ordered = sorted(failed, key=lambda pair: pair[0].date)
    parts = []
    if below := [f"{fix} ({fl.advisory.split(',')[0]}, {fl.date})" for fl, fix in ordered if fix]:
        parts.append("is below " + ", ".join(below))
    if none := [f"{fl.advisory.split(',')[0]} ({fl.date})" for fl, fix in ordered if not fix]:
        parts.append(f"gets no fix on R{branch_of(version)} from " + ", ".join(none))
    message = (f"{h.name}: {comp.what} {version} {' and '.join(parts)}: {', '.join(cves[:4])}"
               + (f" and {len(cves) - 4} more" if len(cves) > 4 else ""))
    if distro:
        message += " (a distribution build: its security tracker decides whether it is fixed)"
    evidence: dict[str, Any] = {
        "component": comp.name, "actual": version, "distribution_build": distro,
        "fixed": best or None, "cves": cves,
        "advisories": [{"advisory": fl.advisory, "date": fl.date, "source": fl.source,
                        "fixed_in": fix or None, "cves": list(fl.cves), "why": fl.why}
                       for fl, fix in failed],
        "source": FLOORS_FILE,
    }
    if comp.name == "docker":
        evidence["authz_plugins"] = list(f.docker.authz_plugins) if f.docker else []
    fix_text = _remedy(comp.name, version, fixes, newest, h.name)
    yield finding(comp.rule, [h.name], message, evidence, severity=worst, fix=fix_text,
                  fixed=best or "?")


def _reboot(h: HostResult, f: Facts) -> Iterator[Finding]:
    k, running = f.kernels, f.os.kernel
    if k is None or not running:
        return
    newest = max(k.installed, key=release_key) if k.installed else None
    newer = newest is not None and release_key(newest)[0] > release_key(running)[0]
    if not newer and not k.reboot_required:
        return
    why = (f"runs kernel {running}, the newest installed is {newest}" if newer
           else "/var/run/reboot-required exists")
    yield finding("GF007", [h.name], f"{h.name}: reboot pending: {why}",
                  {"running": running, "newest_installed": newest,
                   "installed": list(k.installed), "reboot_required": k.reboot_required})


def check(ctx: Ctx) -> Iterator[Finding]:
    comps, floors = load_floors()
    for h, f in ctx.with_facts():
        for comp in comps.values():
            yield from _component(h, f, comp, floors)
        yield from _reboot(h, f)
