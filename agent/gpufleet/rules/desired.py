"""GF1xx: facts against the inventory's desired-state variables (the names the roles use)."""

from __future__ import annotations

from collections.abc import Iterator

from gpufleet.model import Finding
from gpufleet.rules.base import Ctx, branch_of, finding

# The ids this module emits (tests/unit/test_rules_plumbing.py holds it to that).
RULES: tuple[str, ...] = ("GF101", "GF102", "GF103", "GF104", "GF105", "GF106", "GF107")


def check(ctx: Ctx) -> Iterator[Finding]:
    for h, f in ctx.with_facts():
        e = ctx.expect(h.name)
        name = h.name
        have = f.driver.version
        if e.driver_version and have != e.driver_version:
            yield finding(
                "GF101", [name],
                f"{name}: driver {have or 'not found'}, inventory wants {e.driver_version}",
                {"actual": have, "expected": e.driver_version, "variable": "nvidia_driver_version"},
                expected=e.driver_version,
            )
        elif e.driver_branch and str(branch_of(have)) != e.driver_branch.lstrip("Rr"):
            yield finding(
                "GF102", [name],
                f"{name}: driver {have or 'not found'} is not on branch {e.driver_branch}",
                {"actual": have, "expected": e.driver_branch, "variable": "nvidia_driver_branch"},
                expected=e.driver_branch,
            )
        flavor = f.driver.kernel_module_flavor
        if e.kernel_modules in ("open", "proprietary") and flavor and flavor != e.kernel_modules:
            yield finding(
                "GF103", [name],
                f"{name}: {flavor} kernel modules loaded, inventory wants {e.kernel_modules}",
                {"actual": flavor, "expected": e.kernel_modules,
                 "variable": "nvidia_driver_kernel_modules"},
                expected=e.kernel_modules,
            )
        if e.toolkit_version and f.toolkit_version != e.toolkit_version.split("-")[0]:
            yield finding(
                "GF104", [name],
                f"{name}: container toolkit {f.toolkit_version or 'not installed'}, "
                f"inventory wants {e.toolkit_version}",
                {"actual": f.toolkit_version, "expected": e.toolkit_version,
                 "variable": "nvidia_container_toolkit_version"},
            )
        if e.pytorch_image_digest:
            digests = f.image.digests if f.image else ()
            present = [d.rsplit("@", 1)[-1] for d in digests]
            if e.pytorch_image_digest not in present:
                yield finding(
                    "GF105", [name],
                    f"{name}: image {e.pytorch_image or '?'} with digest "
                    f"{e.pytorch_image_digest} not present"
                    + (f" (has {', '.join(present)})" if present else ""),
                    {"actual": list(digests), "expected": e.pytorch_image_digest,
                     "image": e.pytorch_image, "variable": "pytorch_image_digest"},
                    expected=e.pytorch_image_digest, image=e.pytorch_image or "IMAGE",
                )
        if e.gpu_count is not None and f.gpu_count != e.gpu_count:
            smi_error = f.errors.get("nvidia_smi") or f.errors.get("gpus")
            listed = (f"nvidia-smi listed no GPUs ({smi_error})" if smi_error and not f.gpus
                      else f"nvidia-smi lists {f.gpu_count} GPU(s)")
            yield finding(
                "GF106", [name], f"{name}: {listed}, inventory expects {e.gpu_count}",
                {"actual": f.gpu_count, "expected": e.gpu_count,
                 "variable": "gpufleet_expected_gpu_count",
                 "nvidia_smi_error": smi_error},
            )
        engine = e.container_engine
        if engine == "docker" and (f.docker is None or not f.docker.server_version):
            yield finding(
                "GF107", [name], f"{name}: container_runtime_engine is docker, docker not found",
                {"expected": engine, "variable": "container_runtime_engine"},
            )
        elif engine == "containerd" and not f.containerd_version:
            yield finding(
                "GF107", [name],
                f"{name}: container_runtime_engine is containerd, containerd not found",
                {"expected": engine, "variable": "container_runtime_engine"},
            )
