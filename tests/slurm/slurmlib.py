"""A small real Slurm cluster on one machine: munged, slurmctld and one `slurmd -N NODE` per node.

Each node lives in namespaces of its own, made by a holder process
(`unshare --mount --uts --propagation private`, hostname = node name): the host profile's
`bin/` (tests/fleet/profiles, the same simulated GPU hosts as the sshd fleet) is bind-mounted over
/usr/local/sbin and its /proc/driver/nvidia copied onto a tmpfs, exactly as tests/fleet does for
sshd. The node's slurmd is started with `nsenter -m -u` into those namespaces, so its
HealthCheckProgram and every job step see that host's GPUs; `set_profile` swaps the profile in
place (a fault appears or goes away under a running slurmd).

Daemons listen on 127.0.0.120 (slurmctld) and 127.0.0.121-139 (slurmd, CommunicationParameters=
NoInAddrAny), munge's socket is in the cluster's own directory (AuthInfo=socket=), all state,
spool and logs live under the cluster's root, and everything is stopped by PID on close (and by
the kernel if the test process dies: PR_SET_PDEATHSIG). Needs root and Debian's slurmctld,
slurmd, slurm-client and munge (scripts/setup.sh installs them).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fleet"))
from fleetlib import PROFILE_BIN_TARGET, PROFILES_DIR

from harness.processes import die_with_parent, stop_trees

CTL_ADDRESS = "127.0.0.120"
NODE_ADDRESSES = tuple(f"127.0.0.{n}" for n in range(121, 140))
CTL_PORT = 46817
NODE_PORT0 = 46821
TOOLS = ("munged", "mungekey", "slurmctld", "slurmd", "srun", "sinfo", "scontrol", "salloc",
         "unshare", "nsenter")


class SlurmError(RuntimeError):
    """The cluster itself could not be set up."""


@dataclass
class Node:
    name: str
    address: str
    port: int
    profile: str
    partition: str
    holder: subprocess.Popen[bytes] | None = None
    slurmd: subprocess.Popen[bytes] | None = None


@dataclass
class Cluster:
    root: Path
    nodes: dict[str, Node]
    conf: Path
    env: dict[str, str]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    # ------------------------------------------------------------------ commands

    def run(self, argv: Sequence[str], *, timeout: float = 60.0,
            env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), env={**self.env, **(env or {})}, cwd=self.root,
                              capture_output=True, text=True, timeout=timeout, check=False)

    def in_node(self, name: str, argv: Sequence[str], *, timeout: float = 60.0,
                env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """argv inside the node's namespaces, with only `env` (as slurmd gives its programs)."""
        holder = self.nodes[name].holder
        assert holder is not None
        return subprocess.run(
            ["nsenter", "-t", str(holder.pid), "-m", "-u", "env", "-i",
             *(f"{k}={v}" for k, v in (env or {}).items()), *argv],
            capture_output=True, text=True, timeout=timeout, check=False)

    def states(self) -> dict[str, tuple[str, str]]:
        """node -> (state, reason) from sinfo."""
        out = self.run(["sinfo", "-h", "-N", "-o", "%N|%T|%E"]).stdout
        found = {}
        for line in out.splitlines():
            name, state, reason = line.split("|", 2)
            found[name] = (state, reason)
        return found

    def set_profile(self, name: str, profile: str) -> None:
        node = self.nodes[name]
        res = self.in_node(name, ["sh", "-c", _profile_script(profile, remount=True)])
        if res.returncode != 0:
            raise SlurmError(f"cannot switch {name} to {profile}: {res.stderr}")
        node.profile = profile

    def log(self, name: str, lines: int = 30) -> str:
        path = self.root / "log" / f"slurmd.{name}.log"
        if name == "ctl":
            path = self.root / "log" / "slurmctld.log"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return f"(no log {path})"

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout: float = 30.0) -> None:
        logs = self.root / "log"
        munge = self.root / "munge"
        self._spawn(["munged", "-F", "-f", f"--socket={munge}/munge.socket.2",
                     f"--key-file={munge}/munge.key", f"--pid-file={munge}/munged.pid",
                     f"--log-file={munge}/munged.log", f"--seed-file={munge}/seed"],
                    logs / "munged.out")
        _wait(lambda: (munge / "munge.socket.2").exists(), 10, "munged socket",
              lambda: (logs / "munged.out").read_text(errors="replace"))
        self._spawn(["slurmctld", "-D", "-i", "-f", str(self.conf)], logs / "slurmctld.out")
        _wait(lambda: _listening(CTL_ADDRESS, CTL_PORT), timeout, "slurmctld",
              lambda: self.log("ctl"))
        # Every node resolves every node name to its NodeAddr (slurmd binds its own name's
        # address: CommunicationParameters=NoInAddrAny), through /etc/hosts in its namespace.
        hosts = self.root / "hosts"
        hosts.write_text(Path("/etc/hosts").read_text() + "".join(
            f"{n.address} {n.name}\n" for n in self.nodes.values()))
        for node in self.nodes.values():
            node.holder = self._spawn(
                ["unshare", "--mount", "--uts", "--propagation", "private", "sh", "-c",
                 f"hostname {shlex.quote(node.name)}\n"
                 f"mount --bind {shlex.quote(str(hosts))} /etc/hosts\n"
                 + _profile_script(node.profile, remount=False) + "\nexec sleep infinity"],
                logs / f"holder.{node.name}.out")
        for node in self.nodes.values():
            assert node.holder is not None
            # The holder is ready once it has exec'd sleep (its mounts are in place by then).
            _wait(lambda n=node: _comm(n.holder.pid) == "sleep", 10, f"namespace of {node.name}",
                  lambda n=node: (logs / f"holder.{n.name}.out").read_text(errors="replace"))
            node.slurmd = self._spawn(
                ["nsenter", "-t", str(node.holder.pid), "-m", "-u", "slurmd", "-D",
                 "-N", node.name, "-f", str(self.conf)], logs / f"slurmd.{node.name}.out")

        def up() -> bool:
            states = self.states()
            return all(n in states and "idle" in states[n][0] for n in self.nodes)

        _wait(up, timeout, "slurmd nodes idle",
              lambda: f"{self.states()}\n" + "\n".join(self.log(n, 8) for n in self.nodes))

    def _spawn(self, argv: Sequence[str], out: Path) -> subprocess.Popen[bytes]:
        with out.open("ab") as f:
            proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=f, stderr=f,
                                    env=self.env, cwd=self.root, start_new_session=True,
                                    preexec_fn=die_with_parent)
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        """Stop everything by PID: slurmd (and its steps) first, the controller, munged last."""
        order = [n.slurmd for n in self.nodes.values()] + [
            p for p in self.procs if p not in [n.slurmd for n in self.nodes.values()]]
        for proc in order:
            if proc is not None and proc.poll() is None:
                stop_trees([proc], 5.0)


