"""Build and run the role tests' real targets: a Debian 12 debootstrap chroot with its own sshd on a
loopback address, and a signed local apt mirror standing in for NVIDIA's repositories.

Downloads are cached under $GPUFLEET_TEST_CACHE (default /var/cache/gpufleet-tests), which outlives
the checkout; with an empty cache everything is built from Debian's archive (the mirror the host's
own apt configuration names).
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from email.utils import formatdate
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # tests/: the shared harness
# The tree cache lives in rootfs.py; the other targets and builders reach it through here too.
from rootfs import (  # noqa: F401 - INCLUDE, debootstrap_cache_lock: re-exported
    CACHE,
    INCLUDE,
    SUITE,
    debootstrap_cache_lock,
    host_debian_archives,
    link_debs,
    rootfs_tarball,
    run,
)

from harness.processes import stop_pid

HERE = Path(__file__).resolve().parent
# This suite's loopback range (other suites: 127.0.0.2-60, .200-.210). A run takes the first
# address where neither sshd (22) nor the mirror (8071) listens: concurrent runs do not collide.
ADDR_RANGE = range(70, 100)
MIRROR_PORT = 8071
TOOLKIT_VERSIONS = ["1.17.8", "1.19.1"]


def _in_use(addr: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.3)
        return s.connect_ex((addr, port)) == 0


# An address is reserved by an flock on its lock file (held until release_address or the end of the
# process) before anything listens on it: two labs starting at once never pick the same one.
ADDRESS_LOCKS = Path("/tmp/gpufleet-role-addresses")
_RESERVED: dict[str, int] = {}


def free_address() -> str:
    ADDRESS_LOCKS.mkdir(exist_ok=True)
    for last in ADDR_RANGE:
        addr = f"127.0.0.{last}"
        fd = os.open(ADDRESS_LOCKS / f"{addr}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        if _in_use(addr, 22) or _in_use(addr, MIRROR_PORT):
            os.close(fd)
            continue
        _RESERVED[addr] = fd
        return addr
    raise RuntimeError(f"every address 127.0.0.{ADDR_RANGE.start}-{ADDR_RANGE.stop - 1} is in use")


def release_address(addr: str) -> None:
    fd = _RESERVED.pop(addr, None)
    if fd is not None:
        os.close(fd)


def wait_port(addr: str, port: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex((addr, port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {addr}:{port} after {timeout}s")


@dataclass
class Mirror:
    root: Path
    url: str
    key_url: str
    addr: str
    server: subprocess.Popen[bytes] | None = None

    def stop(self) -> None:
        stop_pid(self.server)


def _control(name: str, version: str, arch: str, depends: str) -> str:
    lines = [
        f"Package: {name}",
        f"Version: {version}-1",
        f"Architecture: {arch}",
        "Maintainer: gpufleet tests <tests@gpufleet.invalid>",
        "Section: utils",
        "Priority: optional",
        f"Description: gpufleet test stand-in for NVIDIA's {name}",
        " Built by tests/ansible/target.py; see the nvidia-ctk stand-in for what it implements.",
    ]
    if depends:
        lines.insert(3, f"Depends: {depends}")
    return "\n".join(lines) + "\n"


def _refresh_units(version: str) -> dict[str, str | None]:
    """From 1.18 nvidia-container-toolkit-base ships the CDI refresh units under
    /etc/systemd/system (packaging/debian/nvidia-container-toolkit-base.install); the stand-ins
    (standin/nvidia-cdi-refresh.*) carry v1.19.1's directives, sources cited there."""
    if tuple(int(x) for x in version.split(".")) < (1, 18):
        return {}
    return {f"etc/systemd/system/{unit}": (HERE / "standin" / unit).read_text()
            for unit in ("nvidia-cdi-refresh.path", "nvidia-cdi-refresh.service")}


