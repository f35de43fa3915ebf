"""GF2xx: where the inventory sets no expectation, hosts are compared with their peers.

Peers are the hosts of one inventory group with the same GPU model; the majority value is the
reference and the odd hosts are named. Without a majority (a tie) every host of the tie is named.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterator

from gpufleet.model import Expectations, Facts, Finding
from gpufleet.rules.base import Ctx, finding, gpu_model

# The ids this module emits (tests/unit/test_rules_plumbing.py holds it to that).
RULES: tuple[str, ...] = ("GF201", "GF202", "GF203", "GF204", "GF205", "GF206", "GF207", "GF208",
                          "GF209")

ABSENT = "(absent)"

Getter = Callable[[Facts], str | None]


def _vbios(f: Facts) -> str | None:
    values = sorted({(g.vbios or "").upper() for g in f.gpus if g.vbios})
    return ",".join(values) or None


def _digests(f: Facts) -> str | None:
    if f.image is None:
        return None
    return ",".join(sorted(d.rsplit("@", 1)[-1] for d in f.image.digests)) or None


# rule, dimension, getter, "expectation set" test (then GF1xx judges instead), is absence drift
DIMENSIONS: tuple[tuple[str, str, Getter, Callable[[Expectations], bool], bool], ...] = (
    ("GF201", "driver", lambda f: f.driver.version,
     lambda e: bool(e.driver_version or e.driver_branch), True),
    ("GF202", "driver_cuda", lambda f: f.driver.cuda_version,
     lambda e: bool(e.driver_version or e.driver_branch), True),
    ("GF203", "kernel", lambda f: f.os.kernel, lambda e: False, False),
    ("GF204", "toolkit", lambda f: f.toolkit_version, lambda e: bool(e.toolkit_version), True),
    ("GF205", "docker", lambda f: f.docker.server_version if f.docker else None,
     lambda e: False, True),
    ("GF206", "image_digest", _digests, lambda e: bool(e.pytorch_image_digest), True),
    ("GF207", "nccl", lambda f: f.nccl_system_version, lambda e: False, True),
    ("GF208", "vbios", _vbios, lambda e: False, False),
    ("GF209", "gpu_count", lambda f: str(f.gpu_count), lambda e: e.gpu_count is not None, False),
)


def check(ctx: Ctx) -> Iterator[Finding]:
    cohorts: dict[tuple[str, str], list[tuple[str, Facts]]] = defaultdict(list)
    for h, f in ctx.with_facts():
        for g in ctx.groups(h.name):
            cohorts[(g, gpu_model(f))].append((h.name, f))
    seen: set[tuple[str, tuple[str, ...], str]] = set()
    for (group, model), members in sorted(cohorts.items()):
        if len(members) < 2:
            continue
        for rule, dim, get, expected, absence_counts in DIMENSIONS:
            values: dict[str, str] = {}
            for name, f in members:
                if expected(ctx.expect(name)):
                    continue
                v = get(f)
                if v is None and not absence_counts:
                    continue
                values[name] = v or ABSENT
            if len(set(values.values())) < 2:
                continue
            counts = Counter(values.values()).most_common()
            top, n_top = counts[0]
            tie = len(counts) > 1 and counts[1][1] == n_top
            odd = sorted(values) if tie else sorted(h for h, v in values.items() if v != top)
            majority = "none (tie)" if tie else top
            key = (rule, tuple(odd), majority)
            if key in seen:
                continue
            seen.add(key)
            detail = ", ".join(f"{h}={values[h]}" for h in odd)
            yield finding(
                rule, odd,
                f"{dim} differs in group {group} ({model}): majority {majority}; {detail}",
                {"group": group, "gpu_model": model, "dimension": dim, "majority": majority,
                 "values": dict(sorted(values.items())), "subject": dim},
                majority=majority,
            )
