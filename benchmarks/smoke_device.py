"""Run the smoke test on this machine (local transport) in several scenarios; keep JSON + log.

Used on the GPU machines; the result files are committed under benchmarks/results/:

    python3 benchmarks/smoke_device.py --out DIR --prefix 2026-11-30-nvidia-h200-x2 \
        quick full p2p-disabled cvd0

Scenarios: quick, full (levels); p2p-disabled (quick with NCCL_P2P_DISABLE=1: bandwidth must
fail); cvd0 (quick with CUDA_VISIBLE_DEVICES=0 on a 2-GPU host: device count must fail);
quick-loop (quick with a plain launch loop instead of CUDA graphs, for comparison).
The deeper checks' injected faults (issue 17; each narrowed to its check with GPUFLEET_SMOKE_DEEP):
sdc-corrupt (the test-only hook flips one bit in every result of the last rank), hog-copy (a
second process copies over the last GPU's PCIe link: host<->device bandwidth must name it),
hog-matmul (a second process computes on the last GPU: scaling must name its rank), compile-nocc
(CC/CXX point nowhere and the compile caches are fresh: torch.compile must fail with its fix).
It calls gpufleet.smoke.runner.run_smoke directly, so only the stdlib and torch are needed; the
findings are gpufleet's rules on each result (pure, stdlib too).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "agent"))

from gpufleet.model import (
    Expectations,
    Facts,
    HostResult,
    HostSpec,
    Report,
    SmokeResult,
    to_jsonable,
)
from gpufleet.probes import collect
from gpufleet.report.pipeline import judge
from gpufleet.smoke.runner import SmokeOptions, run_smoke
from gpufleet.transport.local import LocalTransport

SCENARIOS: dict[str, tuple[str, dict[str, str], SmokeOptions]] = {
    "quick": ("quick", {}, SmokeOptions()),
    "quick-warm": ("quick", {}, SmokeOptions()),
    "full": ("full", {}, SmokeOptions()),
    "p2p-disabled": ("quick", {"NCCL_P2P_DISABLE": "1"}, SmokeOptions()),
    "cvd0": ("quick", {"CUDA_VISIBLE_DEVICES": "0"}, SmokeOptions()),
    "quick-loop": ("quick", {}, SmokeOptions(bw_method="loop")),
    "sdc-corrupt": ("full", {"GPUFLEET_SMOKE_DEEP": "sdc", "GPUFLEET_SMOKE_TEST_CORRUPT": "LAST",
                             "GPUFLEET_SMOKE_SDC_SECONDS": "3"}, SmokeOptions()),
    "sdc-intermittent": ("full", {"GPUFLEET_SMOKE_DEEP": "sdc",
                                  "GPUFLEET_SMOKE_TEST_CORRUPT": "LAST:intermittent",
                                  "GPUFLEET_SMOKE_SDC_SECONDS": "3"}, SmokeOptions()),
    "hog-copy": ("full", {"GPUFLEET_SMOKE_DEEP": "hostdev_bw"}, SmokeOptions()),
    "hog-matmul": ("full", {"GPUFLEET_SMOKE_DEEP": "scaling"}, SmokeOptions()),
    # Issue 25: the whole full level with a co-tenant; each must get its SKU finding and cause.
    "hog-matmul-full": ("full", {}, SmokeOptions()),
    "hog-mem-full": ("full", {}, SmokeOptions()),
    "hog-copy-full": ("full", {}, SmokeOptions()),
    "compile-nocc": ("full", {"GPUFLEET_SMOKE_DEEP": "readiness", "CC": "/nonexistent/cc",
                              "CXX": "/nonexistent/c++", "TORCHINDUCTOR_CACHE_DIR": "FRESH",
                              "TRITON_CACHE_DIR": "FRESH"}, SmokeOptions()),
}
# Scenarios that start a second process on the last GPU first (benchmarks/gpu_hog.py).
HOGS = {"hog-copy": "copy", "hog-matmul": "matmul", "hog-matmul-full": "matmul",
        "hog-mem-full": "mem", "hog-copy-full": "copy"}


def gpu_count() -> int:
    out = sh("nvidia-smi -L")
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def start_hog(python: str, gpu: int, mode: str) -> subprocess.Popen[str]:
    hog = subprocess.Popen(
        [python, str(Path(__file__).with_name("gpu_hog.py")), "--gpu", str(gpu), "--mode", mode,
         "--seconds", "240"], stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert hog.stdout is not None
    hog.stdout.readline()  # "ready": the load runs
    return hog


def findings_of(spec: HostSpec, res: SmokeResult, facts: Facts | None = None
                ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The rules' findings on the run (with the facts: the SKU rules need them) and the
    host's expectations with the measured values beside them."""
    report = judge(Report(hosts={spec.name: HostResult(spec.name, "ok", facts=facts, smoke=res)},
                          specs={spec.name: spec}, level="smoke"))
    return ([to_jsonable(f) for f in report.findings],
            to_jsonable(report.hosts[spec.name].expectations))