def _build_debs(pool: Path, version: str) -> None:
    arch = run(["dpkg", "--print-architecture"]).stdout.strip()
    libdir = f"usr/lib/{run(['dpkg-architecture', '-qDEB_HOST_MULTIARCH']).stdout.strip()}"
    v = f"{version}-1"
    # Dependencies mirror NVIDIA's packaging/debian/control: toolkit needs base at the same version;
    # tools at ">=" up to 1.17.x (NVIDIA/nvidia-container-toolkit@f202b80a9b, tag v1.17.8), at "="
    # from 1.18 (@09ceee5dde, tag v1.19.1; both as read in reviews/roles-2026-12-01.md G14), so an
    # unpinned 1.17 install would drift; the role pins all four. Files: the hook and the runtime in
    # nvidia-container-toolkit (@3809407:packaging/debian/nvidia-container-toolkit.install).
    tools = (
        f"libnvidia-container-tools (= {v})"
        if tuple(int(x) for x in version.split(".")) >= (1, 18)
        else f"libnvidia-container-tools (>= {v})"
    )
    specs = {
        "libnvidia-container1": ("", {f"{libdir}/libnvidia-container.so.{version}": "stand-in\n"}),
        "libnvidia-container-tools": (
            f"libnvidia-container1 (>= {v})",
            {"usr/bin/nvidia-container-cli": "#!/bin/sh\necho stand-in\n"},
        ),
        "nvidia-container-toolkit-base": (
            "python3",
            {"usr/bin/nvidia-ctk": None} | _refresh_units(version),
        ),
        "nvidia-container-toolkit": (
            f"nvidia-container-toolkit-base (= {v}), {tools}, libnvidia-container-tools (<< 2.0.0)",
            {
                "usr/bin/nvidia-container-runtime": "#!/bin/sh\necho stand-in\n",
                "usr/bin/nvidia-container-runtime-hook": "#!/bin/sh\necho stand-in\n",
            },
        ),
    }
    ctk = (HERE / "standin" / "nvidia-ctk").read_text().replace("@VERSION@", version)
    for name, (depends, files) in specs.items():
        tree = pool / f"{name}_{version}"
        (tree / "DEBIAN").mkdir(parents=True)
        (tree / "DEBIAN/control").write_text(_control(name, version, arch, depends))
        for rel, content in files.items():
            dest = tree / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(ctk if content is None else content)
            dest.chmod(0o755 if rel.startswith("usr/bin/") else 0o644)
        run(
            [
                "dpkg-deb",
                "--root-owner-group",
                "-Zgzip",
                "--build",
                str(tree),
                str(pool / f"{name}_{v}_{arch}.deb"),
            ]
        )
        shutil.rmtree(tree)


def _release(root: Path) -> str:
    fields = [
        "Origin: gpufleet-test-mirror",
        "Label: gpufleet-test-mirror",
        f"Date: {formatdate(usegmt=True)}",
    ]
    for algo, hname in (("md5", "MD5Sum"), ("sha256", "SHA256")):
        fields.append(f"{hname}:")
        for name in ("Packages", "Packages.gz"):
            data = (root / name).read_bytes()
            fields.append(f" {hashlib.new(algo, data).hexdigest()} {len(data)} {name}")
    return "\n".join(fields) + "\n"


def build_mirror(root: Path, gnupghome: Path, addr: str) -> Mirror:
    """A flat apt repository (NVIDIA's layout), signed by a key made for this run."""
    pool = root / "pool"
    pool.mkdir(parents=True)
    for version in TOOLKIT_VERSIONS:
        _build_debs(pool, version)
    packages = run(["dpkg-scanpackages", "--multiversion", "pool", "/dev/null"], cwd=root).stdout
    (root / "Packages").write_text(packages)
    with gzip.open(root / "Packages.gz", "wt") as f:
        f.write(packages)
    (root / "Release").write_text(_release(root))
    gnupghome.mkdir(mode=0o700, parents=True)
    gpg = [
        "gpg",
        "--homedir",
        str(gnupghome),
        "--batch",
        "--yes",
        "--pinentry-mode",
        "loopback",
        "--passphrase",
        "",
    ]
    run(
        [
            *gpg,
            "--quick-gen-key",
            "gpufleet test mirror <mirror@gpufleet.invalid>",
            "ed25519",
            "sign",
            "1d",
        ]
    )
    run([*gpg, "--clearsign", "-o", str(root / "InRelease"), str(root / "Release")])
    run([*gpg, "--armor", "--detach-sign", "-o", str(root / "Release.gpg"), str(root / "Release")])
    run([*gpg, "--armor", "--export", "-o", str(root / "key.asc")])
    base = f"http://{addr}:{MIRROR_PORT}"
    return Mirror(root=root, url=f"{base}/", key_url=f"{base}/key.asc", addr=addr)