def _comm(pid: int | None) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _listening(address: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((address, port), timeout=0.5):
        return True
    return False


def _wait(ok: object, timeout: float, what: str, why: object) -> None:
    deadline = time.monotonic() + timeout
    while not ok():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SlurmError(f"{what} not ready within {timeout} s:\n{why()}")  # type: ignore[operator]
        time.sleep(0.2)


SYS_PCI = "/sys/bus/pci/devices"  # a profile with a simulated PCI bus shows it here


def _profile_script(profile: str, *, remount: bool) -> str:
    prof = PROFILES_DIR / profile
    if not prof.is_dir():
        raise SlurmError(f"no host profile {prof}")
    q = shlex.quote
    steps = ["set -e"]
    if remount:
        steps += [f"umount {PROFILE_BIN_TARGET} 2>/dev/null || true",
                  "umount /proc/driver 2>/dev/null || true",
                  f"umount {SYS_PCI} 2>/dev/null || true"]
    if (prof / "bin").is_dir():
        steps.append(f"mount --bind {q(str(prof / 'bin'))} {PROFILE_BIN_TARGET}")
    steps.append("mount -t tmpfs -o mode=0755 gpufleet-proc-driver /proc/driver")
    if (prof / "proc_driver_nvidia").is_dir():
        steps.append(f"cp -R {q(str(prof / 'proc_driver_nvidia'))} /proc/driver/nvidia")
    if (prof / "sys_bus_pci_devices").is_dir():  # the GPUs on the bus, lost ones included
        steps.append(f"mount --bind {q(str(prof / 'sys_bus_pci_devices'))} {SYS_PCI}")
    return "\n".join(steps)


def slurm_conf(root: Path, nodes: Sequence[Node], extra: str = "",
               partitions: Sequence[str] | None = None) -> str:
    """`partitions`: PartitionName lines instead of one per Node.partition (e.g. a node in a
    production and a scavenger partition)."""
    partition_lines = partitions
    partitions_of: dict[str, list[str]] = {}
    for n in nodes:
        partitions_of.setdefault(n.partition, []).append(n.name)
    lines = [
        "ClusterName=gpufleettest",
        f"SlurmctldHost={socket.gethostname()}({CTL_ADDRESS})",
        f"SlurmctldPort={CTL_PORT}",
        "CommunicationParameters=NoInAddrAny",
        "AuthType=auth/munge",
        f"AuthInfo=socket={root}/munge/munge.socket.2",
        "CredType=cred/munge",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={root}/state",
        f"SlurmdSpoolDir={root}/spool/%n",
        f"SlurmctldPidFile={root}/run/slurmctld.pid",
        f"SlurmdPidFile={root}/run/slurmd.%n.pid",
        f"SlurmctldLogFile={root}/log/slurmctld.log",
        f"SlurmdLogFile={root}/log/slurmd.%n.log",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "MpiDefault=none",
        "ReturnToService=2",
        "SchedulerType=sched/builtin",
        "JobCompType=jobcomp/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "SlurmctldTimeout=10",
        "SlurmdTimeout=60",
        "MinJobAge=5",
        "InactiveLimit=0",
        "KillWait=5",
        extra.strip(),
    ]
    for n in nodes:
        lines.append(f"NodeName={n.name} NodeHostname={n.name} NodeAddr={n.address} "
                     f"Port={n.port} CPUs=2 State=UNKNOWN")
    if partition_lines is not None:
        lines += partition_lines
    else:
        for p, names in partitions_of.items():
            lines.append(f"PartitionName={p} Nodes={','.join(names)} MaxTime=INFINITE State=UP")
    return "\n".join(line for line in lines if line) + "\n"


def prepare(root: Path, hosts: Sequence[tuple[str, str, str]], *, extra: str = "",
            partitions: Sequence[str] | None = None) -> Cluster:
    """Directories, munge key and slurm.conf for (name, profile, partition) nodes; not started.
    `extra` and `partitions` go to slurm_conf."""
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        raise SlurmError(f"missing {', '.join(missing)}: scripts/setup.sh installs slurmctld, "
                         "slurmd, slurm-client and munge")
    if os.geteuid() != 0:
        raise SlurmError("the Slurm test cluster needs root (namespaces, slurmd)")
    if len(hosts) > len(NODE_ADDRESSES):
        raise SlurmError(f"at most {len(NODE_ADDRESSES)} nodes")
    for d in ("munge", "state", "spool", "log", "run"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "munge").chmod(0o700)
    key = root / "munge" / "munge.key"
    res = subprocess.run(["mungekey", "-c", "-f", "-k", str(key)], capture_output=True,
                         text=True, check=False)
    if res.returncode != 0:
        raise SlurmError(f"mungekey failed: {res.stderr}")
    key.chmod(0o400)
    nodes = {
        name: Node(name, NODE_ADDRESSES[i], NODE_PORT0 + i, profile, partition)
        for i, (name, profile, partition) in enumerate(hosts)
    }
    for name in nodes:
        (root / "spool" / name).mkdir(exist_ok=True)
    conf = root / "slurm.conf"
    conf.write_text(slurm_conf(root, list(nodes.values()), extra, partitions))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PYTEST_"))}
    env["SLURM_CONF"] = str(conf)
    return Cluster(root=root, nodes=nodes, conf=conf, env=env)


@contextlib.contextmanager
def running(cluster: Cluster) -> Iterator[Cluster]:
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()
