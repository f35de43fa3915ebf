"""GF3xx: combinations that cannot work or are unsafe, judged from the data tables in reference.py.

The CUDA runtime a host runs comes from the smoke test (torch.version.cuda of the ranks) when one
ran; otherwise it is read from the pytorch_image tag ("…-cuda12.8-…", "…cu130…").
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator
from datetime import timedelta

from gpufleet.model import Facts, Finding, HostResult
from gpufleet.rules import reference
from gpufleet.rules.base import (
    Ctx,
    branch_of,
    cuda_from_image,
    finding,
    major_minor,
    vless,
    vsort,
    vtuple,
)

# The ids this module emits (tests/unit/test_rules_plumbing.py holds it to that).
RULES: tuple[str, ...] = ("GF301", "GF302", "GF304", "GF305", "GF306")


def nccl_code(version: str | None) -> int | None:
    """NCCL's version code: X*10000+Y*100+Z from 2.9, X*1000+Y*100+Z before (nccl.h)."""
    t = vtuple(version)
    if not t or len(t) < 3:
        return None
    x, y, z = t[:3]
    return x * 10000 + y * 100 + z if (x, y) >= (2, 9) else x * 1000 + y * 100 + z


def runtime_cuda(h: HostResult, f: Facts, image: str | None) -> tuple[str | None, str]:
    if h.smoke is not None:
        for r in h.smoke.ranks:
            if r.cuda and r.host in (None, h.name):
                return major_minor(r.cuda), "smoke"
    ref = image or (f.image.ref if f.image else None)
    return cuda_from_image(ref), f"image tag {ref}" if ref else "none"


def torch_nccl(h: HostResult) -> str | None:
    if h.smoke is None:
        return None
    for r in h.smoke.ranks:
        if r.nccl and r.host in (None, h.name):
            return r.nccl
    return None


def _min_driver(cuda: str) -> str | None:
    if cuda in reference.CUDA_MIN_DRIVER:
        return reference.CUDA_MIN_DRIVER[cuda]
    # A runtime newer than the table: at least the newest known minimum of its major.
    major = cuda.split(".", maxsplit=1)[0] + "."
    same = [v for k, v in reference.CUDA_MIN_DRIVER.items() if k.startswith(major)]
    return max(same, key=vsort) if same else None


def _cuda_driver(ctx: Ctx, h: HostResult, f: Facts) -> Iterator[Finding]:
    driver = f.driver.version
    cuda, source = runtime_cuda(h, f, ctx.expect(h.name).pytorch_image)
    if not driver or not cuda:
        return
    need = _min_driver(cuda)
    if need is None or not vless(driver, need):
        return
    major = int(cuda.split(".")[0])
    floor = reference.CUDA_MINOR_COMPAT_FLOOR.get(major)
    ev = {"cuda_runtime": cuda, "cuda_source": source, "driver": driver,
          "full_feature_min_driver": need, "minor_compat_floor": floor,
          "driver_cuda": f.driver.cuda_version, "source": reference.CUDA_SOURCE}
    branch, driver_cuda = branch_of(need), f.driver.cuda_version or "?"
    if floor and not vless(driver, floor):
        yield finding(
            "GF301", [h.name],
            f"{h.name}: CUDA {cuda} ({source}) wants driver >= {need}, host has {driver}; it "
            f"runs under minor-version compatibility only (PTX newer than the driver cannot JIT)",
            ev | {"mode": "minor_version_compat"}, severity="warning",
            branch=branch, driver_cuda=driver_cuda,
        )
        return
    smoke_passed = source == "smoke" and h.smoke is not None and h.smoke.status == "pass"
    datacenter = any(m in (g.name or "") for g in f.gpus for m in reference.DATACENTER_GPU_MARKERS)
    if smoke_passed:
        yield finding(
            "GF301", [h.name],
            f"{h.name}: CUDA {cuda} runs on driver {driver} (below {need}) through forward "
            f"compatibility (cuda-compat): the smoke test passed",
            ev | {"mode": "forward_compat"}, severity="info",
            branch=branch, driver_cuda=driver_cuda,
        )
        return
    hint = (" (forward compatibility with cuda-compat is possible on these data-center GPUs)"
            if datacenter else "")
    yield finding(
        "GF301", [h.name],
        f"{h.name}: CUDA {cuda} ({source}) needs driver >= {need}, host has {driver}{hint}",
        ev | {"mode": "incompatible", "datacenter_gpu": datacenter},
        branch=branch, driver_cuda=driver_cuda,
    )