def serve_mirror(mirror: Mirror, log: Path) -> None:
    mirror.server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "http.server",
            "--bind",
            mirror.addr,
            "--directory",
            str(mirror.root),
            str(MIRROR_PORT),
        ],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    wait_port(mirror.addr, MIRROR_PORT)
    if mirror.server.poll() is not None:
        raise RuntimeError(f"the mirror's http.server exited: {log.read_text()[-2000:]}")


SSHD_CONFIG = """# gpufleet role-test target
ListenAddress {addr}
Port 22
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PidFile none
Subsystem sftp internal-sftp
"""


@dataclass
class Target:
    root: Path
    workdir: Path
    addr: str
    key: Path = field(init=False)
    known_hosts: Path = field(init=False)
    sshd: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        self.key = self.workdir / "id_ed25519"
        self.known_hosts = self.workdir / "known_hosts"

    def chroot(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """Run a command inside the target's tree (for assertions on real state)."""
        return run(["chroot", str(self.root), *argv])

    def stop(self) -> None:
        stop_pid(self.sshd)


def prepare_target(workdir: Path, addr: str) -> Target:
    """Unpack the cached tree; add Debian's archives, fresh host and client keys, known_hosts."""
    root = workdir / "root"
    root.mkdir(parents=True)
    run(["tar", "-C", str(root), "--numeric-owner", "-xf", str(rootfs_tarball())])
    t = Target(root=root, workdir=workdir, addr=addr)
    archives = host_debian_archives()
    lines = [f"deb {archives[SUITE]} {SUITE} main"]
    for suite in (f"{SUITE}-updates", f"{SUITE}-security"):
        if suite in archives:
            lines.append(f"deb {archives[suite]} {suite} main")
    (root / "etc/apt/sources.list").write_text("\n".join(lines) + "\n")
    return ssh_access(t)


def ssh_access(t: Target) -> Target:
    """The target's resolver and hosts, its sshd config, a fresh host key and client key, and
    known_hosts naming that host key."""
    root = t.root
    for name in ("resolv.conf", "hosts"):
        shutil.copy(f"/etc/{name}", root / "etc" / name)
    (root / "etc/ssh/sshd_config_gpufleet").write_text(SSHD_CONFIG.format(addr=t.addr))
    # A host key of its own per run: a client that reached another run's sshd fails verification.
    for old in (root / "etc/ssh").glob("ssh_host_*"):
        old.unlink()
    hostkey = root / "etc/ssh/ssh_host_ed25519_key"
    run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpufleet-target", "-f", str(hostkey)]
    )
    (root / "run/sshd").mkdir(parents=True, exist_ok=True)
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpufleet-tests", "-f", str(t.key)])
    ssh_dir = root / "root/.ssh"
    ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    (ssh_dir / "authorized_keys").write_text(t.key.with_suffix(".pub").read_text())
    (ssh_dir / "authorized_keys").chmod(0o600)
    kind, b64 = hostkey.with_suffix(".pub").read_text().split()[:2]
    t.known_hosts.write_text(f"{t.addr} {kind} {b64}\n")
    return t


APT_CACHE = CACHE / "apt-archives" / f"debian12-{SUITE}"


def seed_apt_cache(t: Target) -> None:
    link_debs(APT_CACHE, t.root / "var/cache/apt/archives")


def save_apt_cache(t: Target) -> None:
    link_debs(t.root / "var/cache/apt/archives", APT_CACHE)


DEV_NODES = ["null", "zero", "full", "random", "urandom", "tty"]


def stop_lab(t: Target | None, mirror: Mirror | None, gnupg: Path) -> None:
    """A lab's teardown, on every exit path: the target's sshd and mounts (by PID), its apt
    cache kept for the next run, the mirror's HTTP server, the mirror key's gpg-agent."""
    if t is not None:
        t.stop()
        save_apt_cache(t)
    if mirror is not None:
        mirror.stop()
    if gnupg.exists():
        subprocess.run(["gpgconf", "--homedir", str(gnupg), "--kill", "gpg-agent"], check=False)


