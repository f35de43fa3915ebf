"""The role tests' Debian 12 trees, cached as tarballs under $GPUFLEET_TEST_CACHE/debootstrap: a
debootstrap minbase tree (`rootfs_tarball`), and trees derived from it by apt in a chroot
(`derived_tarball`: the systemd target's). Each tarball's name is its cache key (suite, recipe
version, package lists); builds on a cold cache take one lock, so parallel workers wait for one
build instead of racing on the shared package cache.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

CACHE = Path(os.environ.get("GPUFLEET_TEST_CACHE", "/var/cache/gpufleet-tests"))
SUITE = "bookworm"
# Bump when the include list or the tree preparation changes: the cached tarball is keyed on it.
ROOTFS_VERSION = "1"
INCLUDE = ["python3", "python3-apt", "openssh-server", "ca-certificates"]

def run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    """Run a command; on failure raise with its output so the test says what broke."""
    proc = subprocess.run(argv, text=True, capture_output=True, **kw)  # type: ignore[call-overload]
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv)} exited {proc.returncode}\nstdout:\n{proc.stdout[-4000:]}\n"
            f"stderr:\n{proc.stderr[-4000:]}"
        )
    return proc


def host_debian_archives() -> dict[str, str]:
    """Debian archive URIs by suite, as the host's apt is configured (no host names in code)."""
    out = run(
        [
            "apt-get",
            "indextargets",
            "--no-release-info",
            "--format",
            "$(REPO_URI) $(RELEASE)",
            "Identifier: Packages",
        ]
    ).stdout
    found: dict[str, str] = {}
    for line in out.splitlines():
        uri, _, release = line.partition(" ")
        found.setdefault(release, uri)
    if SUITE not in found:
        raise RuntimeError(f"the host's apt has no {SUITE} archive configured: {found}")
    return found


def rootfs_tarball(include: Sequence[str] = INCLUDE) -> Path:
    """The cached minbase tree (tar) with `include`, built with debootstrap when missing."""
    tarball = CACHE / "debootstrap" / f"{SUITE}-minbase-v{ROOTFS_VERSION}-{'_'.join(include)}.tar"
    if tarball.exists():
        return tarball
    tarball.parent.mkdir(parents=True, exist_ok=True)
    with debootstrap_cache_lock():
        if not tarball.exists():
            _build_rootfs(tarball, include)
    return tarball


@contextlib.contextmanager
def debootstrap_cache_lock() -> Iterator[None]:
    """Held while debootstrap fills the shared package cache or the tarball is written: parallel
    test workers (pytest -n) on a cold cache wait for one build instead of racing on its files."""
    path = CACHE / "debootstrap" / ".lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _build_rootfs(tarball: Path, include: Sequence[str]) -> None:
    build = tarball.parent / f"build-{os.getpid()}"
    shutil.rmtree(build, ignore_errors=True)
    debs = CACHE / "debootstrap" / "debs"
    debs.mkdir(exist_ok=True)
    try:
        run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(include)}",
                f"--cache-dir={debs}",
                SUITE,
                str(build),
                host_debian_archives()[SUITE],
            ]
        )
        # Services must not start inside a chroot (no init); the standard Debian mechanism.
        rc = build / "usr/sbin/policy-rc.d"
        rc.write_text("#!/bin/sh\n# gpufleet tests: no init in this chroot\nexit 101\n")
        rc.chmod(0o755)
        (build / "var/cache/apt/archives").mkdir(parents=True, exist_ok=True)
        part = tarball.with_suffix(".part")
        run(["tar", "-C", str(build), "--numeric-owner", "-cf", str(part), "."])
        part.rename(tarball)
    finally:
        shutil.rmtree(build, ignore_errors=True)


# Bump when the derivation below changes: derived tarballs are keyed on it and on their base's name.
DERIVED_VERSION = "1"


