"""A small real Slurm cluster on one machine: munged, slurmctld and one `slurmd -N NODE` per node.

Each node lives in namespaces of its own, made by a holder process
(`unshare --mount --uts --propagation private`, hostname = node name): the host profile's
`bin/` (tests/fleet/profiles, the same simulated GPU hosts as the sshd fleet) is bind-mounted over
/usr/local/sbin and its /proc/driver/nvidia copied onto a tmpfs, exactly as tests/fleet does for
sshd. The node's slurmd is started with `nsenter -m -u` into those namespaces, so its
HealthCheckProgram and every job step see that host's GPUs; `set_profile` swaps the profile in
place (a fault appears or goes away under a running slurmd).

With `ssh=True` every node also runs its own OpenSSH sshd in those namespaces, on its own address
port 22 with its own host key (harness/sshhost.py, as the sshd fleet's hosts): `inventory` names
each node with ansible_host, root's key and a known_hosts checked strictly, so playbooks run
from the controller over SSH against the node as they would against a real one. A `rebootable`
node has no holder: it is booted by the fleet's boot loop (harness.sshhost.boot_loop), each boot
new mount, UTS and PID namespaces whose init starts slurmd and then becomes sshd (PID 1), with a
new boot id and a fresh /proc/driver. The profile's gpufleet-sim-reboot (ansible.builtin.reboot's
reboot_command) takes that PID 1 down, slurmd dies with its boot, and the next boot starts slurmd
again, which registers with slurmctld as a rebooted node's slurmd does. `in_node` and
`set_profile` find the current boot each time; the boot script (boots/NODE/boot.sh, the node's
"disk") carries the profile and the node's own files (`node_file`) into the next boot.

Daemons listen on 127.0.0.120 (slurmctld) and 127.0.0.121-139 (slurmd, CommunicationParameters=
NoInAddrAny), munge's socket is in the cluster's own directory (AuthInfo=socket=), all state,
spool and logs live under the cluster's root, and everything is stopped by PID on close, at
interpreter exit, and by the kernel if the test process dies (PR_SET_PDEATHSIG). Needs root and
Debian's slurmctld, slurmd, slurm-client and munge (scripts/setup.sh installs them), and
openssh-server for `ssh=True`.
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
import yaml
from fleetlib import PROFILE_BIN_TARGET, PROFILES_DIR

from harness.processes import close_at_exit, closed, die_with_parent, stop_trees
from harness.sshhost import (
    SSHD,
    boot_loop,
    boot_pid1,
    boot_steps,
    client_argv,
    connection_vars,
    controller_env,
    keygen_all,
    mask_bashrc,
    pidns_steps,
    public_key,
    sshd_config,
)

REPO = Path(__file__).resolve().parents[2]
CTL_ADDRESS = "127.0.0.120"
NODE_ADDRESSES = tuple(f"127.0.0.{n}" for n in range(121, 140))
CTL_PORT = 46817
NODE_PORT0 = 46821
NODE_NAMESPACES = ("unshare", "--mount", "--uts", "--propagation", "private")
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
    rebootable: bool = False
    # Files only this node sees, at a path every node shares (target -> source): the node's own
    # copy of what a role renders per host (node_file).
    files: dict[Path, Path] = field(default_factory=dict)
    first_boot_id: Path = field(default=Path())
    holder: subprocess.Popen[bytes] | None = None
    slurmd: subprocess.Popen[bytes] | None = None
    sshd: subprocess.Popen[bytes] | None = None
    boot: subprocess.Popen[bytes] | None = None  # a rebootable node's boot loop


@dataclass(eq=False)  # hashable by identity: close_at_exit keeps it in a set
class Cluster:
    root: Path
    nodes: dict[str, Node]
    conf: Path
    env: dict[str, str]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    has_ssh: bool = False
    inventory: Path = field(default=Path())  # with ssh: every node, reached over SSH
    ansible_env: dict[str, str] = field(default_factory=dict)  # the controller's, for it

    # ------------------------------------------------------------------ commands

    def run(self, argv: Sequence[str], *, timeout: float = 300.0,
            env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), env={**self.env, **(env or {})}, cwd=self.root,
                              capture_output=True, text=True, timeout=timeout, check=False)

    def in_node(self, name: str, argv: Sequence[str], *, timeout: float = 300.0,
                env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """argv inside the node's namespaces (a rebootable node's current boot, its PID
        namespace too), with only `env` (as slurmd gives its programs)."""
        node = self.nodes[name]
        pid = self._namespace_pid(node)
        return subprocess.run(
            ["nsenter", "-t", str(pid), "-m", "-u", *(["-p"] if node.rebootable else []),
             "env", "-i", *(f"{k}={v}" for k, v in (env or {}).items()), *argv],
            capture_output=True, text=True, timeout=timeout, check=False)

    def _namespace_pid(self, node: Node, timeout: float = 120.0) -> int:
        """The holder, or the current boot's PID 1 (waiting while the node reboots)."""
        if not node.rebootable:
            assert node.holder is not None
            return node.holder.pid
        found: list[int] = []

        def up() -> bool:
            assert node.boot is not None
            if node.boot.poll() is not None:
                raise SlurmError(f"{node.name}'s boot loop ended ({node.boot.returncode}):\n"
                                 + self.boot_log(node.name))
            pid = boot_pid1(node.boot.pid)
            found[:] = [pid] if pid is not None else []
            return bool(found)

        _wait(up, timeout, f"a boot of {node.name}", lambda: self.boot_log(node.name))
        return found[0]

    def states(self) -> dict[str, tuple[str, str]]:
        """node -> (state, reason) from sinfo."""
        out = self.run(["sinfo", "-h", "-N", "-o", "%N|%T|%E"]).stdout
        found = {}
        for line in out.splitlines():
            name, state, reason = line.split("|", 2)
            found[name] = (state, reason)
        return found

    def set_profile(self, name: str, profile: str) -> None:
        """The node's host profile from now on. A rebootable node keeps it over reboots, and
        its fault counts as appearing in this boot: the driver state starts anew without the
        "rebooted" marker (the profile's ifreboot: answers apply after the next reboot)."""
        node = self.nodes[name]
        script = _profile_script(profile, remount=True)
        if node.rebootable:
            self._write_boot_script(node, profile)
            script += "\n" + "\n".join(pidns_steps())
        res = self.in_node(name, ["sh", "-c", script])
        if res.returncode != 0:
            raise SlurmError(f"cannot switch {name} to {profile}: {res.stderr}")
        node.profile = profile

    def node_file(self, name: str, target: Path, source: Path | None) -> None:
        """From now on (and in a rebootable node's later boots) the node alone sees `source` at
        `target`, a path every node shares; None: the shared file again. As a role run per host
        leaves its own rendering on each node's disk. A program running the old file keeps it."""
        node = self.nodes[name]
        steps = [f"umount -l {shlex.quote(str(target))}"] if target in node.files else []
        node.files.pop(target, None)
        if source is not None:
            node.files[target] = source
            steps.append(f"mount --bind {shlex.quote(str(source))} {shlex.quote(str(target))}")
        if node.rebootable:
            self._write_boot_script(node, node.profile)
        res = self.in_node(name, ["sh", "-ec", "\n".join(steps)])
        if res.returncode != 0:
            raise SlurmError(f"cannot show {source} at {target} on {name}: {res.stderr}")

    # ------------------------------------------------------------------ over SSH, rebooting

    def ssh(self, name: str, command: str, *, timeout: float = 300.0
            ) -> subprocess.CompletedProcess[str]:
        """`command` on the node through its sshd (strict known_hosts, the lab's key)."""
        argv = client_argv(self.nodes[name].address, self.root / "ssh" / "client",
                           self.root / "ssh" / "known_hosts", command)
        return subprocess.run(argv, env=self.ansible_env, capture_output=True, text=True,
                              timeout=timeout, check=False)

    def play(self, name: str, playbook: Path, *args: str, timeout: float = 300.0
             ) -> subprocess.CompletedProcess[str]:
        """ansible-playbook from the controller against `name` over SSH. A run still going after
        `timeout` is stopped and returned with rc 124 and what it printed so far."""
        argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(self.inventory),
                "-l", name, *args, str(playbook)]
        with subprocess.Popen(argv, env=self.ansible_env, cwd=self.root, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              start_new_session=True, preexec_fn=die_with_parent) as proc:
            try:
                out, _ = proc.communicate(timeout=timeout)
                return subprocess.CompletedProcess(argv, proc.returncode, out, "")
            except subprocess.TimeoutExpired:
                stop_trees([proc], 5.0)
                out, _ = proc.communicate()
                return subprocess.CompletedProcess(
                    argv, 124, f"{out}\n(stopped: still running after {timeout:g} s)", "")

    def boots(self, name: str) -> int:
        """How many times a rebootable node has booted."""
        try:
            return int((self.root / "boots" / name / "count").read_text())
        except (OSError, ValueError):
            return 0

    def slurmd_started(self, name: str) -> str:
        """When the node's slurmd last registered (scontrol's SlurmdStartTime)."""
        out = self.run(["scontrol", "show", "node", name]).stdout
        return next((w.split("=", 1)[1] for w in out.split() if w.startswith("SlurmdStartTime=")),
                    "")

    def boot_log(self, name: str, lines: int = 20) -> str:
        path = self.root / "log" / f"boot.{name}.out"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return f"(no log {path})"

    def log(self, name: str, lines: int = 30) -> str:
        path = self.root / "log" / f"slurmd.{name}.log"
        if name == "ctl":
            path = self.root / "log" / "slurmctld.log"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return f"(no log {path})"

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout: float = 120.0) -> None:
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
            if node.rebootable:
                self._write_boot_script(node, node.profile)
                boot = ["sh", str(self._boot_dir(node) / "boot.sh")]
                node.boot = self._spawn(["sh", "-c", boot_loop(NODE_NAMESPACES, boot)],
                                        logs / f"boot.{node.name}.out")
                continue
            node.holder = self._spawn(
                [*NODE_NAMESPACES, "sh", "-c", "\n".join(self._node_steps(node))
                 + "\n" + _profile_script(node.profile, remount=False) + "\nexec sleep infinity"],
                logs / f"holder.{node.name}.out")
        for node in self.nodes.values():
            if node.rebootable:
                continue
            assert node.holder is not None
            # The holder is ready once it has exec'd sleep (its mounts are in place by then).
            _wait(lambda n=node: _comm(n.holder.pid) == "sleep", 10, f"namespace of {node.name}",
                  lambda n=node: (logs / f"holder.{n.name}.out").read_text(errors="replace"))
            node.slurmd = self._spawn(
                ["nsenter", "-t", str(node.holder.pid), "-m", "-u", *self._slurmd(node)],
                logs / f"slurmd.{node.name}.out")
            if self.has_ssh:
                node.sshd = self._spawn(
                    ["nsenter", "-t", str(node.holder.pid), "-m", "-u", *self._sshd(node)],
                    logs / f"sshd.{node.name}.out")
        for node in self.nodes.values():
            if self.has_ssh:
                self.wait_sshd(node.name, timeout)

        def up() -> bool:
            states = self.states()
            return all(n in states and "idle" in states[n][0] for n in self.nodes)

        _wait(up, timeout, "slurmd nodes idle",
              lambda: f"{self.states()}\n" + "\n".join(self.log(n, 8) for n in self.nodes))

    def wait_sshd(self, name: str, timeout: float = 120.0) -> None:
        """Until the node's sshd accepts TCP (for a rebootable node: in a complete boot)."""
        node = self.nodes[name]
        if node.rebootable:
            self._namespace_pid(node, timeout)
        out = self.root / "log" / (f"boot.{name}.out" if node.rebootable else f"sshd.{name}.out")
        _wait(lambda: _listening(node.address, 22), timeout, f"sshd of {name}",
              lambda: out.read_text(errors="replace")[-3000:])

    def _slurmd(self, node: Node) -> list[str]:
        return ["slurmd", "-D", "-N", node.name, "-f", str(self.conf)]

    def _sshd(self, node: Node) -> list[str]:
        return [SSHD, "-D", "-e", "-f", str(self.root / "ssh" / f"{node.name}.conf")]

    def _node_steps(self, node: Node) -> list[str]:
        """What every node's namespaces start with: its hostname, the cluster's /etc/hosts, root's
        ~/.bashrc masked for its SSH sessions, its own files."""
        q = shlex.quote
        steps = ["set -e", f"hostname {q(node.name)}",
                 f"mount --bind {q(str(self.root / 'hosts'))} /etc/hosts"]
        if self.has_ssh:
            steps += mask_bashrc(self.root / "ssh" / "empty")
        steps += [f"mount --bind {q(str(src))} {q(str(target))}"
                  for target, src in node.files.items()]
        return steps

    def _boot_dir(self, node: Node) -> Path:
        return self.root / "boots" / node.name

    def _write_boot_script(self, node: Node, profile: str) -> None:
        """A rebootable node's boot (what its init does): its namespaces' mounts, this boot's
        identity, slurmd in the background, then sshd as PID 1. Replaced whole (rename), so a
        boot starting meanwhile reads the old or the new one."""
        boots = self._boot_dir(node)
        boots.mkdir(parents=True, exist_ok=True)
        q = shlex.quote
        script = [*self._node_steps(node), _profile_script(profile, remount=False),
                  *boot_steps(boots, node.first_boot_id),
                  " ".join(q(a) for a in self._slurmd(node)) + " &",
                  "exec " + " ".join(q(a) for a in self._sshd(node))]
        tmp = boots / "boot.sh.new"
        tmp.write_text("\n".join(script) + "\n")
        tmp.replace(boots / "boot.sh")

    def _spawn(self, argv: Sequence[str], out: Path) -> subprocess.Popen[bytes]:
        with out.open("ab") as f:
            proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=f, stderr=f,
                                    env=self.env, cwd=self.root, start_new_session=True,
                                    preexec_fn=die_with_parent)
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        """Stop everything by PID: slurmd (and its steps) and the boots first, the controller,
        munged last."""
        first = [p for n in self.nodes.values() for p in (n.slurmd, n.boot) if p is not None]
        try:
            for proc in first + [p for p in self.procs if p not in first]:
                if proc.poll() is None:
                    stop_trees([proc], 5.0)
        finally:
            closed(self)


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
            partitions: Sequence[str] | None = None, ssh: bool = False,
            rebootable: Sequence[str] = ()) -> Cluster:
    """Directories, munge key and slurm.conf for (name, profile, partition) nodes; not started.
    `extra` and `partitions` go to slurm_conf; `ssh`: an sshd per node (keys, known_hosts and
    the inventory made here); `rebootable`: nodes booted by a boot loop (needs ssh: sshd is
    their PID 1)."""
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
    if rebootable and not ssh:
        raise SlurmError("a rebootable node needs ssh=True: its boot's PID 1 is its sshd")
    nodes = {
        name: Node(name, NODE_ADDRESSES[i], NODE_PORT0 + i, profile, partition,
                   rebootable=name in rebootable, first_boot_id=PROFILES_DIR / profile / "boot_id")
        for i, (name, profile, partition) in enumerate(hosts)
    }
    unknown = sorted(set(rebootable) - set(nodes))
    if unknown:
        raise SlurmError(f"no such nodes: {', '.join(unknown)}")
    for name in nodes:
        (root / "spool" / name).mkdir(exist_ok=True)
    conf = root / "slurm.conf"
    conf.write_text(slurm_conf(root, list(nodes.values()), extra, partitions))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PYTEST_"))}
    env["SLURM_CONF"] = str(conf)
    cluster = Cluster(root=root, nodes=nodes, conf=conf, env=env, has_ssh=ssh)
    if ssh:
        _prepare_ssh(cluster)
    return cluster