def start_sshd(t: Target, log: Path, binds: Sequence[tuple[str, str]] = (), boot: str = "") -> None:
    """sshd in its own mount namespace: the bind mounts vanish with it, also after a crash.

    binds: (path on this machine, path inside the target) pairs mounted there as well (a file or
    a directory, e.g. a Docker engine's socket). boot: sh text run in that namespace just before
    sshd starts (what a boot does before the host is reachable, e.g. load kernel modules)."""
    r = str(t.root)
    extra = "".join(
        f"{'mkdir -p' if Path(src).is_dir() else 'touch'} {shlex.quote(r + dst)}; "
        f"mount --bind {shlex.quote(src)} {shlex.quote(r + dst)}; "
        for src, dst in binds
    )
    # A private /dev (tmpfs with the host's basic nodes bound in) lets a test put a stand-in
    # /dev/nvidia0 there without touching the host's /dev.
    nodes = " ".join(DEV_NODES)
    script = (
        "set -e; "
        f"mount -t tmpfs -o mode=0755,size=1m gpufleet-dev {r}/dev; "
        f"for n in {nodes}; do touch {r}/dev/$n; mount --bind /dev/$n {r}/dev/$n; done; "
        f"mkdir {r}/dev/pts {r}/dev/shm; mount --bind /dev/pts {r}/dev/pts; "
        f"mount -t tmpfs -o mode=1777,size=64m gpufleet-shm {r}/dev/shm; "
        f"ln -s /proc/self/fd {r}/dev/fd; ln -s pts/ptmx {r}/dev/ptmx; "
        f"ln -s /proc/self/fd/0 {r}/dev/stdin; ln -s /proc/self/fd/1 {r}/dev/stdout; "
        f"ln -s /proc/self/fd/2 {r}/dev/stderr; "
        f"mount --bind /proc {r}/proc; mount --rbind /sys {r}/sys; {extra}{boot}"
        f"exec chroot {r} /usr/sbin/sshd -D -e -f /etc/ssh/sshd_config_gpufleet"
    )
    # unshare without --fork execs sh, which execs chroot, which execs sshd: Popen's pid is sshd's.
    t.sshd = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    try:
        wait_port(t.addr, 22)
        if t.sshd.poll() is not None:
            raise RuntimeError("sshd exited")
    except RuntimeError:
        t.stop()
        raise RuntimeError(f"sshd did not start: {log.read_text()[-2000:]}") from None


def probe_driver_version(t: Target) -> str:
    """The nvidia-smi version Debian's non-free archive offers now (what the converge pins)."""
    archives = host_debian_archives()
    probe = Path("/tmp/gpufleet-probe")
    inside = t.root / probe.relative_to("/")
    (inside / "lists/partial").mkdir(parents=True)
    suites = [SUITE] + [s for s in (f"{SUITE}-updates", f"{SUITE}-security") if s in archives]
    (inside / "sources.list").write_text(
        "".join(f"deb {archives[s]} {s} non-free\n" for s in suites)
    )
    opts = [
        "-o",
        f"Dir::Etc::SourceList={probe}/sources.list",
        "-o",
        "Dir::Etc::SourceParts=/nonexistent",
        "-o",
        f"Dir::State::Lists={probe}/lists",
        "-o",
        f"Dir::Cache={probe}",
    ]
    try:
        run(["chroot", str(t.root), "apt-get", "-qq", *opts, "update"])
        policy = run(["chroot", str(t.root), "apt-cache", *opts, "policy", "nvidia-smi"]).stdout
    finally:
        shutil.rmtree(inside, ignore_errors=True)
    for line in policy.splitlines():
        if "Candidate:" in line:
            return line.split()[1].split("-")[0]
    raise RuntimeError(f"no nvidia-smi candidate in Debian non-free:\n{policy}")


def start_gpu_process(t: Target, comm: str = "sleep") -> subprocess.Popen[bytes]:
    """A process inside the target holding a stand-in /dev/nvidia0 open, as a CUDA job holds the
    real one (the target's /dev is private to its sshd's mount namespace). comm: its process
    name (/proc/PID/comm), e.g. a device daemon's; sleep copied to that name."""
    assert t.sshd is not None
    r = str(t.root)
    inner = ("exec sleep 600 3</dev/nvidia0" if comm == "sleep" else
             f"cp /bin/sleep /tmp/{comm} && exec /tmp/{comm} 600 3</dev/nvidia0")
    proc = subprocess.Popen(
        [
            "nsenter",
            "-t",
            str(t.sshd.pid),
            "-m",
            "--",
            "sh",
            "-c",
            f": > {r}/dev/nvidia0; exec chroot {r} sh -c '{inner}'",
        ],
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if os.readlink(f"/proc/{proc.pid}/fd/3").endswith("/dev/nvidia0"):
                return proc
        except OSError:
            pass
        time.sleep(0.1)
    stop_pid(proc)
    raise RuntimeError("the stand-in GPU process did not open /dev/nvidia0")
