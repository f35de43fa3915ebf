"""Rank 0's verdicts on deep.py's measurements: pure functions, stdlib only.

Each aggregator (the third field of its registry.py entry) takes every rank's record
({"rank", "info", "checks"}) and returns (passed, detail, data); data["problems"] lists each
failed judgement as {"kind", "rank", "message", "fix", ...}, which gpufleet's rules map to rule
ids (rules/deep.py). Thresholds and their sources: docs/smoke.md, "Deeper checks".
"""

from __future__ import annotations

import os
import statistics

# PCIe per-lane, per-direction payload rate in GB/s after line coding (PCI-SIG: 2.5/5 GT/s with
# 8b/10b, 8/16/32 GT/s with 128b/130b, 64 GT/s PAM4 FLIT mode 242/256).
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.9846, 4: 1.9692, 5: 3.9385, 6: 7.5625}
# Pinned 1 GiB copies reach 55.4 H2D / 55.3 D2H GB/s on an H200's Gen5 x16 link (63.0 GB/s):
# REFERENCE.md, measured 2026-11-30. Expected = link rate x this ratio.
PINNED_CALIBRATION = 0.879
# A GPU below this fraction of its expectation is named (Gen5 x16: 47.1 GB/s; a x8 or Gen4 link
# gives ~27).
PINNED_FLOOR = 0.85
# Both H200s at once kept 0.94-1.0 of their single rates (REFERENCE.md); a host whose concurrent
# total falls below this fraction of the sum of singles is the bottleneck.
HOST_FRACTION = 0.75
# DDP weak scaling 1->2 H200 over NV18: 0.954 (REFERENCE.md); judged at 0.85 (~10 % margin).
# GPUFLEET_SMOKE_MIN_SCALING overrides it (hosts without NVLink scale worse by design).
MIN_SCALING = 0.85
# Ranks stepping alone at once: a rank this much slower than the fastest is named. CPU ranks are
# judged on the CPU time of their steps (wall time on a shared 2-core machine differed 17x between
# healthy ranks), with a wide margin still.
SLOW_RATIO = {"gpu": 1.2, "cpu": 3.0}

def env_float(name, default):
    try:
        return float(os.environ.get(name) or default)
    except (TypeError, ValueError):
        return default


def problem(kind, rank, message, fix, **extra):
    return {"kind": kind, "rank": rank, "message": message, "fix": fix, **extra}



# --------------------------------------------------------------------------- rank 0: verdicts


def _who(ident):
    if not ident:
        return "?"
    if ident.get("device", "").startswith("cuda"):
        idx = ident["device"].split(":")[-1]
        extra = ", ".join(x for x in (ident.get("bus_id"), ident.get("uuid")) if x)
        return "GPU%s of rank %s (%s%s)" % (idx, ident["rank"], ident.get("name"),
                                            ", " + extra if extra else "")
    return "rank %s (cpu)" % ident.get("rank")


def _link_text(link):
    if not link or link.get("width_max") is None:
        return "link state unknown"
    return "PCIe Gen%s x%s (max Gen%s x%s)" % (link.get("gen_current"), link.get("width_current"),
                                              link.get("gen_max"), link.get("width_max"))


def _expected(link):
    if not link or not link.get("gen_max") or not link.get("width_max"):
        return None
    lane = PCIE_LANE_GBPS.get(link["gen_max"])
    return lane * link["width_max"] * PINNED_CALIBRATION if lane else None


