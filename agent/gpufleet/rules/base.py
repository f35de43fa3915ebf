"""What every rule module shares: the evaluation context and the finding constructor."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from packaging.version import InvalidVersion, Version

from gpufleet.model import (
    Expectations,
    Facts,
    Finding,
    HostResult,
    Report,
    Severity,
    SmokeResult,
)
from gpufleet.model import gpu_model as model_gpu_model
from gpufleet.rules.catalog import RULES

# Groups every host is in; they say nothing about which hosts belong together.
IMPLICIT_GROUPS = frozenset({"all", "ungrouped"})


@dataclass(frozen=True)
class Ctx:
    report: Report
    now: datetime

    def expect(self, host: str) -> Expectations:
        spec = self.report.specs.get(host)
        return spec.expect if spec is not None else Expectations()

    def groups(self, host: str) -> tuple[str, ...]:
        spec = self.report.specs.get(host)
        named = tuple(g for g in (spec.groups if spec else ()) if g not in IMPLICIT_GROUPS)
        return named or ("all",)

    def address(self, host: str) -> str:
        spec = self.report.specs.get(host)
        return spec.address if spec is not None else host

    def with_facts(self) -> Iterable[tuple[HostResult, Facts]]:
        for name in sorted(self.report.hosts):
            h = self.report.hosts[name]
            if h.facts is not None:
                yield h, h.facts

    def with_smoke(self) -> Iterable[tuple[HostResult, SmokeResult]]:
        for name in sorted(self.report.hosts):
            h = self.report.hosts[name]
            if h.smoke is not None:
                yield h, h.smoke

    def worlds(self) -> Iterable[tuple[HostResult, SmokeResult, tuple[str, ...]]]:
        """Each smoke world once, with the first of its hosts and its sorted host names.

        A multinode result is attached to every host of its world, so a rule that loops over
        `with_smoke()` would report it once per host; a single-host run is its own world.
        """
        done: set[tuple[str, ...]] = set()
        for h, s in self.with_smoke():
            world = tuple(sorted(s.hosts)) if len(s.hosts) > 1 else (h.name,)
            if world not in done:
                done.add(world)
                yield h, s, world


class _Blank(dict[str, str]):
    def __missing__(self, key: str) -> str:
        return "?"


def finding(
    rule: str,
    hosts: Iterable[str],
    message: str,
    evidence: Mapping[str, Any] | None = None,
    severity: Severity | None = None,
    **fmt: object,
) -> Finding:
    """A finding of `rule`, its remediation filled from the catalogue's template."""
    info = RULES[rule]
    names = tuple(sorted(set(hosts)))
    values = _Blank({k: str(v) for k, v in fmt.items()})
    values.setdefault("host", ",".join(names))
    values.setdefault("address", ",".join(names))
    return Finding(
        rule=rule,
        severity=severity or info.severity,
        hosts=names,
        message=message,
        evidence=dict(evidence or {}),
        remediation=info.remediation.format_map(values),
    )


# --------------------------------------------------------------------------- versions

_NUM = re.compile(r"\d+")


def vtuple(version: str | None) -> tuple[int, ...] | None:
    """'580.159.04' -> (580, 159, 4); None when there is no number in it."""
    if not version:
        return None
    nums = _NUM.findall(version.split("+")[0].split("-")[0] if version[0].isdigit() else version)
    return tuple(int(n) for n in nums) if nums else None


# The release numbers, then a pre-release tag as the projects write it: runc "1.2.0-rc.1",
# Docker "28.0.0-rc.1", containerd "2.0.0-rc.1", the Container Toolkit's Debian-style
# "1.17.0~rc.1". What follows (git describe "-0-g1a2b3c4", a distribution's "+ds1-1",
# "-0ubuntu1~22.04") is not part of the upstream order.
_ORDERED = re.compile(r"^v?(?P<release>\d+(?:\.\d+)*)"
                      r"(?:[-~._]?(?P<pre>alpha|beta|rc|pre|a|b|c)[-._]?(?P<n>\d*))?(?![a-z])",
                      re.IGNORECASE)
_LOWEST = Version("0")


def vkey(version: str | None) -> Version | None:
    """A version as its project orders it (a pre-release before its release); None if unreadable.

    The order is packaging.version's (PEP 440: a < b < rc < release, numbers as numbers); the
    strings are first cut to release + pre-release tag, because PEP 440's grammar reads neither
    Debian's "~rc" nor git-describe or distribution suffixes.
    """
    m = _ORDERED.match(version.strip()) if version else None
    if not m:
        return None
    pre = m.group("pre")
    text = m.group("release") + (f"{pre}{m.group('n') or 0}" if pre else "")
    try:
        return Version(text)
    except InvalidVersion:
        return None


def vsort(version: str | None) -> Version:
    """vkey for sorting: an unreadable version sorts lowest."""
    return vkey(version) or _LOWEST


def vless(a: str | None, b: str) -> bool:
    """True when version a is known and lower than b (a pre-release is lower than its release)."""
    ka, kb = vkey(a), vkey(b)
    return ka is not None and kb is not None and ka < kb


def branch_of(driver: str | None) -> int | None:
    t = vtuple(driver)
    return t[0] if t else None


_CUDA_IN_TAG = (
    re.compile(r"cuda[-_]?(\d{2})\.(\d)", re.IGNORECASE),  # "…-cuda12.8-cudnn9…"
    re.compile(r"cu(1\d)(\d)(?!\d)", re.IGNORECASE),  # "cu130", "cu128", "cu118"
)


def cuda_from_image(ref: str | None) -> str | None:
    """The CUDA runtime an image is built for, read from its tag (None if the tag does not say)."""
    if not ref:
        return None
    tag = ref.rsplit("/", 1)[-1].split("@")[0]
    tag = tag.split(":", 1)[1] if ":" in tag else ""
    for pat in _CUDA_IN_TAG:
        m = pat.search(tag)
        if m:
            return f"{int(m.group(1))}.{int(m.group(2))}"
    return None


def major_minor(version: str | None) -> str | None:
    t = vtuple(version)
    return f"{t[0]}.{t[1] if len(t) > 1 else 0}" if t else None


def gpu_model(facts: Facts) -> str:
    return model_gpu_model(g.name for g in facts.gpus)
