#!/usr/bin/env python3
"""Build the small real PyTorch test image (CPU) as a `docker load`-able archive, reproducibly.

    python tests/docker/build_test_image.py            # prints the cached archive's path

Recipe: a Debian 12 `debootstrap --variant=minbase` tree with python3, the pinned torch CPU wheel
(pyproject's torch==2.13.0, found by pip as it finds it for the venv) and its dependencies
installed with pip into /usr/local/lib/python3.11/dist-packages (no pip in the image, no pip
cache), torch's C++ headers, test binaries and test data removed, byte code compiled hash-based
(unchecked: no mtimes in it) but for packages the smoke test never imports, and `torchrun`.
The root file system becomes one layer tar with sorted names, numeric owners and every mtime
clamped to SOURCE_DATE_EPOCH; config and manifest are written here (fixed `created`), so the same
inputs give the same layer digest and image ID (two builds: the same sha256 of the archive).
Nothing is pulled from any registry.

The archive is cached under $GPUFLEET_TEST_CACHE/images (default /var/cache/gpufleet-tests),
keyed on the recipe and the wheel's file name, built under a file lock (concurrent test runs
wait for one build). Needs root (debootstrap) and the host's apt configuration for Debian's
archive (the same as tests/ansible/roletarget.py).
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
from io import BytesIO
from pathlib import Path
from urllib.parse import unquote

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "ansible"))
import roletarget  # noqa: E402  (shares the debootstrap package cache and archive lookup)

CACHE = Path(os.environ.get("GPUFLEET_TEST_CACHE", "/var/cache/gpufleet-tests"))
# Bump when the recipe changes: the cached archive's name carries it.
RECIPE_VERSION = "3"
SUITE = "bookworm"
PYTHON = "3.11"  # Debian 12's python3; the wheel must match it
TORCH = "torch==2.13.0"
PLATFORM = "manylinux_2_28_x86_64"
REPO_TAG = "gpufleet/pytorch-cpu:2.13.0"
SOURCE_DATE_EPOCH = 1764460800  # 2025-11-30T00:00:00Z: fixed, so rebuilds are identical
# What PyTorch's own images put in Env, plus one NCCL setting for the rules that read Env.
ENV = [
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG=C.UTF-8",
    "PYTHONDONTWRITEBYTECODE=1",
    "NVIDIA_VISIBLE_DEVICES=all",
    "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
    "NCCL_DEBUG=WARN",
]
# Removed from the installed torch: headers, C++ test binaries, test data (not needed to run).
# Packages the smoke test's processes never import (torch.compile's, tests'): no byte code,
# 75 of the 142 MB it would add.
NO_BYTECODE = r"/(sympy|networkx|mpmath)/|/torch/(_inductor|testing|onnx)/"
TORCH_TRIM = ["include", "test", "share", "testing/_internal/opinfo", "_inductor/codegen/cuda"]
TORCH_BIN_KEEP = {"torch_shm_manager"}
# pip installs for the image's python and platform, not for the interpreter running pip.
_PIP_TARGET = ["--only-binary=:all:", "--python-version", PYTHON, "--implementation", "cp",
               "--abi", "cp" + PYTHON.replace(".", ""), "--platform", PLATFORM]
TORCHRUN = (
    "#!/usr/bin/python3\nimport sys\nfrom torch.distributed.run import main\nsys.exit(main())\n"
)


def _run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return roletarget.run(argv, **kw)


def wheel_name() -> str:
    """The torch wheel pip would install for the image (file name: part of the cache key)."""
    out = _run([sys.executable, "-m", "pip", "install", "--dry-run", "--report", "-", "--quiet",
                "--no-deps", *_PIP_TARGET, "--target", "/nonexistent-gpufleet", TORCH]).stdout
    report = json.loads(out)
    return unquote(str(report["install"][0]["download_info"]["url"]).rsplit("/", 1)[-1])


def archive_path(wheel: str) -> Path:
    key = hashlib.sha256(f"{RECIPE_VERSION} {SUITE} {wheel} {ENV}".encode()).hexdigest()[:12]
    return CACHE / "images" / f"pytorch-cpu-{key}.tar"


def _rootfs(build: Path) -> None:
    debs = CACHE / "debootstrap" / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    with roletarget.debootstrap_cache_lock():
        _run(["debootstrap", "--variant=minbase", "--include=python3", f"--cache-dir={debs}",
              SUITE, str(build), roletarget.host_debian_archives()[SUITE]])  # fmt: skip
    site = build / f"usr/local/lib/python{PYTHON}/dist-packages"
    site.mkdir(parents=True, exist_ok=True)
    _run([sys.executable, "-m", "pip", "install", "--quiet", "--no-cache-dir", "--no-compile",
          *_PIP_TARGET, "--target", str(site), TORCH])
    torch = site / "torch"
    for rel in TORCH_TRIM:
        shutil.rmtree(torch / rel, ignore_errors=True)
    for f in (torch / "bin").iterdir():
        if f.name not in TORCH_BIN_KEEP:
            shutil.rmtree(f) if f.is_dir() else f.unlink()
    for stray in site.glob("bin"):  # console scripts with this machine's python in the shebang
        shutil.rmtree(stray)
    for cache in list(build.rglob("__pycache__")):
        shutil.rmtree(cache, ignore_errors=True)
    # Byte code, as real images ship it (without it every container's first `import torch`
    # compiles it again: 3.8 instead of 1.4 CPU-s here). Hash-based and unchecked: no mtimes in
    # it, and one process with a fixed hash seed, so the same inputs give the same files. Only
    # this machine's Python of the image's version writes byte code the image's Python reads.
    # Files written for newer Pythons (torch's py312 test helpers) do not compile; like pip, the
    # build goes on without them, as long as torch's own modules have their byte code.
    if f"{sys.version_info[0]}.{sys.version_info[1]}" == PYTHON:
        subprocess.run([sys.executable, "-m", "compileall", "-qq", "-j", "1", "-x", NO_BYTECODE,
                        "--invalidation-mode", "unchecked-hash", "-s", str(build), "-p", "/",
                        str(build / f"usr/lib/python{PYTHON}"), str(site)],
                       env={**os.environ, "PYTHONHASHSEED": "0"}, check=False)  # fmt: skip
        pyc = torch / "__pycache__" / f"__init__.cpython-{PYTHON.replace('.', '')}.pyc"
        if not pyc.exists():
            raise RuntimeError(f"byte code compilation of the image failed: no {pyc}")
    (build / "usr/local/bin/torchrun").write_text(TORCHRUN)
    (build / "usr/local/bin/torchrun").chmod(0o755)
    for rel in ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale",
                "var/cache/apt", "var/cache/ldconfig", "var/lib/apt/lists", "var/log", "dev"):
        shutil.rmtree(build / rel, ignore_errors=True)
        (build / rel).mkdir(mode=0o755, parents=True, exist_ok=True)
    for name in ("hostname", "resolv.conf"):  # the engine provides these per container
        (build / "etc" / name).unlink(missing_ok=True)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _archive(build: Path, out: Path, work: Path) -> None:
    layer = work / "layer.tar"
    names = sorted(p.name for p in build.iterdir())
    _run(["tar", "-C", str(build), "--sort=name", "--numeric-owner", "--owner=0", "--group=0",
          f"--mtime=@{SOURCE_DATE_EPOCH}", "--clamp-mtime", "--format=posix",
          "--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime",
          "-cf", str(layer), *names])  # fmt: skip
    diff_id = _sha256(layer)
    created = "2025-11-30T00:00:00Z"
    config = {
        "architecture": "amd64", "os": "linux", "created": created,
        "config": {"Env": ENV, "Cmd": ["python3"], "WorkingDir": "/", "Labels": {
            "org.opencontainers.image.title": "gpufleet test image (torch CPU)",
            "org.opencontainers.image.source": "tests/docker/build_test_image.py"}},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
        "history": [{"created": created,
                     "created_by": f"build_test_image.py recipe {RECIPE_VERSION}"}],
    }  # fmt: skip
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    manifest = [{"Config": config_name, "RepoTags": [REPO_TAG],
                 "Layers": [f"{diff_id}/layer.tar"]}]
    part = out.with_suffix(".part")
    with tarfile.open(part, "w", format=tarfile.PAX_FORMAT) as tar:
        def add_bytes(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), SOURCE_DATE_EPOCH, 0o644
            tar.addfile(info, BytesIO(data))
        add_bytes(config_name, config_bytes)
        add_bytes("manifest.json", json.dumps(manifest).encode())
        info = tar.gettarinfo(str(layer), f"{diff_id}/layer.tar")
        info.mtime, info.uid, info.gid, info.uname, info.gname = SOURCE_DATE_EPOCH, 0, 0, "", ""
        with layer.open("rb") as f:
            tar.addfile(info, f)
    part.rename(out)


def build(force: bool = False) -> Path:
    """The cached archive, built when missing (or when force)."""
    out = archive_path(wheel_name())
    out.parent.mkdir(parents=True, exist_ok=True)
    with (out.parent / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if out.exists() and not force:
            return out
        work = out.parent / f"build-{os.getpid()}"
        shutil.rmtree(work, ignore_errors=True)
        try:
            root = work / "root"
            _rootfs(root)
            _archive(root, out, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--force", action="store_true", help="rebuild even when cached")
    print(build(force=ap.parse_args().force))
    return 0


if __name__ == "__main__":
    sys.exit(main())
