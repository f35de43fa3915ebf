"""localize vs exhaustive pairwise on network-namespace fleets with one throttled host.

    .venv/bin/python benchmarks/localize_netns.py [--hosts 16 32] [--pair-sample 6] [--out FILE]

For each size: a fresh tests/fleet/netfleet.py fleet (one namespace, sshd and veth per host, a
bridge in the controller's namespace), one host throttled to 45 Mbit/s with tbf, then
`gpufleet localize` (binary, inventory floor) timed end to end, its worlds counted and the
suspect checked. Exhaustive pairwise is N(N-1)/2 two-host worlds; it is estimated from a
measured sample of pairs (`gpufleet smoke --multinode -l a,b`, same world settings), half of
them containing the throttled host, the rest not: estimated wall = N(N-1)/2 x mean pair time
(the throttled host is in N-1 of the pairs, so the estimate weights its pairs by that share).
Worlds: 1 gloo rank per host, a 1 MiB sweep. Needs root.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "fleet"))

from netfleet import make_netfleet  # noqa: E402

FLOOR_GBPS = 0.02
THROTTLE_MBIT = 45


def one_size(n: int, pair_sample: int, rng: random.Random) -> dict[str, Any]:
    names = [f"n{i:02d}" for i in range(1, n + 1)]
    bad = names[rng.randrange(n)]
    root = Path(tempfile.mkdtemp(prefix=f"gf13-bench-{n}-"))
    with make_netfleet(root, names,
                       all_vars={"gpufleet_multinode_min_busbw_gbps": FLOOR_GBPS}) as fleet:
        fleet.env.update(GPUFLEET_SMOKE_NPROC="1", GPUFLEET_SMOKE_SIZES=str(1 << 20))
        fleet.throttle_host(bad, THROTTLE_MBIT)
        t = time.monotonic()
        proc = fleet.run_cli("localize", "-i", str(fleet.inventory), "--format", "json",
                             "--smoke-timeout", "300", timeout=3600)
        wall = time.monotonic() - t
        loc = json.loads(proc.stdout)["localize"]
        named = [(s["kind"], s["hosts"]) for s in loc["suspects"]]
        print(f"{n} hosts: {loc['worlds_run']} worlds, {wall:.1f} s, named {named} "
              f"(throttled {bad})", file=sys.stderr)
        others = [h for h in names if h != bad]
        pairs = [(bad, h) for h in rng.sample(others, pair_sample // 2)]
        pairs += [tuple(rng.sample(others, 2)) for _ in range(pair_sample - len(pairs))]
        measured = []
        for a, b in pairs:
            t = time.monotonic()
            p = fleet.run_cli("smoke", "-i", str(fleet.inventory), "-l", f"{a},{b}",
                              "--multinode", "--format", "json", "--smoke-timeout", "300",
                              timeout=900)
            took = time.monotonic() - t
            smoke = json.loads(p.stdout)["hosts"][a]["smoke"]
            bw = smoke["busbw_gbps"].get(str(1 << 20))
            measured.append({"pair": [a, b], "wall_s": round(took, 2), "busbw_gbps": bw,
                             "with_throttled": bad in (a, b)})
            print(f"  pair {a},{b}: {took:.1f} s, {bw} GB/s", file=sys.stderr)
    with_bad = [m["wall_s"] for m in measured if m["with_throttled"]]
    without = [m["wall_s"] for m in measured if not m["with_throttled"]]
    total = n * (n - 1) // 2
    est = (n - 1) * statistics.mean(with_bad) + (total - (n - 1)) * statistics.mean(without)
    return {
        "hosts": n, "throttled": bad,
        "localize": {"worlds_run": loc["worlds_run"], "wall_s": round(wall, 1),
                     "search_wall_s": loc["wall_s"], "outcome": loc["outcome"],
                     "suspects": named, "bound_2log2n_plus_2": 2 * (n - 1).bit_length() + 2,
                     "worlds": [{k: w[k] for k in ("index", "stage", "members", "busbw_gbps",
                                                    "passed", "duration_s")}
                                for w in loc["worlds"]]},
        "pairwise": {"worlds": total, "sample": measured,
                     "estimated_wall_s": round(est, 1),
                     "note": "N(N-1)/2 two-host worlds; wall estimated from the measured "
                             "sample, the throttled host's pairs weighted by N-1"},
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, nargs="+", default=[16, 32])
    ap.add_argument("--pair-sample", type=int, default=6)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    rng = random.Random(args.seed)  # noqa: S311  # picks hosts, not secrets
    runs = [one_size(n, args.pair_sample, rng) for n in args.hosts]
    doc = {
        "benchmark": "localize vs exhaustive pairwise, network-namespace fleet, one host "
                     "throttled to 45 Mbit/s (tbf)",
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {"cpus": os.cpu_count(), "kernel": platform.release(),
                    "load_avg_at_end": os.getloadavg()},
        "world": {"ranks_per_host": 1, "backend": "gloo", "sizes_bytes": [1 << 20],
                  "floor_gbps": FLOOR_GBPS, "throttle_mbit": THROTTLE_MBIT},
        "runs": runs,
    }  # fmt: skip
    text = json.dumps(doc, indent=2) + "\n"
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