def sh(cmd: str) -> str:
    r = subprocess.run(cmd, shell=True, capture_output=True, text=True, check=False)  # noqa: S602
    return (r.stdout + r.stderr).strip()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("scenarios", nargs="+", choices=sorted(SCENARIOS))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = open(out / f"{args.prefix}-smoke.log", "w")  # noqa: SIM115

    def say(msg: str) -> None:
        print(msg, flush=True)
        log.write(msg + "\n")
        log.flush()

    say(f"# {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} smoke_device.py {args.scenarios}")
    say(sh("nvidia-smi -L; nvidia-smi topo -m; uname -r"))
    say(
        sh(
            f"{args.python} -c 'import torch;print(torch.__version__, torch.version.cuda, "
            "torch.cuda.nccl.version())'"
        )
    )
    say(
        "env: "
        + " ".join(
            f"{k}={v}"
            for k, v in sorted(os.environ.items())
            if k.startswith(("NCCL_", "TORCH_", "NVSHMEM_", "CUDA_"))
        )
    )
    spec = HostSpec(
        name=os.uname().nodename,
        address="localhost",
        connection="local",
        expect=Expectations(smoke_python=args.python),
    )
    ngpu = gpu_count()
    for name in args.scenarios:
        level, env, opts = SCENARIOS[name]
        last = str(max(ngpu - 1, 0))
        env = {k: (tempfile.mkdtemp(prefix="gf-fresh-") if v == "FRESH" else
                   v.replace("LAST", last)) for k, v in env.items()}
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        hog = start_hog(args.python, int(last), HOGS[name]) if name in HOGS else None
        facts = collect(LocalTransport(spec), spec)  # after the hog: its process is a fact
        t = time.monotonic()
        try:
            res = run_smoke(
                spec, LocalTransport(spec), facts, level=level, timeout=args.timeout, options=opts,
                force=hog is not None,
            )
        finally:
            if hog is not None:
                os.killpg(hog.pid, signal.SIGKILL)
                hog.wait()
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        wall = time.monotonic() - t
        found, expected = findings_of(spec, res, facts)
        doc = {
            "scenario": name,
            "level": level,
            "env": env,
            "controller_wall_s": round(wall, 3),
            "hog": {"gpu": int(last), "mode": HOGS[name]} if name in HOGS else None,
            "result": to_jsonable(res),
            "findings": found,
            "expectations": expected,
        }
        (out / f"{args.prefix}-smoke-{name}.json").write_text(json.dumps(doc, indent=1) + "\n")
        say(
            f"\n## {name}: status={res.status} wall={wall:.2f}s world={res.world_size} "
            f"backend={res.backend}"
        )
        for c in res.checks:
            say(f"  {'PASS' if c.passed else 'FAIL'} {c.name}: {c.detail}")
            if c.name == "busbw":
                for size, v in (c.data.get("sizes") or {}).items():
                    pct = v.get("pct_of_reference")
                    say(
                        f"      {int(size) >> 20:>5} MiB  busbw {v['busbw_gbps']:7.1f} GB/s  "
                        f"{v['time_us']:9.1f} us  iters {v['iters']}"
                        + (f"  {pct:5.1f}% of ref {v['reference_gbps']}" if pct else "")
                    )
                say(f"      method: {c.data.get('method')}")
        say(f"  timings: {json.dumps(dict(res.timings_s), sort_keys=True)}")
        for f in found:
            say(f"  finding {f['rule']} {f['severity']}: {f['message'][:600]}")
        for e in expected:
            say(f"  expect {e['metric']:<22} {e.get('dtype') or '':<5} gpu {e.get('gpu')}: "
                f"measured {e['measured']} expected {e['expected']} floor {e['floor']}")
        if res.error:
            say(f"  error: {res.error}")
        if res.status not in ("pass", "fail"):
            say(f"  log tail:\n{res.log_tail}")
    left = sh("ps -eo pid,args | grep -c '[s]moke_ddp.py'; ls -d /tmp/gpufleet-smoke.* 2>&1")
    say(f"\n# leftover smoke processes (count) and run dirs after all runs:\n{left}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