def _prepare_ssh(c: Cluster) -> None:
    """Host keys, sshd_config per node, the client key, a known_hosts with every node's key at
    its address, and an inventory naming each node at its address (controller side)."""
    if not Path(SSHD).exists():
        raise SlurmError(f"{SSHD} missing: install openssh-server (scripts/setup.sh does)")
    d = c.root / "ssh"
    d.mkdir()
    (d / "empty").write_text("")
    (d / "home").mkdir()
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation directory
    keygen_all({d / "client": "gpufleet-slurm-lab",
                **{d / f"host-{n}": f"host-{n}" for n in c.nodes}})
    (d / "authorized_keys").write_text((d / "client.pub").read_text())
    for n in c.nodes.values():
        (d / f"{n.name}.conf").write_text(sshd_config(n.address, d / f"host-{n.name}",
                                                      d / "authorized_keys"))
    (d / "known_hosts").write_text("".join(f"{n.address} {public_key(d / f'host-{n.name}')}\n"
                                           for n in c.nodes.values()))
    c.inventory = c.root / "inventory.yml"
    c.inventory.write_text(yaml.safe_dump({"all": {
        # StrictHostKeyChecking=yes: a node whose key is not the one known_hosts holds is refused
        # outright (Ansible's host_key_checking leaves OpenSSH at "ask", with no one to ask).
        "vars": connection_vars(d / "client", d / "known_hosts", "-o StrictHostKeyChecking=yes"),
        "hosts": {n.name: {"ansible_host": n.address} for n in c.nodes.values()}}},
        sort_keys=False))
    c.ansible_env = {**controller_env(d / "home"), "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}


@contextlib.contextmanager
def running(cluster: Cluster) -> Iterator[Cluster]:
    close_at_exit(cluster)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()
