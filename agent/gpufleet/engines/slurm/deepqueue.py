"""The Slurm side of `gpufleet deepcheck`: sinfo and squeue read as untrusted text, the sbatch
line and the job scripts of both kinds of deep check, and the one place that runs them.

A full check is one job on one node, `node-check --level full --history STORE`; a multinode
check is one job on a group of nodes, `smoke --slurm --save STORE`, the multinode smoke test
run inside the job's own allocation with srun (engines/slurm/smoke.py), whose save records a
world of more than one host for each of its nodes (what `coverage` counts as multinode). Both
are `--exclusive --requeue --nice` in the scavenger partition, so Slurm requeues either when a
real job preempts it.

Everything Slurm prints is untrusted: a node name that is not a plain host name is left out
with a note, and never reaches a command line except as one argv element after `--nodelist=`;
a queued multinode job's compressed node list (`dc[1-2]`) is expanded by `scontrol show
hostnames`, one argv element.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpufleet import redact
from gpufleet.engines.slurm.deepcheck import Settings
from gpufleet.engines.slurm.drain import NodeState, SlurmError, parse_sinfo
from gpufleet.engines.slurm.preempt import QOS_FORMAT, config_map, preemptible

JOB_NAME = "gpufleet-deepcheck"
MULTINODE_JOB_NAME = "gpufleet-deepcheck-multinode"
# sbatch --nice: the largest adjustment a non-root user may ask for is 2147483645; a large one
# puts the check behind every job of its partition even under priority/multifactor.
NICE = 1000000
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_HOSTLIST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._,\[\]-]{0,1023}")
_JOB_ID = re.compile(r"\d+(?:_\d+)?")
_LIVE_JOB_STATES = {"PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
                    "CONFIGURING", "COMPLETING", "RESIZING", "SUSPENDED", "STOPPED",
                    "SIGNALING", "STAGE_OUT"}

Runner = Callable[[Sequence[str], str | None], "CommandOutput"]


@dataclass(frozen=True)
class CommandOutput:
    returncode: int
    stdout: str
    stderr: str


def parse_nodes(text: str, partition: str) -> tuple[dict[str, NodeState], list[str]]:
    """`sinfo -h -N -p P -o '%N|%P|%T|%H|%E'` → the partition's nodes, and notes on lines left
    out (a name that is no plain host name)."""
    notes: list[str] = []
    nodes = {}
    for name, node in parse_sinfo(text).items():
        if not _NODE_NAME.fullmatch(name):
            notes.append(f"sinfo: node name {redact.text(name)[:80]!r} left out: not a host name")
        elif partition in node.partitions:
            nodes[name] = node
    return nodes, notes


def parse_queue(text: str) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """`squeue -h -n NAMES -o '%i|%T|%N|%n'` → node -> job id of the live deep-check jobs on
    one node (allocated node, else the one it asked for); job id -> node list of those on
    several (`dc[1-2]`, for `scontrol show hostnames`); and notes."""
    queued: dict[str, str] = {}
    groups: dict[str, str] = {}
    notes: list[str] = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) != 4 or not _JOB_ID.fullmatch(parts[0]):
            if line.strip():
                notes.append(f"squeue: line {redact.text(line)[:80]!r} left out")
            continue
        job, state, alloc, asked = parts
        node = alloc if alloc and alloc != "(null)" else asked
        if state.upper() not in _LIVE_JOB_STATES:
            continue
        if _NODE_NAME.fullmatch(node):
            queued[node] = job
        elif _HOSTLIST.fullmatch(node):
            groups[job] = node
        else:
            notes.append(f"squeue: job {job}: node list {redact.text(node)[:80]!r} left out")
    return queued, groups, notes


def job_script(command: str, store: Path, *, expect: Path | None, drain: bool,
               smoke_timeout: float) -> str:
    """The full check's batch script: node-check at the full level on the node Slurm gives it
    (its name from $SLURMD_NODENAME), saved into the store. Every argument is quoted."""
    argv = [command, "node-check", "--level", "full", "--history", str(store),
            "--smoke-timeout", f"{smoke_timeout:g}", "--format", "json"]
    if expect is not None:
        argv += ["--expect", str(expect)]
    if drain:
        argv.append("--slurm-drain")
    return ("#!/bin/sh\n# gpufleet deepcheck: a full check of this node, preemptible; the run "
            "store keeps its result\nexec " + shlex.join(argv) + "\n")


def multinode_script(command: str, store: Path, *, expect: Path | None, level: str,
                     smoke_timeout: float) -> str:
    """The multinode check's batch script: one smoke world over the job's nodes (srun steps
    inside its allocation), saved into the store. Every argument is quoted."""
    argv = [command, "smoke", "--slurm", "--level", level, "--save", str(store),
            "--smoke-timeout", f"{smoke_timeout:g}", "--format", "json"]
    if expect is not None:
        argv += ["--expect", str(expect)]
    return ("#!/bin/sh\n# gpufleet deepcheck: a multinode check of these nodes, preemptible; "
            "the run store keeps its result\nexec " + shlex.join(argv) + "\n")


def sbatch_argv(nodes: Sequence[str], s: Settings, *, minutes: int, log_dir: Path | None,
                qos: str | None = None) -> list[str]:
    """One node: the full check's job; several: the multinode check's (one task per node: the
    batch script launches every rank through srun)."""
    many = len(nodes) > 1
    argv = ["sbatch", "--parsable", f"--job-name={MULTINODE_JOB_NAME if many else JOB_NAME}",
            f"--partition={s.partition}", f"--nodelist={','.join(nodes)}",
            f"--nodes={len(nodes)}", "--ntasks-per-node=1" if many else "--ntasks=1",
            "--exclusive", "--requeue", f"--nice={NICE}", f"--time={minutes}"]
    if qos is not None:
        argv.append(f"--qos={qos}")
    if log_dir is not None:
        argv.append(f"--output={log_dir / 'gpufleet-deepcheck-%N-%j.out'}")
    return argv


def _run(argv: Sequence[str], stdin: str | None) -> CommandOutput:
    try:
        p = subprocess.run(list(argv), input=stdin, capture_output=True, text=True, timeout=30,
                           check=False, stdin=None if stdin is not None else subprocess.DEVNULL)
    except FileNotFoundError as exc:
        raise SlurmError(f"{argv[0]}: not found (is this a Slurm submit host?)") from exc
    except subprocess.TimeoutExpired as exc:
        raise SlurmError(f"{argv[0]}: no answer within 30 s") from exc
    return CommandOutput(p.returncode, p.stdout, p.stderr)


class Queue:
    """The Slurm commands deepcheck needs: sinfo, squeue, scontrol, sacctmgr, sbatch."""

    def __init__(self, partition: str, runner: Runner = _run) -> None:
        self.partition = partition
        self.runner = runner
        self.notes: list[str] = []

    def _ok(self, argv: Sequence[str], stdin: str | None = None) -> str:
        r = self.runner(argv, stdin)
        if r.returncode != 0:
            why = redact.text(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else
                              f"exit {r.returncode}")
            raise SlurmError(f"{argv[0]} failed: {why[:300]}")
        return r.stdout

    def nodes(self) -> dict[str, NodeState]:
        """The partition's nodes; each NodeState names every partition the node is in."""
        out = self._ok(["sinfo", "-h", "-N", "-o", "%N|%P|%T|%H|%E"])
        nodes, notes = parse_nodes(out, self.partition)
        self.notes += notes
        return nodes

    def not_preemptible(self, nodes: Mapping[str, NodeState], *, qos: str | None = None,
                        production: Sequence[str] = ()) -> str | None:
        """Why the partition's jobs would not give way to real jobs at once; None: they would.
        sacctmgr (slurmdbd) is asked only under PreemptType=preempt/qos."""
        neighbours = sorted({p for n in nodes.values() for p in n.partitions} - {self.partition})
        config = self._ok(["scontrol", "show", "config"])
        qos_text = None
        if config_map(config).get("PreemptType") == "preempt/qos":
            qos_text = self._ok(["sacctmgr", "-P", "-n", "show", "qos", QOS_FORMAT])
        return preemptible(self._ok(["scontrol", "-o", "show", "partition"]), config,
                           self.partition, neighbours, qos_text=qos_text, qos=qos,
                           production=production)

    def queued(self) -> dict[str, str]:
        """node -> job id of every live deep-check job, of either kind."""
        out = self._ok(["squeue", "-h", "-p", self.partition, "-n",
                        f"{JOB_NAME},{MULTINODE_JOB_NAME}", "-o", "%i|%T|%N|%n"])
        queued, groups, notes = parse_queue(out)
        self.notes += notes
        for job, nodelist in groups.items():
            for name in self._ok(["scontrol", "show", "hostnames", nodelist]).split():
                if _NODE_NAME.fullmatch(name):
                    queued[name] = job
                else:
                    self.notes.append(f"squeue: job {job}: node {redact.text(name)[:80]!r} "
                                      "left out: not a host name")
        return queued

    def submit(self, argv: Sequence[str], script: str) -> str:
        out = self._ok(argv, script).strip()
        job = out.split(";", 1)[0]  # --parsable: "id" or "id;cluster"
        if not _JOB_ID.fullmatch(job):
            raise SlurmError(f"sbatch: no job id in {redact.text(out)[:80]!r}")
        return job
