"""The real-sshd test fleet: one OpenSSH `sshd` per simulated host on 127.0.0.N:22.

Each daemon runs in its own mount namespace (`unshare --mount --propagation private`) where the
host profile's GPU-facing pieces are mounted (tests/fleet/README.md has the profile contract), with
its own ed25519 host key. The client key, known_hosts, inventory and a throwaway HOME are made per
fleet, so the developer's ~/.ssh is never read or written. Every daemon is stopped by PID when the
fleet closes: on success, on failure, on KeyboardInterrupt, at interpreter exit (atexit), and, if
this process is killed outright, by the kernel (PR_SET_PDEATHSIG).

Used by tests/fleet/conftest.py (the `fleet` fixture) and benchmarks/sweep.py (the 32-host sweep).
Needs root (mount namespaces, binding port 22) and /usr/sbin/sshd.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

sys.path.append(str(Path(__file__).resolve().parents[1]))  # tests/: the shared harness
from harness.processes import (
    close_at_exit,
    closed,
    die_with_parent,
    owner_alive,
    stop_trees,
)
from harness.sshhost import (
    SSHD,
    boot_loop,
    boot_steps,
    client_argv,
    connection_vars,
    controller_env,
    keygen_all,
    mask_bashrc,
    public_key,
    sshd_config,
)

REPO = Path(__file__).resolve().parents[2]


def built_profiles() -> Path:
    """The profiles tree built from tests/fleet/profiles/overlays (cached by content)."""
    import importlib.util  # noqa: PLC0415

    path = REPO / "tests/fleet/profiles/build_profiles.py"
    spec = importlib.util.spec_from_file_location("gpufleet_build_profiles", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return Path(mod.ensure_built())


# GPUFLEET_FLEET_PROFILES points the fleet at another profiles tree (e.g. while writing a profile);
# by default the overlays are built at fleet start (tests/fleet/profiles/README.md).
PROFILES_DIR = Path(os.environ.get("GPUFLEET_FLEET_PROFILES") or built_profiles())
# First directory on root's PATH in a Debian sshd session (the compiled-in superuser PATH, once
# root's ~/.bashrc is masked, see _namespace_script); a profile's bin/ is mounted here.
PROFILE_BIN_TARGET = "/usr/local/sbin"
# 127.0.0.1 is left alone; the rest of 127/8 routes to lo on Linux without configuration.
ADDRESS_POOL = tuple(f"127.0.0.{n}" for n in range(2, 61))
# Cross-process reservations, so two test runs on one machine never share an address.
RESERVATIONS = Path("/tmp/gpufleet-fleet-addresses")
FAULTS = ("down", "badkey", "noauth", "noresolve")
NORESOLVE_ADDRESS = "noresolve.gpufleet.invalid"  # RFC 6761: .invalid never resolves
CPU_PROFILE = "no-nvidia-smi"

# Desired state that matches the healthy profile (h200x2), as group vars of `gpu`: the values
# tests/fleet/profiles/README.md lists (any image ref is present there, with this digest).
DESIRED_STATE: dict[str, Any] = {
    "nvidia_driver_version": "580.159.04",
    "nvidia_container_toolkit_version": "1.19.1",
    "container_runtime_engine": "docker",
    "pytorch_image": "pytorch/pytorch:2.11.0-cuda13.0-cudnn9-runtime",
    "pytorch_image_digest": (
        "sha256:991fe96ed17cd3758bd498c26e7953ec34ed6ce4c97b4f5748acb365582d2f19"
    ),
}

# The default session fleet: every GPU profile once, h200x2 three times (peers), two CPU hosts.
GPU_PROFILES = (
    "h200x2", "h200x8", "driver-drift", "nvml-mismatch", "nvidia-smi-hang", "ecc-remap", "xid",
    "pcie-degraded", "nvlink-down", "persistence-off", "old-toolkit", "wrong-digest", "busy",
    "fabric-incomplete", "gpu-missing",
)  # fmt: skip
SESSION_HOSTS: tuple[tuple[str, str], ...] = (
    ("h200x2-1", "h200x2"),
    ("h200x2-2", "h200x2"),
    ("h200x2-3", "h200x2"),
    *((p, p) for p in GPU_PROFILES if p != "h200x2"),
    ("cpu-1", CPU_PROFILE),
    ("cpu-2", CPU_PROFILE),
)



FULL_TMP_HOLD = Path("/run/gpufleet-full-tmp-hold")  # an empty mount point outside /tmp


class FleetError(RuntimeError):
    """The fleet itself could not be set up (not a finding about a simulated host)."""


@dataclass
class FleetHost:
    name: str
    address: str
    profile: str | None
    pid: int | None = None  # the sshd listener; None while stopped (and always for down/noresolve)
    host_key_pub: str = ""  # "ssh-ed25519 AAAA…" this daemon serves
    fault: str | None = None  # one of FAULTS, or None for a healthy connection
    group: str = "gpu"
    config: Path = field(default=Path())
    log: Path = field(default=Path())
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def fingerprint(self) -> str:
        """SHA256 fingerprint of the served host key, as `ssh-keygen -l` prints it."""
        out = subprocess.run(
            ["ssh-keygen", "-l", "-f", "-"],
            input=self.host_key_pub, capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        return out.split()[1]


class Fleet:
    """A running fleet. Close it (or use make_fleet) to stop every daemon."""

    def __init__(self, root: Path, profiles_dir: Path) -> None:
        self.root = root
        self.profiles_dir = profiles_dir
        self.hosts: dict[str, FleetHost] = {}
        # Hosts whose /tmp is a 64 KiB tmpfs filled to the last byte (issue 22: a full /tmp).
        self.full_tmp: set[str] = set()
        self.inventory = root / "inventory.yml"
        self.known_hosts = root / "known_hosts"
        self.client_key = root / "client_ed25519"
        self.home = root / "home"
        self.env: dict[str, str] = {}
        self._reserved: list[str] = []
        self._closed = False

    # ------------------------------------------------------------------ running things

    def run(
        self, argv: Sequence[str], *, timeout: float = 120.0, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a controller-side command with the fleet's env (temp HOME), cwd = fleet root."""
        return subprocess.run(
            list(argv), env=self.env, cwd=self.root, capture_output=True, text=True,
            timeout=timeout, input=input, check=False,
        )  # fmt: skip

    def run_cli(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """`python -m gpufleet ARGS` with the interpreter running the tests."""
        return self.run([sys.executable, "-m", "gpufleet", *args], timeout=timeout)

    def check_json(self, *args: str, level: str = "facts", rc: tuple[int, ...] = (1,),
                   timeout: float = 300.0) -> dict[str, Any]:
        """`gpufleet check -i INVENTORY --level LEVEL --format json ARGS`, its exit code asserted
        to be one of RC (stderr in the message), its JSON report returned."""
        r = self.run_cli("check", "-i", str(self.inventory), "--level", level, "--format", "json",
                         *args, timeout=timeout)
        assert r.returncode in rc, f"exit {r.returncode}; stderr:\n{r.stderr[-3000:]}"
        doc: dict[str, Any] = json.loads(r.stdout)
        return doc

    def ssh_argv(self, name: str, *remote: str) -> list[str]:
        """Plain OpenSSH argv for one host, strict host key checking against the fleet's file."""
        return client_argv(self.hosts[name].address, self.client_key, self.known_hosts, *remote)

    def log_tail(self, name: str, lines: int = 20) -> str:
        try:
            text = self.hosts[name].log.read_text(errors="replace")
        except OSError:
            return "(no sshd log)"
        return "\n".join(text.splitlines()[-lines:])

    # ------------------------------------------------------------------ daemons

    def start(self, name: str, *, timeout: float = 10.0) -> None:
        """(Re)start one host's sshd and wait until it accepts TCP."""
        self._spawn([self.hosts[name]])
        self._wait_ready([self.hosts[name]], timeout)

    def stop(self, name: str) -> None:
        """Kill one host's sshd listener and its live sessions, by PID, as a host going down."""
        self._kill([self.hosts[name]])

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._kill(list(self.hosts.values()))
        finally:
            _release(self._reserved)
            closed(self)

    def _spawn(self, hosts: Sequence[FleetHost]) -> None:
        for h in hosts:
            if h.pid is not None or h.fault in ("down", "noresolve"):
                continue
            log = h.log.open("ab")
            boot = ["unshare", "--mount", "--propagation", "private"]
            argv = [*boot, "sh", "-c", self._namespace_script(h)]
            if self._rebootable(h):
                argv = ["sh", "-c", self._boot_loop(h, boot)]
            try:
                h.proc = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                    start_new_session=True, preexec_fn=die_with_parent,
                )  # fmt: skip
            finally:
                log.close()
            # unshare and sh exec in place, so this PID ends up being sshd itself (for a
            # rebootable host: the loop that boots it, see _boot_loop).
            h.pid = h.proc.pid

    def _rebootable(self, h: FleetHost) -> bool:
        return h.profile is not None and (
            self.profiles_dir / h.profile / "bin" / "gpufleet-sim-reboot").is_file()

    def _boot_loop(self, h: FleetHost, boot: list[str]) -> str:
        """A host whose profile can reboot (bin/gpufleet-sim-reboot) is booted by a loop
        (harness.sshhost.boot_loop): each boot a new mount and PID namespace with sshd as its
        PID 1, a fresh /proc/driver (the driver's state starts anew) and a new boot id.
        _wait_ready reports a loop that ended (sshd could not start)."""
        return boot_loop(boot, ["sh", "-c", self._namespace_script(h)])

    def _namespace_script(self, h: FleetHost) -> str:
        q = shlex.quote
        steps = ["set -e", *mask_bashrc(self.root / "empty")]
        if h.profile is not None:
            prof = self.profiles_dir / h.profile
            if (prof / "bin").is_dir():
                steps.append(f"mount --bind {q(str(prof / 'bin'))} {PROFILE_BIN_TARGET}")
            # Always hide the machine's own /proc/driver, so a profile without a driver is one.
            steps.append("mount -t tmpfs -o mode=0755 gpufleet-proc-driver /proc/driver")
            steps += self._boot_steps(h, prof)
            if (prof / "proc_driver_nvidia").is_dir():
                steps.append(f"cp -R {q(str(prof / 'proc_driver_nvidia'))} /proc/driver/nvidia")
            # /boot: the running kernel (as every real host has it) plus the profile's others,
            # never the machine's own, so a kernel update on the test machine changes nothing.
            extra = (f"; cp {q(str(prof / 'boot'))}/vmlinuz-* /boot/"
                     if (prof / "boot").is_dir() else "")
            steps.append('if [ -d /boot ]; then mount -t tmpfs -o mode=0755 gpufleet-boot /boot; '
                         f': >"/boot/vmlinuz-$(uname -r)"{extra}; fi')
            if (prof / "etc").is_dir():  # the profile's files over the host's /etc, read-only
                steps.append(f"mount -t overlay gpufleet-etc -o lowerdir={q(str(prof / 'etc'))}"
                             ":/etc /etc")
        if h.name in self.full_tmp:
            # The fleet's own files (sshd config, keys) live under /tmp too: held aside, put
            # back on the small tmpfs at the same path, then every free byte filled.
            hold, here = q(str(FULL_TMP_HOLD)), q(str(self.root))
            steps += [f"mount --bind {here} {hold}",
                      "mount -t tmpfs -o size=64k,mode=1777 gpufleet-full-tmp /tmp",
                      f"mkdir -p {here}", f"mount --bind {hold} {here}", f"umount {hold}",
                      "dd if=/dev/zero of=/tmp/.gpufleet-fill bs=4096 2>/dev/null || true"]
            FULL_TMP_HOLD.mkdir(exist_ok=True)
        steps.append(f"exec {SSHD} -D -e -f {q(str(h.config))}")
        return "\n".join(steps)

    def _boot_steps(self, h: FleetHost, prof: Path) -> list[str]:
        """This boot's identity: the host's own boot id over /proc/sys/kernel/random/boot_id (the
        profile's for the first boot, a new random one for each boot after a simulated reboot,
        counted in the fleet's boots/HOST), and for a boot after a reboot the marker the replayed
        tools read ("ifreboot:" lines, tests/fleet/profiles/build_profiles.py)."""
        if not (prof / "boot_id").is_file():
            return []
        if not self._rebootable(h):
            q = shlex.quote
            return [f"mount --bind {q(str(prof / 'boot_id'))} /proc/sys/kernel/random/boot_id"]
        return boot_steps(self.root / "boots" / h.name, prof / "boot_id")

    def _wait_ready(self, hosts: Sequence[FleetHost], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        pending = [h for h in hosts if h.proc is not None]
        while pending:
            for h in list(pending):
                assert h.proc is not None
                if h.proc.poll() is not None:
                    h.pid = None
                    raise FleetError(
                        f"sshd for {h.name} ({h.address}) exited with {h.proc.returncode}; "
                        f"log {h.log}:\n{self.log_tail(h.name)}"
                    )
                with (
                    contextlib.suppress(OSError),
                    socket.create_connection((h.address, 22), timeout=0.5),
                ):
                    pending.remove(h)
            if pending and time.monotonic() > deadline:
                names = ", ".join(f"{h.name} ({h.address})" for h in pending)
                tails = "\n".join(f"--- {h.name}\n{self.log_tail(h.name)}" for h in pending)
                raise FleetError(f"sshd did not accept TCP within {timeout}s: {names}\n{tails}")
            if pending:
                time.sleep(0.02)

    def _kill(self, hosts: Sequence[FleetHost]) -> None:
        # Sessions (e.g. a hung nvidia-smi stand-in) outlive the listener unless killed too.
        stop_trees([h.proc for h in hosts if h.pid is not None and h.proc is not None], 3.0)
        for h in hosts:
            h.pid, h.proc = None, None


# ---------------------------------------------------------------------- address reservations


def _port_free(address: str) -> bool:
    with socket.socket() as s:
        # SO_REUSEADDR: TIME_WAIT leftovers from an earlier fleet must not count as "in use".
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((address, 22))
        except OSError as e:
            if e.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL):
                return False
            raise
    return True