def agg_hostdev(ranks):
    rows = [(r, r["checks"]["hostdev_bw"]) for r in ranks if r["checks"].get("hostdev_bw")]
    links = {}  # host -> every GPU's link state, as local rank 0 read it under load
    for r, c in rows:
        for link in (c.get("links") or {}).values():
            links.setdefault(r["info"]["host"], []).append(link)
    per_gpu, probs = {}, []
    hosts = {}
    for r, c in rows:
        if "error" in c:
            probs.append(problem("check_error", r["rank"], c["error"], "read the traceback"))
            continue
        ident = dict(c["identity"], host=r["info"]["host"])
        link = _match_link(links.get(ident["host"], []), ident)
        exp = _expected(link)
        row = {"who": _who(ident), "host": ident["host"], "alone": c["alone"],
               "together": c["together"], "link": link, "expected_pinned_gbps": exp,
               "numa": c.get("numa")}
        per_gpu[str(r["rank"])] = row
        hosts.setdefault(ident["host"], []).append((r["rank"], row))
    for host, members in sorted(hosts.items()):
        med = statistics.median(min(m["alone"]["pinned_h2d"], m["alone"]["pinned_d2h"])
                                for _, m in members)
        for rank, m in members:
            worst_dir = min(("pinned_h2d", "pinned_d2h"), key=lambda k: m["alone"][k])
            got = m["alone"][worst_dir]
            exp = m["expected_pinned_gbps"]
            if exp is not None and got < PINNED_FLOOR * exp:
                link = m["link"]
                degraded = (link.get("gen_current") or 0) < link["gen_max"] or \
                    (link.get("width_current") or 0) < link["width_max"]
                why = ("the link runs below its maximum: reseat the GPU/riser, check BIOS PCIe "
                       "settings and `nvidia-smi -q -d PCIE`" if degraded else
                       "the link itself is at its maximum: look for other traffic on it (GPU "
                       "processes, `nvidia-smi dmon -s t`), IOMMU/ACS settings and the CPU "
                       "socket the copy runs on")
                probs.append(problem(
                    "gpu_slow", rank,
                    "%s on %s: pinned %s %.1f GB/s alone, below %.0f %% of the %.1f GB/s "
                    "expected from its %s" % (m["who"], host, worst_dir[7:].upper(), got,
                                              100 * PINNED_FLOOR, exp, _link_text(link)),
                    why, host=host, gbps=got, expected_gbps=exp, link=link))
            elif exp is None and len(members) > 1 and got < 0.8 * med:
                probs.append(problem(
                    "gpu_slow", rank,
                    "%s on %s: pinned %s %.1f GB/s alone, below 80 %% of its peers' median "
                    "%.1f GB/s (%s)" % (m["who"], host, worst_dir[7:].upper(), got, med,
                                        _link_text(m["link"])),
                    "compare `nvidia-smi -q -d PCIE` of the GPUs; reseat the slow one",
                    host=host, gbps=got, peers_median_gbps=med))
        if len(members) > 1:
            for key in ("pinned_h2d", "pinned_d2h"):
                single = sum(m["alone"][key] for _, m in members)
                together = sum(m["together"][key] for _, m in members)
                if together < HOST_FRACTION * single:
                    numa = {m["who"]: m.get("numa") for _, m in members}
                    probs.append(problem(
                        "host_bound", None,
                        "%s: %d GPUs copying at once reach %.1f GB/s %s in total, %.0f %% of the "
                        "%.1f GB/s their single copies sum to: the host (PCIe root complex/"
                        "switch, NUMA placement, memory bandwidth) limits concurrent copies"
                        % (host, len(members), together, key[7:].upper(),
                           100 * together / single, single),
                        "check which root port/switch each GPU hangs off (`nvidia-smi topo -m`, "
                        "`lspci -tv`), bind each rank to its GPU's NUMA node (numactl, "
                        "torchrun's --local_ranks_filter / srun --cpu-bind), and the BIOS "
                        "memory/PCIe settings", host=host, numa=numa, single_sum_gbps=single,
                        together_gbps=together))
    detail = "; ".join(p["message"] for p in probs) or ", ".join(
        "%s %.1f/%.1f GB/s alone, %.1f/%.1f together (pinned H2D/D2H; pageable %.1f/%.1f)"
        % (v["who"].split(" (")[0], v["alone"]["pinned_h2d"], v["alone"]["pinned_d2h"],
           v["together"]["pinned_h2d"], v["together"]["pinned_d2h"],
           v["alone"]["pageable_h2d"], v["alone"]["pageable_d2h"])
        for _, v in sorted(per_gpu.items(), key=lambda kv: int(kv[0])))
    return not probs, detail, {"per_gpu": per_gpu, "problems": probs,
                               "calibration": PINNED_CALIBRATION, "floor": PINNED_FLOOR,
                               "host_fraction": HOST_FRACTION}


def _match_link(links, ident):
    """This GPU's row of nvidia-smi's link query: by UUID, else by PCI bus id."""
    for lk in links:
        if ident.get("uuid") and lk.get("uuid", "").lower() == ident["uuid"].lower():
            return lk
    for lk in links:
        if ident.get("bus_id") and lk.get("bus_id", "")[-12:].lower() == \
                ident["bus_id"][-12:].lower():
            return lk
    return None


