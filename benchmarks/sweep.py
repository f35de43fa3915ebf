"""Fleet sweep benchmark: one fact sweep over N real sshd hosts, four ways, same probe script.

    .venv/bin/python benchmarks/sweep.py [--hosts 32] [--reps 3] [--profile h200x8] [--out FILE]

Compares `gpufleet facts -f N` with `ansible all -m script -a <probe> -f N` (REFERENCE.md: -m shell
breaks on the `{{` in the script), `ansible all -m gpufleet.gpu.gpu_facts -f N` (the collection's
module path, the same probe through Ansible's connection) and parallel OpenSSH
(`xargs -P N ssh … 'sh -s' < probe`) as the floor. Past 59 hosts (the test fleet's 127.0.0.2-60
pool) the hosts get addresses 127.14.X.Y instead (--address-base), which no other harness uses.
Measures wall time and controller CPU: user+sys of every process the command started, from
getrusage(RUSAGE_CHILDREN). This process is a child subreaper, so daemonised helpers (ansible's
ControlPersist ssh masters) are reparented here, stopped after each run and counted too. The hosts'
sshd and probe work is not counted (the daemons are never reaped during a run), though on this
machine it shares the same cores and so bounds wall time from below.
Needs root (the test fleet, tests/fleet/fleetlib.py).
"""

from __future__ import annotations

import argparse
import ctypes
import datetime as dt
import json
import os
import platform
import resource
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "fleet"))
sys.path.insert(0, str(REPO / "agent"))

import fleetlib  # noqa: E402
from fleetlib import DESIRED_STATE, Fleet, make_fleet  # noqa: E402

from gpufleet.probes import probe_script  # noqa: E402

_PR_SET_CHILD_SUBREAPER = 36
TOOL_TIMEOUT = "10"  # the probe's per-tool timeout, the same for every tool


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _orphans(keep: set[int]) -> list[int]:
    """Our children that we did not start with Popen: reparented daemons."""
    me, out = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in keep:
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == me:
            out.append(int(entry))
    return out


def _measure(argv: list[str], fleet: Fleet, stdout: Path, timeout: float,
             env: dict[str, str] | None = None) -> dict[str, Any]:
    keep = {h.pid for h in fleet.hosts.values() if h.pid is not None}
    load1 = os.getloadavg()[0]
    cpu0, t0 = _children_cpu(), time.perf_counter()
    with stdout.open("wb") as out, (stdout.with_suffix(".err")).open("wb") as err:
        proc = subprocess.run(argv, env={**fleet.env, **(env or {})}, cwd=fleet.root,
                              stdout=out, stderr=err, timeout=timeout, check=False)
    wall = time.perf_counter() - t0
    orphans = _orphans(keep)
    for pid in orphans:  # stop and reap what the tool left running, so its CPU counts
        os.kill(pid, signal.SIGTERM)
        os.waitpid(pid, 0)
    return {
        "daemons_reaped": len(orphans),
        "rc": proc.returncode,
        "wall_s": round(wall, 3),
        "cpu_s": round(_children_cpu() - cpu0, 3),
        "load1_before": round(load1, 2),
    }


def _ssh_one(path: Path, ssh: list[str], probe_argv: list[str], probe: Path, outdir: Path) -> Path:
    """A script for one host (xargs passes its address as $1): the probe over plain OpenSSH."""
    path.write_text(
        f'exec {shlex.join(ssh)} "root@$1" {shlex.quote(shlex.join(probe_argv))} '
        f'<{shlex.quote(str(probe))} >{shlex.quote(str(outdir))}/"$1"\n'
    )
    return path