def _branch_eol(ctx: Ctx, h: HostResult, f: Facts) -> Iterator[Finding]:
    branch = branch_of(f.driver.version)
    if branch is None:
        return
    today = ctx.now.date()
    info = reference.DRIVER_BRANCH_EOL.get(branch)
    if info is None and branch >= reference.DRIVER_BRANCHES_PAST_EOL_BELOW:
        return  # a branch newer than the table: unknown, not judged
    # The next branch still supported past the notice window, long-term branches first.
    notice = timedelta(days=reference.DRIVER_EOL_NOTICE_DAYS)
    live = sorted(
        ((b.kind != "LTSB", n) for n, b in reference.DRIVER_BRANCH_EOL.items()
         if n > branch and b.eol > today + notice),
    )
    target = live[0][1] if live else "a supported branch"
    ev = {"driver": f.driver.version, "branch": branch, "source": reference.DRIVER_BRANCH_SOURCE,
          "eol": info.eol.isoformat() if info else None, "kind": info.kind if info else None}
    if info is None or info.eol < today:
        when = f"on {info.eol.isoformat()}" if info else "(R470-R575 are past end of life)"
        yield finding(
            "GF302", [h.name], f"{h.name}: driver branch R{branch} reached end of life {when}",
            ev, branch=target,
        )
    elif info.eol - today <= notice:
        yield finding(
            "GF302", [h.name],
            f"{h.name}: driver branch R{branch} reaches end of life on {info.eol.isoformat()}",
            ev, severity="info", branch=target,
        )


def _nvml_mismatch(h: HostResult, f: Facts) -> Iterator[Finding]:
    user, kmod = f.driver.version, f.driver.kernel_module_version
    said = [r for r in f.errors.values() if "driver/library version mismatch" in r.lower()]
    if (user and kmod and user != kmod) or said:
        yield finding(
            "GF304", [h.name],
            f"{h.name}: kernel module {kmod or '?'} != userspace driver {user or '?'}"
            + (" (NVML: Driver/library version mismatch)" if said else ""),
            {"userspace": user, "kernel_module": kmod, "errors": said},
        )


def _nccl_groups(ctx: Ctx) -> Iterator[Finding]:
    worlds: dict[str, dict[str, str]] = defaultdict(dict)
    for h, s in ctx.with_smoke():
        if len(s.hosts) > 1:
            key = "multinode " + "+".join(sorted(s.hosts))
            for r in s.ranks:
                if r.nccl and r.host:
                    worlds[key][r.host] = r.nccl
        nccl = torch_nccl(h)
        if nccl:
            for g in ctx.groups(h.name):
                worlds[f"group {g}"][h.name] = nccl
    seen: set[tuple[str, ...]] = set()
    # Multinode worlds first: their (stronger) finding wins over a group's for the same hosts.
    for world, versions in sorted(worlds.items(), key=lambda kv: (kv[0][:5] != "multi", kv[0])):
        codes = {h: nccl_code(v) for h, v in versions.items()}
        if len(set(codes.values())) < 2:
            continue
        counts = Counter(codes.values()).most_common()
        tie = counts[1][1] == counts[0][1]
        odd = tuple(sorted(versions if tie else (h for h, c in codes.items() if c != counts[0][0])))
        if odd in seen:
            continue
        seen.add(odd)
        listed = ", ".join(f"{h}={versions[h]}" for h in sorted(versions))
        yield finding(
            "GF305", odd, f"NCCL versions differ in {world}: {listed}",
            {"world": world, "versions": dict(sorted(versions.items())),
             "version_codes": dict(sorted(codes.items())), "subject": world},
            # A group is only a candidate world; a multinode run that mixed versions is broken.
            severity="error" if world.startswith("multinode") else "warning",
            group=world,
        )


def check(ctx: Ctx) -> Iterator[Finding]:
    for h, f in ctx.with_facts():
        yield from _cuda_driver(ctx, h, f)
        yield from _branch_eol(ctx, h, f)
        yield from _nvml_mismatch(h, f)
        loaded = torch_nccl(h)
        if loaded and f.nccl_system_version and nccl_code(loaded) != nccl_code(
            f.nccl_system_version
        ):
            yield finding(
                "GF306", [h.name],
                f"{h.name}: system libnccl {f.nccl_system_version}, torch loads {loaded}",
                {"system": f.nccl_system_version, "torch": loaded},
            )
    yield from _nccl_groups(ctx)