def agg_scaling(ranks):
    rows = [(r, r["checks"]["scaling"]) for r in ranks if r["checks"].get("scaling")]
    errs = [problem("check_error", r["rank"], c["error"], "read the traceback")
            for r, c in rows if "error" in c]
    if errs or not rows:
        return False, "; ".join(p["message"] for p in errs), {"problems": errs}
    cpu = not ranks[0]["info"]["device"].startswith("cuda")
    first = rows[0][1]
    single = first.get("single_s")
    per_rank = {str(r["rank"]): {"who": _who(c["identity"]), "host": r["info"]["host"],
                                 "independent_s": c["independent_s"], "ddp_s": c.get("ddp_s")}
                for r, c in rows}
    probs = []

    def step(c):
        # CPU ranks share cores with the rest of the machine: the CPU time a step took is what
        # the rank needed; its wall time is what the load let it have. GPUs: wall time.
        return c.get("independent_cpu_s", c["independent_s"]) if cpu else c["independent_s"]

    fastest = min(step(c) for _, c in rows)
    ratio = SLOW_RATIO["cpu" if cpu else "gpu"]
    what = "median CPU time" if cpu else "median"
    for r, c in rows:
        if len(rows) > 1 and step(c) > ratio * fastest:
            probs.append(problem(
                "slow_rank", r["rank"],
                "%s on %s: %.1f ms per step alone (%s of %d) vs %.1f ms on the fastest rank "
                "(%.2fx, limit %.2fx)" % (_who(c["identity"]), r["info"]["host"],
                                          1e3 * step(c), what, first["steps"], 1e3 * fastest,
                                          step(c) / fastest, ratio),
                "check that GPU's clocks, throttling and other processes (`nvidia-smi -q -d "
                "PERFORMANCE,CLOCK`, `nvidia-smi --query-compute-apps=pid,name "
                "--format=csv`), and the CPU cores its rank may use",
                host=r["info"]["host"], step_s=step(c), fastest_s=fastest))
    data = {"per_rank": per_rank, "single_s": single, "model": first["model"],
            "steps": first["steps"], "world_size": len(rows), "problems": probs,
            "slow_ratio": ratio}
    eff = None
    if len(rows) > 1:
        t_n = max(c["ddp_s"] for _, c in rows)
        eff = single / t_n
        minimum = env_float("GPUFLEET_SMOKE_MIN_SCALING", MIN_SCALING)
        data.update(ddp_s=t_n, efficiency=eff, threshold=None if cpu else minimum)
        if not cpu and eff < minimum:
            probs.append(problem(
                "low_scaling", None,
                "DDP weak-scaling efficiency 1->%d ranks %.3f < %.2f: %.1f ms per step on one "
                "GPU, %.1f ms on all %d (throughput %.2fx of %dx)"
                % (len(rows), eff, minimum, 1e3 * single, 1e3 * t_n, len(rows),
                   len(rows) * eff, len(rows)),
                "a slow rank (above) or the interconnect: check `nvidia-smi topo -m` and "
                "`nvidia-smi nvlink -s`, NCCL_P2P_DISABLE/NCCL_SHM_DISABLE in the environment, "
                "and each rank's CPU binding", efficiency=eff, threshold=minimum))
    if probs:
        detail = "; ".join(p["message"] for p in probs)
    elif eff is None:
        detail = "one rank: %.1f ms per step, nothing to scale to" % (1e3 * single)
    else:
        detail = "weak-scaling efficiency 1->%d %.3f (%.1f -> %.1f ms per step)%s" % (
            len(rows), eff, 1e3 * single, 1e3 * data["ddp_s"],
            " (CPU ranks: recorded, not judged)" if cpu else "")
    return not probs, detail, data


