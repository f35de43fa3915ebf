"""A real Docker engine and a real registry for the tests, on this machine, without systemd.

`make_lab()` starts Debian's `dockerd` (docker.io) with its own state dirs under one short root
(`/var/tmp/gfdk-<pid>-<n>`: data root, exec root, its managed containerd, the API socket, the
pidfile and `etc-docker/daemon.json` as its --config-file) and Debian's `docker-registry` (the
distribution registry, v2 API) on `127.0.0.11x:5000` with its own storage dir. The engine runs
with `--iptables=false --bridge=none`: containers use the host network (`docker run --network
host`), the only mode the tests need, and the machine's firewall is never touched.

Stopped by PID when the lab closes — on success, on failure, on KeyboardInterrupt, at interpreter
exit (atexit) and, if the test process is killed outright, by the kernel (PR_SET_PDEATHSIG):
every container of the engine is removed first, then dockerd gets SIGTERM (it stops its
containerd), then anything still running from the lab root (shims) is killed, the mounts under the
root are unmounted and the root is removed. `DockerLab.leftovers()` says what would remain.

Reused by later harnesses (workspace containers): a lab gives `env` (DOCKER_HOST for any docker
client), `socket`, `registry` (host:port), and after `push_test_image()` the image's `ref`
(registry/repo:tag) and `digest`.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # tests/: the shared harness
from harness.processes import (
    close_at_exit,
    closed,
    die_with_parent,
    owner_alive,
    stop_pid,
)

DOCKERD = "/usr/sbin/dockerd"
DOCKER = "/usr/bin/docker"  # Debian's client, the daemon's own version (not whatever is on PATH)
REGISTRY = "/usr/bin/docker-registry"
ADDRESSES = tuple(f"127.0.0.{n}" for n in range(110, 120))  # this harness's loopback range
REGISTRY_PORT = 5000
LABEL = "gpufleet.test"  # containers the tests start themselves carry it
TEST_REPO = "gpufleet/pytorch-cpu"
TEST_TAG = "2.13.0"

RESERVATIONS = Path("/tmp/gpufleet-docker-addresses")
_counter = itertools.count()


class LabError(RuntimeError):
    """The engine or the registry could not be started (not a test finding)."""


@dataclass(eq=False)  # identity: labs are kept in a set until closed
class DockerLab:
    root: Path
    address: str
    engine: subprocess.Popen[bytes] | None = None
    registry_proc: subprocess.Popen[bytes] | None = None
    ref: str = ""  # registry/repo:tag of the pushed test image
    digest: str = ""  # its manifest digest, sha256:…
    bridge: str | None = None  # own bridge for the engine's default network (bridge labs only)
    _closed: bool = field(default=False, repr=False)

    # ------------------------------------------------------------------ paths and clients

    @property
    def socket(self) -> Path:
        return self.root / "docker.sock"

    @property
    def pidfile(self) -> Path:
        return self.root / "docker.pid"

    @property
    def config_dir(self) -> Path:
        """The engine's /etc/docker: daemon.json here is its --config-file."""
        return self.root / "etc-docker"

    @property
    def daemon_json(self) -> Path:
        return self.config_dir / "daemon.json"

    @property
    def registry(self) -> str:
        return f"{self.address}:{REGISTRY_PORT}"

    @property
    def pinned(self) -> str:
        """The test image as repository@digest."""
        return f"{self.ref.rsplit(':', 1)[0]}@{self.digest}"

    @property
    def env(self) -> dict[str, str]:
        """Environment for a docker client talking to this engine (own client config dir)."""
        return {**os.environ, "DOCKER_HOST": f"unix://{self.socket}",
                "DOCKER_CONFIG": str(self.root / "client")}  # fmt: skip

    def docker(
        self, *args: str, check: bool = True, timeout: float = 300, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([DOCKER, *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout, input=input, check=False)  # fmt: skip
        if check and proc.returncode != 0:
            raise LabError(f"docker {' '.join(args)} exited {proc.returncode}: "
                           f"{(proc.stderr or proc.stdout).strip()[-2000:]}")
        return proc

    def containers(self, label: str = LABEL) -> list[str]:
        """IDs of containers (running or not) carrying the label (key or key=value)."""
        out = self.docker("ps", "-a", "-q", "--no-trunc", "--filter", f"label={label}").stdout
        return out.split()

    def info(self) -> dict[str, object]:
        data = json.loads(self.docker("info", "--format", "{{json .}}").stdout)
        assert isinstance(data, dict)
        return data

    def image_present(self, ref: str) -> bool:
        return self.docker("image", "inspect", ref, check=False).returncode == 0

    def pull_test_image(self) -> None:
        if not self.image_present(self.pinned):
            self.docker("pull", self.pinned)

    def reload(self) -> None:
        """SIGHUP: dockerd re-reads daemon.json (the reloadable keys)."""
        assert self.engine is not None
        os.kill(self.engine.pid, signal.SIGHUP)

    def log_tail(self, name: str = "dockerd", lines: int = 30) -> str:
        try:
            text = (self.root / f"{name}.log").read_text(errors="replace")
        except OSError:
            return f"(no {name} log)"
        return "\n".join(text.splitlines()[-lines:])

    # ------------------------------------------------------------------ the test image

    def push_test_image(self, archive: Path) -> None:
        """docker load the built archive, push it to the registry, read its digest, and remove it
        from the engine again (so that what the tests pull comes from the registry)."""
        loaded = self.docker("load", "-i", str(archive), timeout=600).stdout
        local = f"{TEST_REPO}:{TEST_TAG}"
        if local not in loaded:
            raise LabError(f"docker load did not report {local}: {loaded.strip()[-500:]}")
        self.ref = f"{self.registry}/{local}"
        self.docker("tag", local, self.ref)
        self.docker("push", self.ref, timeout=600)
        digests = json.loads(self.docker("image", "inspect", "--format", "{{json .RepoDigests}}",
                                         self.ref).stdout)  # fmt: skip
        repo = self.ref.rsplit(":", 1)[0]
        mine = [d for d in digests if d.startswith(repo + "@")]
        if not mine:
            raise LabError(f"no RepoDigest for {repo} after push: {digests}")
        self.digest = mine[0].split("@", 1)[1]
        self.docker("image", "rm", local, self.ref)

    def provide_test_image(self, archive: Path) -> None:
        """The test image in the registry: pushed for real from the archive when the cache holds
        no registry storage of that archive yet (then that storage is cached next to it), else
        the cached storage is copied into this registry's storage dir (blobs hard-linked: they
        are immutable; the small link files copied, as the registry rewrites them in place)."""
        seed = archive.with_name(archive.stem + ".registry")
        meta = seed / "gpufleet-test-image.json"
        with (archive.parent / ".lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if meta.exists():
                data = json.loads(meta.read_text())
                copy_storage(seed / "docker", self.root / "registry" / "docker")
                self.ref = f"{self.registry}/{data['repo_tag']}"
                self.digest = str(data["digest"])
                return
            self.push_test_image(archive)
            part = seed.with_suffix(".part")
            subprocess.run(["rm", "-rf", str(part)], check=True)
            part.mkdir()
            copy_storage(self.root / "registry" / "docker", part / "docker")
            (part / meta.name).write_text(json.dumps(
                {"repo_tag": f"{TEST_REPO}:{TEST_TAG}", "digest": self.digest}))
            subprocess.run(["rm", "-rf", str(seed)], check=True)
            part.rename(seed)

    def push_variant(self, tag: str, label: str) -> str:
        """A different image (the test image plus a label) pushed under repo:tag; its digest."""
        self.pull_test_image()
        target = f"{self.ref.rsplit(':', 1)[0]}:{tag}"
        dockerfile = f"FROM {self.pinned}\nLABEL {LABEL}.variant={json.dumps(label)}\n"
        self.docker("build", "-q", "-t", target, "-", input=dockerfile)
        self.docker("push", target)
        digests = json.loads(self.docker("image", "inspect", "--format", "{{json .RepoDigests}}",
                                         target).stdout)  # fmt: skip
        return str(digests[0]).split("@", 1)[1]

    # ------------------------------------------------------------------ stopping

    def leftovers(self) -> list[str]:
        """What of this lab still exists: processes started from its root, mounts under it."""
        left = [f"process {pid}: {cmd}" for pid, cmd in _processes_under(self.root)]
        left += [f"mount {m}" for m in _mounts_under(self.root)]
        for proc, what in ((self.engine, "dockerd"), (self.registry_proc, "registry")):
            if proc is not None and proc.poll() is None:
                left.append(f"{what} pid {proc.pid}")
        return left

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._stop()
        finally:
            closed(self)

    def _stop(self) -> None:
        if self.engine is not None and self.engine.poll() is None:
            with contextlib.suppress(LabError, subprocess.TimeoutExpired, OSError):
                ids = self.docker("ps", "-a", "-q", timeout=30).stdout.split()
                if ids:
                    self.docker("rm", "-f", *ids, check=False, timeout=60)
        stop_pid(self.engine, 30)
        stop_pid(self.registry_proc, 10)
        if self.bridge is not None:
            subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, check=False)
        for pid, _ in _processes_under(self.root):  # shims re-parented away from dockerd
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for mount in reversed(_mounts_under(self.root)):
            subprocess.run(["umount", "-l", mount], capture_output=True, check=False)
        subprocess.run(["rm", "-rf", "--one-file-system", str(self.root)], check=False)


def tiny_image(lab: DockerLab, ref: str = "gpufleet/tiny:1") -> str:
    """A few-MB image made of this machine's /bin/sh and /bin/sleep with their libraries
    (`docker import`), for tests of the engine itself."""
    files = {"/bin/sh", "/bin/sleep"}
    for binary in list(files):
        ldd = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
        files.update(w for w in ldd.split() if w.startswith("/"))
    tar = subprocess.run(["tar", "-C", "/", "--dereference", "-cf", "-",
                          *sorted(f.lstrip("/") for f in files)],
                         capture_output=True, check=True).stdout  # fmt: skip
    proc = subprocess.run([DOCKER, "import", "-", ref], input=tar, env=lab.env,
                          capture_output=True, check=False)  # fmt: skip
    if proc.returncode != 0:
        raise LabError(f"docker import failed: {proc.stderr.decode(errors='replace')}")
    return ref


def copy_storage(src: Path, dst: Path) -> None:
    """Registry storage src into dst: blobs hard-linked, small files copied, existing kept."""
    for path in sorted(src.rglob("*")):
        out = dst / path.relative_to(src)
        if path.is_dir():
            out.mkdir(parents=True, exist_ok=True)
        elif out.exists():
            continue
        elif "blobs" in path.relative_to(src).parts:
            try:
                os.link(path, out)
            except OSError:
                shutil.copy2(path, out)
        else:
            shutil.copy2(path, out)


def _processes_under(root: Path) -> list[tuple[int, str]]:
    """Processes whose command line names the lab root (dockerd, containerd, shims, registry)."""
    needle = str(root).encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if needle in cmd:
            found.append((int(entry), cmd.replace(b"\0", b" ").decode(errors="replace")[:200]))
    return found


def _mounts_under(root: Path) -> list[str]:
    prefix = str(root).rstrip("/") + "/"
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")
        if point == str(root) or point.startswith(prefix):
            found.append(point)
    return found


def sweep_stale() -> list[Path]:
    """Remove the roots of labs whose test process is gone (SIGKILLed: the kernel ended their
    daemons, but a dead process cannot unmount the engine's netns file or delete its tree)."""
    swept = []
    for root in Path("/var/tmp").glob("gfdk-*-*"):
        try:
            os.kill(int(root.name.split("-")[1]), 0)
            continue
        except ProcessLookupError:
            pass
        except (PermissionError, ValueError):
            continue
        for pid in [p for p, _ in _processes_under(root)] + _container_processes(root):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for mount in reversed(_mounts_under(root)):
            subprocess.run(["umount", "-l", mount], capture_output=True, check=False)
        subprocess.run(["rm", "-rf", "--one-file-system", str(root)], check=False)
        swept.append(root)
    return swept


def _container_processes(root: Path) -> list[int]:
    """Processes in the cgroup of a container of the lab at root (its ids are data/containers/*):
    what is left when the engine was killed before it could stop its containers."""
    ids = [d.name for d in (root / "data" / "containers").glob("*") if len(d.name) == 64]
    found = []
    for entry in os.listdir("/proc") if ids else ():
        try:
            cgroup = Path(f"/proc/{entry}/cgroup").read_text() if entry.isdigit() else ""
        except OSError:
            continue
        if any(i in cgroup for i in ids):
            found.append(int(entry))
    return found


def _port_free(address: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((address, port))
        except OSError:
            return False
    return True


def free_address(ports: Sequence[int] = (REGISTRY_PORT, 22)) -> str:
    """An address of 127.0.0.110-119, reserved for this process until it exits, where nothing
    listens on any of the ports. The reservation (a file holding the PID, taken under a lock)
    keeps concurrent test runs apart between choosing an address and binding it."""
    RESERVATIONS.mkdir(mode=0o755, exist_ok=True)
    with (RESERVATIONS / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for address in ADDRESSES:
            mark = RESERVATIONS / address
            if mark.exists() and owner_alive(mark):
                continue
            if all(_port_free(address, p) for p in ports):
                mark.write_text(str(os.getpid()))
                return address
    raise LabError(f"no address in 127.0.0.110-119 has ports {list(ports)} free "
                   f"(reservations in {RESERVATIONS})")


def _wait(check: object, what: str, proc: subprocess.Popen[bytes], log: Path,
          timeout: float) -> None:  # fmt: skip
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            raise LabError(f"{what} exited with {proc.returncode}; log {log}:\n{tail}")
        if check():  # type: ignore[operator]
            return
        if time.monotonic() > deadline:
            raise LabError(f"{what} not ready after {timeout}s; log {log}")
        time.sleep(0.2)


def _connects(address: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((address, port)) == 0


def start_lab(daemon_json: dict[str, object] | None = None, bridge: bool = False) -> DockerLab:
    """Start an engine and a registry; the caller must close() the lab (prefer make_lab).

    bridge: the engine's default network is a bridge of the lab's own (gfb<pid><n>, on a free
    10.232.N.1/24, created here, deleted at close) instead of none, still with --iptables=false
    and --ip-masq=false: `docker run -p 127.0.0.1:PORT:PORT` is served by docker-proxy on the
    loopback address and containers on the bridge reach nothing outside the machine."""
    if os.geteuid() != 0:
        raise LabError("the Docker test lab needs root (dockerd)")
    for tool, pkg in ((DOCKERD, "docker.io"), (DOCKER, "docker.io"), (REGISTRY, "docker-registry")):
        if not Path(tool).exists():
            raise LabError(f"{tool} missing: install {pkg} (scripts/setup.sh does)")
    # Short: the engine's containerd puts sockets under the exec root (108-byte path limit).
    sweep_stale()
    root = Path(f"/var/tmp/gfdk-{os.getpid()}-{next(_counter)}")
    subprocess.run(["rm", "-rf", "--one-file-system", str(root)], check=False)
    root.mkdir(parents=True)
    lab = DockerLab(root=root, address=free_address())
    if bridge:
        lab.bridge = f"gfb{os.getpid()}{next(_counter)}"[-15:]
    close_at_exit(lab)
    try:
        _start(lab, daemon_json or {})
    except BaseException:
        lab.close()
        raise
    return lab


def _start(lab: DockerLab, daemon_json: dict[str, object]) -> None:
    root = lab.root
    for d in ("data", "exec", "registry", "client", "etc-docker"):
        (root / d).mkdir()
    lab.daemon_json.write_text(json.dumps(daemon_json, indent=2) + "\n")
    reg_cfg = root / "registry.yml"
    reg_cfg.write_text(json.dumps({
        "version": 0.1,
        "log": {"level": "warn", "accesslog": {"disabled": True}},
        "storage": {"filesystem": {"rootdirectory": str(root / "registry")},
                    "delete": {"enabled": True}},
        "http": {"addr": lab.registry},
    }))  # fmt: skip  (YAML is a superset of JSON)
    reg_log = root / "registry.log"
    with reg_log.open("wb") as log:
        lab.registry_proc = subprocess.Popen(
            [REGISTRY, "serve", str(reg_cfg)], stdin=subprocess.DEVNULL, stdout=log,
            stderr=log, start_new_session=True, preexec_fn=die_with_parent,
        )  # fmt: skip
    if lab.bridge is not None:
        _make_bridge(lab.bridge)
    eng_log = root / "dockerd.log"
    with eng_log.open("wb") as log:
        lab.engine = subprocess.Popen(
            [DOCKERD, "--iptables=false", "--ip-masq=false", f"--bridge={lab.bridge or 'none'}",
             "--data-root", str(root / "data"), "--exec-root", str(root / "exec"),
             "-H", f"unix://{lab.socket}", "--pidfile", str(lab.pidfile),
             "--config-file", str(lab.daemon_json)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
            preexec_fn=die_with_parent,
        )  # fmt: skip
    _wait(lambda: _connects(lab.address, REGISTRY_PORT), "docker-registry", lab.registry_proc,
          reg_log, 20)  # fmt: skip

    def engine_answers() -> bool:
        return lab.socket.exists() and lab.docker("version", check=False,
                                                  timeout=10).returncode == 0

    _wait(engine_answers, "dockerd", lab.engine, eng_log, 60)


def _make_bridge(name: str) -> None:
    """A bridge with the first free 10.232.N.1/24 (N 1-250) of this machine, up."""
    used = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True,
                          check=True).stdout  # fmt: skip
    for n in range(1, 251):
        cidr = f"10.232.{n}.1/24"
        if f" 10.232.{n}." in used:
            continue
        for argv in (["ip", "link", "add", name, "type", "bridge"],
                     ["ip", "addr", "add", cidr, "dev", name], ["ip", "link", "set", name, "up"]):
            proc = subprocess.run(argv, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise LabError(f"{' '.join(argv)}: {proc.stderr.strip()}")
        return
    raise LabError("no free 10.232.N.0/24 for the lab's bridge")


@contextlib.contextmanager
def make_lab(
    daemon_json: dict[str, object] | None = None, bridge: bool = False
) -> Iterator[DockerLab]:
    lab = start_lab(daemon_json, bridge)
    try:
        yield lab
    finally:
        lab.close()


@contextlib.contextmanager
def scratch_workdir(name: str, logs_env: str, logs_default: str) -> Iterator[Path]:
    """/var/tmp/NAME-PID for one target's run, emptied first; afterwards (also on failure and
    Ctrl-C) its logs/ are kept at $LOGS_ENV (default LOGS_DEFAULT) and the rest removed without
    crossing into mounts the run left behind."""
    workdir = Path(f"/var/tmp/{name}-{os.getpid()}")
    shutil.rmtree(workdir, ignore_errors=True)
    try:
        yield workdir
    finally:
        keep = Path(os.environ.get(logs_env, logs_default))
        shutil.rmtree(keep, ignore_errors=True)
        if (workdir / "logs").exists():
            shutil.copytree(workdir / "logs", keep)
        subprocess.run(["rm", "-rf", "--one-file-system", str(workdir)], check=False)
