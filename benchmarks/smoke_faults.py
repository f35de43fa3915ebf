"""Issue 9 on a GPU machine: expectation, NCCL config and failure causes, one scenario each.

    python3 benchmarks/smoke_faults.py --out DIR --prefix 2026-11-30-nvidia-h200-x2 \
        full nccl-p2p kill9 stop hang

Scenarios (local transport, no facts: the runner's preflight reads links and NCCL config):
- full: healthy `--level full`; must pass with the expectation and the ratio in busbw's data.
- nccl-p2p: NCCL_P2P_DISABLE=1 appended to /etc/nccl.conf (the original bytes are restored
  afterwards, checked by sha256); busbw must fail and name the setting and the file.
- kill9: `--level full`, rank 1 gets SIGKILL once it reaches the busbw phase; the cause must be
  SIGKILL on rank 1, within 5 s, and not `timeout`.
- stop: `--level quick`, rank 1 gets SIGSTOP 1 s after it starts; the stopped rank must be
  named within 30 s.
- hang: `--level quick` with the test switch (rank 1 sleeps before a collective): the stall
  verdict within 30 s of its last progress.
After each scenario: no process carrying this run's marker and no run dir may be left.
It imports only gpufleet's stdlib parts (and torch through the smoke script).
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "agent"))

from gpufleet.model import Expectations, HostSpec, SmokeResult, to_jsonable
from gpufleet.probes import collect
from gpufleet.smoke import runner
from gpufleet.smoke.runner import MARKER, SmokeOptions, run_smoke
from gpufleet.transport.local import LocalTransport

NCCL_CONF = Path("/etc/nccl.conf")
RUN_PREFIX = f"gfsmoke-d{os.getpid()}-"


def ours() -> dict[int, dict[str, str]]:
    out = {}
    for p in glob.glob("/proc/[0-9]*/environ"):
        try:
            raw = Path(p).read_bytes()
        except OSError:
            continue
        env = dict(e.split("=", 1) for e in raw.decode(errors="replace").split("\0") if "=" in e)
        if env.get(MARKER, "").startswith(RUN_PREFIX):
            out[int(p.split("/")[2])] = env
    return out


def rank_pid(rank: int, timeout: float = 180) -> int | None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for pid, env in ours().items():
            if env.get("RANK") == str(rank) and "LOCAL_RANK" in env:
                return pid
        time.sleep(0.02)
    return None


def rank_phase(rank: int) -> str | None:
    for f in glob.glob(f"/tmp/gpufleet-smoke.{RUN_PREFIX}*/rank{rank}.progress"):
        try:
            return str(json.loads(Path(f).read_text()).get("phase"))
        except (OSError, ValueError):
            return None
    return None


def attack(sig: int, *, after_start: float | None = None, at_phase: str | None = None,
           record: dict[str, Any]) -> None:
    pid = rank_pid(1)
    if pid is None:
        record["error"] = "rank 1 never started"
        return
    if after_start is not None:
        time.sleep(after_start)
    if at_phase is not None:
        end = time.monotonic() + 240
        while rank_phase(1) != at_phase and time.monotonic() < end:
            time.sleep(0.01)
        time.sleep(0.5)  # inside the phase's collectives
    os.kill(pid, sig)
    record.update(pid=pid, signal=signal.Signals(sig).name, at_mono=time.monotonic(),
                  at_epoch=time.time(), phase_seen=rank_phase(1))


def sha(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("scenarios", nargs="+",
                    choices=("full", "nccl-p2p", "kill9", "stop", "hang"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = open(out / f"{args.prefix}-smoke-faults.log", "w")  # noqa: SIM115
    runner._new_run_id = lambda: RUN_PREFIX + secrets.token_hex(4)  # type: ignore[attr-defined]

    def say(msg: str) -> None:
        print(msg, flush=True)
        log.write(msg + "\n")
        log.flush()

    say(f"# {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} smoke_faults.py "
        f"{' '.join(args.scenarios)}")
    say(subprocess.run(["sh", "-c", "nvidia-smi -L; nvidia-smi topo -m; "
                        "nvidia-smi nvlink -s | head -4; cat /etc/nccl.conf"],
                       capture_output=True, text=True, check=False).stdout)
    say("env: " + " ".join(f"{k}={v}" for k, v in sorted(os.environ.items())
                           if k.startswith(("NCCL_", "TORCH_", "NVSHMEM_"))))
    spec = HostSpec(name=os.uname().nodename, address="localhost", connection="local",
                    expect=Expectations(smoke_python=args.python))
    verdicts: dict[str, Any] = {}
    for name in args.scenarios:
        level = "quick" if name in ("nccl-p2p", "stop", "hang") else "full"
        opts = SmokeOptions(test_hang_rank=1) if name == "hang" else SmokeOptions()
        record: dict[str, Any] = {}
        original = NCCL_CONF.read_bytes() if NCCL_CONF.exists() else None
        before_sha = sha(NCCL_CONF)
        if name == "nccl-p2p":
            NCCL_CONF.write_bytes((original or b"").rstrip(b"\n") + b"\nNCCL_P2P_DISABLE=1\n")
        if name == "kill9":
            threading.Thread(target=attack, args=(signal.SIGKILL,),
                             kwargs={"at_phase": "busbw", "record": record}, daemon=True).start()
        if name == "stop":
            threading.Thread(target=attack, args=(signal.SIGSTOP,),
                             kwargs={"after_start": 1.0, "record": record}, daemon=True).start()
        # The runner judges with the host's facts; read them now, after the scenario's change
        # (nccl-p2p edits the NCCL config the facts report).
        facts = collect(LocalTransport(spec), spec)
        t = time.monotonic()
        try:
            res: SmokeResult = run_smoke(spec, LocalTransport(spec), facts, level=level,
                                         timeout=args.timeout, options=opts)
        finally:
            if name == "nccl-p2p":
                if original is None:
                    NCCL_CONF.unlink()
                else:
                    NCCL_CONF.write_bytes(original)
        end = time.monotonic()
        left = {pid: env.get("RANK") for pid, env in ours().items()}
        dirs = glob.glob(f"/tmp/gpufleet-smoke.{RUN_PREFIX}*")
        doc: dict[str, Any] = {
            "scenario": name, "level": level, "controller_wall_s": round(end - t, 3),
            "attack": {k: v for k, v in record.items() if k != "at_mono"},
            "left_processes": left, "left_dirs": dirs,
            "nccl_conf_sha256": {"before": before_sha, "after": sha(NCCL_CONF)},
            "result": to_jsonable(res),
        }
        if "at_mono" in record:
            doc["attack_to_runner_verdict_s"] = round(end - record["at_mono"], 3)
            wd = (res.causes.get("watchdog") or [{}])[0]
            if wd.get("at"):
                doc["attack_to_watchdog_verdict_s"] = round(wd["at"] - record["at_epoch"], 3)
            elif wd.get("kind") == "exited":
                r1 = res.causes.get("ranks", {}).get("1", {})
                doc["rank1_exit_to_watchdog_s"] = round(
                    float(wd.get("after_s", 0)) - float(r1.get("t_exit", 0)), 3)
        path = out / f"{args.prefix}-smoke-faults-{name}.json"
        path.write_text(json.dumps(doc, indent=1) + "\n")
        say(f"\n## {name}: status={res.status} wall={end - t:.2f}s hung={list(res.hung_ranks)}")
        for c in res.checks:
            say(f"  {'PASS' if c.passed else 'FAIL'} {c.name}: {c.detail[:600]}")
            if c.name == "busbw":
                exp = c.data.get("expectation") or {}
                say(f"      expectation: basis={exp.get('basis')} raw={exp.get('raw_gbps')} "
                    f"calibration={exp.get('calibration')!r}")
                say(f"      largest: {json.dumps(c.data.get('largest'))}")
                for size, v in (c.data.get("sizes") or {}).items():
                    pct = v.get("pct_of_reference")
                    say(f"      {int(size) >> 20:>5} MiB  busbw {v['busbw_gbps']:7.1f} GB/s"
                        + (f"  {pct:5.1f}% of expected {v['reference_gbps']:.1f}" if pct
                           else ""))
        if res.error:
            say(f"  error: {res.error[:1500]}")
        for k in ("attack", "attack_to_runner_verdict_s", "attack_to_watchdog_verdict_s",
                  "rank1_exit_to_watchdog_s", "left_processes", "left_dirs",
                  "nccl_conf_sha256"):
            if k in doc:
                say(f"  {k}: {json.dumps(doc[k])}")
        verdicts[name] = judge(name, res, doc)
        say(f"  VERDICT {name}: {verdicts[name]}")
    (out / f"{args.prefix}-smoke-faults-summary.json").write_text(
        json.dumps(verdicts, indent=1) + "\n")
    return 0 if all(v["ok"] for v in verdicts.values()) else 1


def judge(name: str, res: SmokeResult, doc: dict[str, Any]) -> dict[str, Any]:
    """The issue's acceptance for this scenario, checked on what came back."""
    problems = []
    if doc["left_processes"] or doc["left_dirs"]:
        problems.append("something of the run was left")
    if doc["nccl_conf_sha256"]["before"] != doc["nccl_conf_sha256"]["after"]:
        problems.append("/etc/nccl.conf not restored")
    busbw = next((c for c in res.checks if c.name == "busbw"), None)
    if name == "full":
        if res.status != "pass" or busbw is None or "expectation" not in busbw.data:
            problems.append(f"status {res.status}, busbw without expectation")
    elif name == "nccl-p2p":
        if busbw is None or busbw.passed or "/etc/nccl.conf" not in busbw.detail \
                or "NCCL_P2P_DISABLE" not in busbw.detail:
            problems.append("busbw did not fail naming NCCL_P2P_DISABLE in /etc/nccl.conf")
    elif name == "kill9":
        r1 = res.causes.get("ranks", {}).get("1", {})
        if res.status != "error" or r1.get("signal") != "SIGKILL":
            problems.append(f"status {res.status}, rank 1 signal {r1.get('signal')}")
        if doc.get("attack_to_runner_verdict_s", 99) > 5.0 + 5.0:
            problems.append("verdict later than 5 s (+5 s cleanup)")
    elif name in ("stop", "hang"):
        wd = (res.causes.get("watchdog") or [{}])[0]
        if res.status != "error" or res.hung_ranks != (1,):
            problems.append(f"status {res.status}, hung {res.hung_ranks}")
        if name == "stop" and doc.get("attack_to_watchdog_verdict_s", 99) > 30:
            problems.append("stopped rank named later than 30 s")
        if name == "hang" and wd.get("at", 0) - (wd.get("where", {}).get("1") or {}).get(
                "t", 0) > 30:
            problems.append("hung rank named later than 30 s")
    return {"ok": not problems, "problems": problems}


if __name__ == "__main__":
    sys.exit(main())