def agg_sdc(ranks):
    rows = [(r, r["checks"]["sdc"]) for r in ranks if r["checks"].get("sdc")]
    errs = [problem("check_error", r["rank"], c["error"], "read the traceback")
            for r, c in rows if "error" in c]
    if errs or not rows:
        return False, "; ".join(p["message"] for p in errs), {"problems": errs}
    ref = next((c.get("cpu_reference") for _, c in rows if c.get("cpu_reference")), {})
    bad = {}  # rank -> reasons

    def blame(rank, why):
        bad.setdefault(rank, []).append(why)

    ops = sorted(rows[0][1]["ops"])
    what = {op: rows[0][1]["ops"][op]["what"] for op in ops}
    # First what needs no peers: a device against itself (repeats) and against exact arithmetic.
    for op in ops:
        for r, c in rows:
            o = c["ops"][op]
            if o["changed_runs"]:
                blame(r["rank"], "%s changed in %d of %d repeats on the same device"
                      % (what[op], o["changed_runs"], c["iterations"] - 1))
            if op in ref and o["digest"] != ref[op]:
                blame(r["rank"], "%s differs from the CPU reference" % what[op])
    exact_bad = set(bad)
    # Then bit-exact agreement among devices of the same model, where no exact answer exists.
    models = {}
    for r, c in rows:
        models.setdefault(c["identity"].get("name"), []).append((r, c))
    for op in (o for o in ops if o not in ref):
        for members in models.values():
            votes = {}
            for r, c in members:
                votes.setdefault(tuple(c["ops"][op]["digest"]), []).append(r["rank"])
            if len(votes) < 2:
                continue
            top = max(len(v) for v in votes.values())
            winners = [d for d, v in votes.items() if len(v) == top]
            everyone = sorted(rk for v in votes.values() for rk in v)
            if len(winners) == 1:
                for d, v in votes.items():
                    if d != winners[0]:
                        for rk in v:
                            blame(rk, "%s differs from %d other device(s) of the same model"
                                  % (what[op], top))
                continue
            # No majority (two devices): the ones that failed an exact check are to blame.
            suspects = [rk for rk in everyone if rk in exact_bad]
            for rk in suspects or everyone:
                blame(rk, "%s disagrees between ranks %s (no majority%s)"
                      % (what[op], ", ".join(map(str, everyone)),
                         "; this one failed the exact checks" if suspects else ""))
    probs = []
    by_rank = {r["rank"]: (r, c) for r, c in rows}
    for rk, why in sorted(bad.items()):
        r, c = by_rank[rk]
        probs.append(problem(
            "sdc", rk, "%s on %s computed wrong results: %s" % (_who(c["identity"]),
                                                                r["info"]["host"],
                                                                "; ".join(why)),
            "drain the host and run `dcgmi diag -r 3` (or -r 4) on that GPU; RMA it if the "
            "mismatch repeats", host=r["info"]["host"], identity=c["identity"]))
    secs = max(c["seconds"] for _, c in rows)
    iters = min(c["iterations"] for _, c in rows)
    data = {"problems": probs, "ops": what,
            "per_rank": {str(r["rank"]): {"who": _who(c["identity"]), "iterations": c["iterations"],
                                          "seconds": c["seconds"], "tflops": c["tflops"],
                                          "digests": {op: c["ops"][op]["digest"] for op in ops}}
                         for r, c in rows},
            "cpu_reference": ref}
    detail = "; ".join(p["message"] for p in probs) or (
        "%d ops bit-identical on %d device(s) and repeats, exact ops equal to the CPU "
        "reference (%d iterations, %.1f s)" % (len(ops), len(rows), iters, secs))
    return not probs, detail, data


def agg_readiness(ranks):
    rows = [(r, r["checks"]["readiness"]) for r in ranks if r["checks"].get("readiness")]
    probs, seen = [], set()
    for r, c in rows:
        if "error" in c:
            probs.append(problem("check_error", r["rank"], c["error"], "read the traceback"))
        for p in c.get("problems", []):
            key = (p["kind"], p["message"])
            if key not in seen:  # the same image on every rank says the same thing once
                seen.add(key)
                probs.append(dict(p, host=r["info"]["host"]))
    c0 = rows[0][1] if rows else {}
    failing = [p for p in probs if p["kind"] in ("cudnn_unavailable", "compile_failed",
                                                 "compile_mismatch", "check_error")]
    parts = ["TF32 matmul %s by default (precision %s)"
             % ("on" if c0.get("tf32_matmul") else "off", c0.get("float32_matmul_precision"))]
    gain = c0.get("tf32_gain")
    if gain:
        parts.append("fp32 %.1f TFLOP/s, %.1f with TF32 (%.1fx)"
                     % (gain["fp32_tflops"], gain["tf32_tflops"], gain["speedup"]))
    if c0.get("cudnn"):
        parts.append("cuDNN %s" % c0["cudnn"])
    comp = [c.get("compile") for _, c in rows if c.get("compile")]
    if comp and all(x.get("passed") for x in comp):
        parts.append("torch.compile ok on %d rank(s), %.1f-%.1f s cold, rel err <= %.1e"
                     % (len(comp), min(x["compile_s"] for x in comp),
                        max(x["compile_s"] for x in comp), max(x["rel_err"] for x in comp)))
    detail = "; ".join(p["message"] for p in failing) or ", ".join(parts)
    if probs and not failing:
        detail += "; " + "; ".join(p["message"] for p in probs)
    per_rank = {str(r["rank"]): {k: v for k, v in c.items() if k != "problems"} for r, c in rows}
    return not failing, detail, {"per_rank": per_rank, "problems": probs,
                                 "tf32_matmul_default": c0.get("tf32_matmul"),
                                 "tf32_gain": gain}