def _ok_hosts(tool: str, out: Path, outdir: Path) -> int:
    if tool.startswith("gpufleet"):
        report = json.loads(out.read_text())
        return sum(1 for h in report["hosts"].values() if h["status"] == "ok")
    if tool == "ansible":
        return sum(1 for line in out.read_text().splitlines() if " | CHANGED" in line)
    if tool == "ansible-module":
        return sum(1 for line in out.read_text().splitlines() if " | SUCCESS" in line)
    return sum(1 for f in outdir.iterdir() if f.read_bytes().startswith(b"==gpufleet== meta"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--profile", default="h200x8")
    ap.add_argument("--tools", default="gpufleet,ansible,ansible-module,openssh,"
                    "openssh-curve25519,gpufleet-1host")
    ap.add_argument("--address-base", default="127.14",
                    help="first two octets of the addresses used past 59 hosts")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--machine", default="cpu-2core-debian12")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    date = dt.datetime.now(dt.timezone.utc).date().isoformat()
    out = args.out or REPO / "benchmarks/results" / f"{date}-sweep-{args.machine}.json"

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    forks = str(args.hosts)
    if args.hosts > len(fleetlib.ADDRESS_POOL):
        # 127/8 is all loopback; fleetlib reserves from whatever pool it is given.
        fleetlib.ADDRESS_POOL = tuple(f"{args.address_base}.{1 + i // 250}.{1 + i % 250}"
                                      for i in range(args.hosts))
    hosts = [(f"gpu{i:02d}", args.profile) for i in range(1, args.hosts + 1)]
    image = str(DESIRED_STATE["pytorch_image"])
    probe_argv = ["sh", "-s", "--", f"tool_timeout={TOOL_TIMEOUT}", f"image={image}"]

    with (
        tempfile.TemporaryDirectory(prefix="gpufleet-sweep-") as tmp,
        make_fleet(Path(tmp) / "fleet", hosts) as fleet,
    ):
        work = Path(tmp) / "work"
        work.mkdir()
        # ansible's script module runs a file; the same text with the same arguments baked in.
        probe = work / "probe.sh"
        probe.write_text(f"#!/bin/sh\nset -- {shlex.join(probe_argv[3:])}\n{probe_script()}")
        addresses = work / "addresses"
        addresses.write_text("".join(f"{h.address}\n" for h in fleet.hosts.values()))
        ssh = fleet.ssh_argv("gpu01")[:-1]  # everything but user@host
        # OpenSSH 9.2 defaults to the sntrup761x25519 key exchange, ~0.12 CPU-s per connection
        # here; paramiko (gpufleet) negotiates curve25519. Both floors are measured.
        c25519 = [*ssh[:1], "-o", "KexAlgorithms=curve25519-sha256", *ssh[1:]]
        one = _ssh_one(work / "ssh-one.sh", ssh, probe_argv, probe, work / "openssh")
        one_c = _ssh_one(work / "ssh-one-c.sh", c25519, probe_argv, probe, work / "openssh")
        facts = [sys.executable, "-m", "gpufleet", "facts", "-i", str(fleet.inventory)]
        commands = {
            "gpufleet": [*facts, "-f", forks, "--format", "json"],
            # Fixed cost (imports, inventory): the same command limited to one host.
            "gpufleet-1host": [*facts, "-l", "gpu01", "-f", forks, "--format", "json"],
            "ansible": ["ansible", "all", "-i", str(fleet.inventory), "-m", "script",
                        "-a", str(probe), "-f", forks],
            "ansible-module": ["ansible", "all", "-i", str(fleet.inventory), "-m",
                               "gpufleet.gpu.gpu_facts", "-f", forks],
            "openssh": ["sh", "-c", f"xargs -P {forks} -n 1 sh {one} <{addresses}"],
            "openssh-curve25519": ["sh", "-c", f"xargs -P {forks} -n 1 sh {one_c} <{addresses}"],
        }  # fmt: skip
        tools = args.tools.split(",")
        runs: list[dict[str, Any]] = []
        probe_out_bytes = None
        for rep in range(1, args.reps + 1):
            for tool in tools:  # interleaved, so load drift from other users hits every tool
                (work / "openssh").mkdir(exist_ok=True)
                for f in (work / "openssh").iterdir():
                    f.unlink()
                stdout = work / f"{tool}.out"
                # The module path resolves gpufleet.gpu.* from this checkout (docs/layout.md).
                env = ({"ANSIBLE_COLLECTIONS_PATH": str(REPO)}
                       if tool == "ansible-module" else None)
                run = {"tool": tool, "rep": rep, **_measure(commands[tool], fleet, stdout,
                                                            args.timeout, env)}  # fmt: skip
                run["ok_hosts"] = _ok_hosts(tool, stdout, work / "openssh")
                if tool.startswith("openssh"):
                    first = work / "openssh" / fleet.hosts["gpu01"].address
                    probe_out_bytes = first.stat().st_size
                runs.append(run)
                print(f"rep {rep} {tool:9} wall {run['wall_s']:7.2f} s  cpu {run['cpu_s']:6.2f} s"
                      f"  ok {run['ok_hosts']}/{args.hosts}  rc {run['rc']}",
                      file=sys.stderr)  # fmt: skip

    summary = {}
    for tool in tools:
        mine = [r for r in runs if r["tool"] == tool]
        summary[tool] = {
            "wall_s_median": statistics.median(r["wall_s"] for r in mine),
            "cpu_s_median": statistics.median(r["cpu_s"] for r in mine),
            "wall_s_min": min(r["wall_s"] for r in mine),
            "cpu_s_min": min(r["cpu_s"] for r in mine),
            "cpu_s_per_host_median": round(statistics.median(r["cpu_s"] for r in mine)
                                           / (1 if "1host" in tool else args.hosts), 4),
            "all_hosts_ok": all(
                r["ok_hosts"] == (1 if "1host" in tool else args.hosts) for r in mine
            ),
        }
    result: dict[str, Any] = {
        "benchmark": "fleet-sweep",
        "date": date,
        "machine": args.machine,
        "cpus": os.cpu_count(),
        "kernel": platform.release(),
        "hosts": args.hosts,
        "forks": args.hosts,
        "profile": args.profile,
        "reps": args.reps,
        "probe_script_bytes": len(probe_script().encode()),
        "probe_output_bytes_per_host": probe_out_bytes,
        "versions": _versions(),
        "commands": {
            "gpufleet": f"gpufleet facts -i INVENTORY -f {forks} --format json",
            "ansible": f"ansible all -i INVENTORY -m script -a probe.sh -f {forks}",
            "ansible-module": f"ansible all -i INVENTORY -m gpufleet.gpu.gpu_facts -f {forks}",
            "openssh": f"xargs -P {forks} -n 1 sh -c 'ssh … root@$1 sh -s -- … <probe.sh' <hosts",
            "openssh-curve25519": "the same with ssh -o KexAlgorithms=curve25519-sha256",
        },
        "runs": runs,
        "summary": summary,
        "targets": {
            "cpu_s_at_or_below": round(1.4 * args.hosts / 32, 2),  # pyinfra 3.10, REFERENCE.md
            "cpu_s_per_host_at_or_below": 0.03,  # issue 14
            "wall_ratio_vs_openssh_at_most": 1.1,
        },
    }
    if "gpufleet" in summary and "openssh" in summary:
        g = summary["gpufleet"]
        for floor in ("openssh", "openssh-curve25519"):
            if floor in summary:
                ratio = g["wall_s_median"] / summary[floor]["wall_s_median"]
                result[f"gpufleet_vs_{floor}_wall_ratio"] = round(ratio, 3)
        if "gpufleet-1host" in summary and args.hosts > 1:
            marginal = (g["cpu_s_median"] - summary["gpufleet-1host"]["cpu_s_median"]) / (
                args.hosts - 1
            )
            result["gpufleet_cpu_s_per_extra_host"] = round(marginal, 4)
        result["targets_met"] = {
            "cpu": g["cpu_s_median"] <= 1.4 * args.hosts / 32,
            "cpu_per_host": g["cpu_s_per_host_median"] <= 0.03,
            "wall": result["gpufleet_vs_openssh_wall_ratio"] <= 1.1,
        }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")

    print(f"{args.hosts} hosts x {args.profile}, -f {forks}, {args.reps} reps (median; min)")
    print(f"{'tool':19} {'wall s':>15} {'controller CPU s':>19}  all ok")
    for tool, s in summary.items():
        wall = f"{s['wall_s_median']:7.2f} ({s['wall_s_min']:5.2f})"
        cpu = f"{s['cpu_s_median']:10.2f} ({s['cpu_s_min']:5.2f})"
        print(f"{tool:19} {wall} {cpu}  {s['all_hosts_ok']}")
    print(f"written {out}")
    return 0 if all(s["all_hosts_ok"] for s in summary.values()) else 1


def _versions() -> dict[str, str]:
    def first_line(argv: list[str]) -> str:
        r = subprocess.run(argv, capture_output=True, text=True, check=False)
        return (r.stdout or r.stderr).splitlines()[0].strip() if (r.stdout or r.stderr) else "?"

    venv_bin = Path(sys.executable).parent
    return {
        "python": platform.python_version(),
        "ansible": first_line([str(venv_bin / "ansible"), "--version"]),
        "openssh": first_line(["ssh", "-V"]),
        "paramiko": _dist_version("paramiko"),
        "gpufleet": _dist_version("gpufleet"),
    }


def _dist_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "?"


if __name__ == "__main__":
    sys.exit(main())