def _reserve(count: int) -> list[str]:
    RESERVATIONS.mkdir(mode=0o755, exist_ok=True)
    with (RESERVATIONS / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        got: list[str] = []
        for address in ADDRESS_POOL:
            mark = RESERVATIONS / address
            if mark.exists() and owner_alive(mark):
                continue
            if not _port_free(address):
                continue
            mark.write_text(str(os.getpid()))
            got.append(address)
            if len(got) == count:
                return got
        _release(got)
    raise FleetError(
        f"need {count} free addresses in 127.0.0.2-60 port 22, found {len(got)} "
        f"(reservations in {RESERVATIONS}; another test run or sshd holds the rest)"
    )


def _release(addresses: Sequence[str]) -> None:
    for a in addresses:
        mark = RESERVATIONS / a
        with contextlib.suppress(OSError):
            if mark.read_text().strip() == str(os.getpid()):
                mark.unlink()


# ---------------------------------------------------------------------- building a fleet


def _default_group(profile: str | None) -> str:
    return "cpu" if profile == CPU_PROFILE else "gpu"


def need_root_and_sshd(why_root: str) -> None:
    """FleetError unless this runs as root with OpenSSH's sshd installed."""
    if os.geteuid() != 0:
        raise FleetError(why_root)
    if not Path(SSHD).exists():
        raise FleetError(f"{SSHD} missing: install openssh-server (scripts/setup.sh does)")


def build_fleet(
    root: Path,
    hosts: Sequence[tuple[str, str | None]],
    *,
    faults: bool = False,
    groups: Mapping[str, str] | None = None,
    group_vars: Mapping[str, Mapping[str, Any]] | None = None,
    host_vars: Mapping[str, Mapping[str, Any]] | None = None,
    profiles_dir: Path | None = None,
    start_timeout: float = 10.0,
    full_tmp: Sequence[str] = (),
) -> Fleet:
    """Create and start a fleet under root. The caller must close() it; prefer make_fleet.
    full_tmp: hosts whose /tmp is full (a 64 KiB tmpfs, 0 bytes free)."""
    need_root_and_sshd("the sshd test fleet needs root (mount namespaces, port 22)")
    profiles_dir = profiles_dir or PROFILES_DIR
    missing = sorted({p for _, p in hosts if p is not None and not (profiles_dir / p).is_dir()})
    if missing:
        raise FleetError(f"host profiles missing under {profiles_dir}: {', '.join(missing)}")
    names = [n for n, _ in hosts] + (list(FAULTS) if faults else [])
    if len(set(names)) != len(names):
        raise FleetError(f"duplicate host names in {names}")

    root.mkdir(parents=True, exist_ok=True)
    fleet = Fleet(root, profiles_dir)
    fleet.full_tmp = set(full_tmp)
    close_at_exit(fleet)
    try:
        _populate(fleet, hosts, faults, groups or {}, group_vars, host_vars or {}, start_timeout)
    except BaseException:
        fleet.close()
        raise
    return fleet


def _populate(
    fleet: Fleet,
    hosts: Sequence[tuple[str, str | None]],
    faults: bool,
    groups: Mapping[str, str],
    group_vars: Mapping[str, Mapping[str, Any]] | None,
    host_vars: Mapping[str, Mapping[str, Any]],
    start_timeout: float,
) -> None:
    root = fleet.root
    for d in ("keys", "sshd", "home"):
        (root / d).mkdir(exist_ok=True)
    (root / "empty").write_text("")
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation directory

    specs: list[FleetHost] = [
        FleetHost(n, "", p, group=groups.get(n, _default_group(p))) for n, p in hosts
    ]
    if faults:
        specs += [FleetHost(f, "", None, fault=f, group=groups.get(f, "faulty")) for f in FAULTS]
    need = sum(1 for h in specs if h.fault != "noresolve")
    fleet._reserved = _reserve(need)
    addresses = iter(fleet._reserved)
    for h in specs:
        h.address = NORESOLVE_ADDRESS if h.fault == "noresolve" else next(addresses)
        h.config = root / "sshd" / f"{h.name}.conf"
        h.log = root / "sshd" / f"{h.name}.log"
        fleet.hosts[h.name] = h

    keys = root / "keys"
    try:
        keygen_all({fleet.client_key: "gpufleet-test-client", keys / "stranger": "other",
                    **{keys / h.name: f"host-{h.name}" for h in specs if h.fault != "noresolve"}})
    except RuntimeError as exc:
        raise FleetError(str(exc)) from exc

    client_pub = fleet.client_key.with_suffix(".pub").read_text()
    stranger_pub = (keys / "stranger.pub").read_text()
    known: list[str] = []
    for h in specs:
        if h.fault == "noresolve":
            continue
        h.host_key_pub = public_key(keys / h.name)
        authorized = keys / f"{h.name}.authorized_keys"
        authorized.write_text(stranger_pub if h.fault == "noauth" else client_pub)
        setenv = fleet.profiles_dir / str(h.profile) / "sshd_setenv"
        extra = ""
        if h.profile is not None and setenv.is_file():  # the session environment it sets
            # one SetEnv line (sshd keeps the first directive), before any Match block, which
            # would otherwise swallow it
            extra = "SetEnv " + " ".join(setenv.read_text().split()) + "\n"
        h.config.write_text(sshd_config(h.address, keys / h.name, authorized, extra))
        served = h.host_key_pub
        if h.fault == "badkey":  # the client expects another key than the one this host serves
            served = " ".join(stranger_pub.split()[:2])
        known.append(f"{h.address} {served}\n")
    fleet.known_hosts.write_text("".join(known))

    fleet.env = controller_env(fleet.home)
    _write_inventory(fleet, group_vars, host_vars)

    fleet._spawn(specs)
    fleet._wait_ready([h for h in specs if h.proc is not None], start_timeout)


def _write_inventory(
    fleet: Fleet,
    group_vars: Mapping[str, Mapping[str, Any]] | None,
    host_vars: Mapping[str, Mapping[str, Any]],
) -> None:
    gvars: dict[str, Mapping[str, Any]] = {"gpu": DESIRED_STATE}
    if group_vars is not None:
        gvars = dict(group_vars)
    children: dict[str, dict[str, Any]] = {}
    for h in fleet.hosts.values():
        group = children.setdefault(h.group, {"hosts": {}})
        hv: dict[str, Any] = {"ansible_host": h.address}
        if h.profile is not None:
            hv["fleet_test_profile"] = h.profile  # for humans; outside gpufleet's prefixes
        hv.update(host_vars.get(h.name, {}))
        group["hosts"][h.name] = hv
    for g, v in gvars.items():
        if g in children and v:
            children[g]["vars"] = dict(v)
    doc = {
        "all": {
            "vars": {
                **connection_vars(fleet.client_key, fleet.known_hosts),
                "gpufleet_smoke_runtime": "host",
                "gpufleet_smoke_python": sys.executable,
                **dict(gvars.get("all", {})),
            },
            "children": children,
        }
    }
    fleet.inventory.write_text(yaml.safe_dump(doc, sort_keys=False))


@contextlib.contextmanager
def make_fleet(
    tmp_path: Path,
    hosts: Sequence[tuple[str, str | None]],
    **kwargs: Any,
) -> Iterator[Fleet]:
    """Context manager around build_fleet: every daemon is stopped by PID on exit, whatever happens.

    hosts: (name, profile) pairs; profile None = plain sshd (no GPU pieces). Keyword arguments:
    faults=True adds down/badkey/noauth/noresolve in group `faulty`; groups={name: group}
    overrides the default group (`cpu` for profile no-nvidia-smi, else `gpu`);
    group_vars={group: vars} replaces the default {"gpu": DESIRED_STATE} ("all" merges into
    all.vars); host_vars={name: vars}; profiles_dir; start_timeout; full_tmp=[name, …].
    """
    fleet = build_fleet(tmp_path, hosts, **kwargs)
    try:
        yield fleet
    finally:
        fleet.close()