def derived_tarball(extra: Sequence[str], base: Sequence[str] = INCLUDE) -> Path:
    """The cached tree of `base` with `extra` added by apt in a chroot of the unpacked base tarball.

    A second debootstrap of base + extra unpacks and configures every base package again (109 s
    cold for the systemd tree); this installs only what `extra` adds, resolved as debootstrap's
    --include does (Depends only) from the index debootstrap left in the base tree (so the same
    versions; a fresh `apt-get update` only where the archive has moved on). The result has the
    second debootstrap's packages, versions and .debs in /var/cache/apt/archives; only the
    numbers of system users that two packages create may swap (creation order)."""
    base_tar = rootfs_tarball(base)  # before the lock: it takes the same lock when missing
    tarball = base_tar.with_name(f"{base_tar.stem}+apt-v{DERIVED_VERSION}-{'_'.join(extra)}.tar")
    if tarball.exists():
        return tarball
    with debootstrap_cache_lock():
        if not tarball.exists():
            _build_derived(tarball, base_tar, extra)
    return tarball


def _build_derived(tarball: Path, base_tar: Path, extra: Sequence[str]) -> None:
    build = tarball.parent / f"build-{os.getpid()}"
    shutil.rmtree(build, ignore_errors=True)
    build.mkdir()
    debs = CACHE / "debootstrap" / "debs"
    archives = build / "var/cache/apt/archives"
    try:
        run(["tar", "-C", str(build), "--numeric-owner", "-xf", str(base_tar)])
        link_debs(debs, archives)  # apt downloads only what no earlier build fetched
        shutil.copy("/etc/resolv.conf", build / "etc/resolv.conf")  # as debootstrap does
        r = shlex.quote(str(build))
        apt = f"chroot {r} env DEBIAN_FRONTEND=noninteractive apt-get -q -y"
        install = f"{apt} install --no-install-recommends " + " ".join(map(shlex.quote, extra))
        # A mount namespace of its own: /proc and /sys vanish with it, also after a crash. The
        # base tree's policy-rc.d keeps every service stopped.
        script = (
            f"set -e; mount -t proc proc {r}/proc; mount -t sysfs sysfs {r}/sys; "
            f"{install} || {{ {apt} update && {install}; }}"
        )
        run(["unshare", "--mount", "--propagation", "private", "--fork", "sh", "-c", script])
        link_debs(archives, debs)
        installed = set(
            run(["chroot", str(build), "dpkg-query", "-W", "-f",
                 "${Package}_${Version}_${Architecture}.deb\n"]).stdout.replace(":", "%3a").split()
        )  # fmt: skip
        for deb in archives.glob("*.deb"):
            if deb.name not in installed:  # linked from the shared cache, not this tree's
                deb.unlink()
        # What apt leaves and debootstrap does not: its binary caches, lock, logs, and its
        # download and aux dirs owned by _apt.
        for leftover in ("var/cache/apt/pkgcache.bin", "var/cache/apt/srcpkgcache.bin",
                         "var/cache/apt/archives/lock", "var/lib/apt/extended_states",
                         "var/log/apt/eipp.log.xz", "var/log/apt/history.log",
                         "var/log/apt/term.log"):  # fmt: skip
            (build / leftover).unlink(missing_ok=True)
        shutil.rmtree(build / "var/lib/apt/lists/auxfiles", ignore_errors=True)
        shutil.rmtree(archives / "partial")
        (archives / "partial").mkdir(mode=0o755)
        part = tarball.with_suffix(".part")
        run(["tar", "-C", str(build), "--numeric-owner", "-cf", str(part), "."])
        part.rename(tarball)
    finally:
        shutil.rmtree(build, ignore_errors=True)


def link_debs(src: Path, dst: Path) -> None:
    """Hard-link the .debs that dst lacks (same file system: no copy). Each run has its own archive
    dir, so concurrent runs never contend for apt's lock on a shared one."""
    dst.mkdir(parents=True, exist_ok=True)
    for deb in src.glob("*.deb"):
        target = dst / deb.name
        if not target.exists():
            try:
                os.link(deb, target)
            except FileExistsError:
                continue  # a parallel run linked it meanwhile
            except OSError:
                shutil.copy2(deb, target)


