"""Rank 0's world verdict: every rank's record -> the world checks of result.json."""

from __future__ import annotations

import json
import traceback

from .busbw import busbw_verdict, human
from .registry import CHECKS


def aggregate(ranks, bw_world, args):
    """Rank 0: turn every rank's measurements into world checks (and busbw by size)."""
    checks = []

    def add(name, passed, detail, data):
        checks.append({"name": name, "passed": bool(passed), "detail": detail, "data": data})

    add("versions", *_versions(ranks))
    add("device_count", *_device_count(ranks))
    for chk in CHECKS:
        if not any(r["checks"].get(chk.name) for r in ranks):
            continue
        try:
            add(chk.name, *chk.aggregate(ranks))
        except Exception as e:  # a verdict bug must not cost the whole result
            add(chk.name, False, "could not judge %s: %s: %s" % (chk.name, type(e).__name__, e),
                {"problems": [], "traceback": traceback.format_exc()[-1500:]})
    if bw_world is None:
        add("busbw", True, "no bandwidth measured: world size %d (one rank)" % len(ranks),
            {"measured": False})
        return checks, {}
    passed, detail, data = _busbw(ranks, bw_world, args)
    add("busbw", passed, detail, data)
    return checks, {str(s): v["busbw_gbps"] for s, v in bw_world["world"].items()}


def _versions(ranks):
    keys = ("torch", "cuda", "cudnn", "nccl")
    per_rank = {str(r["rank"]): {k: r["info"][k] for k in keys} for r in ranks}
    distinct = {k: sorted({str(r["info"][k]) for r in ranks}) for k in keys}
    differ = [k for k in keys if len(distinct[k]) > 1]
    r0 = ranks[0]["info"]
    detail = ("ranks disagree on " + ", ".join("%s (%s)" % (k, " vs ".join(distinct[k]))
                                              for k in differ)) if differ else \
        "torch %s, CUDA %s, cuDNN %s, NCCL %s on all %d ranks" % (
            r0["torch"], r0["cuda"], r0["cudnn"], r0["nccl"], len(ranks))
    return not differ, detail, {"per_rank": per_rank}


def _device_count(ranks):
    problems = []
    per_host = {}
    for r in ranks:
        i = r["info"]
        per_host.setdefault(i["host"], {"torch": i["torch_device_count"],
                                        "nvidia_smi": i["smi_count"],
                                        "expected": i["expect_gpus"],
                                        "ranks": i["local_world_size"],
                                        "visible_env": i.get("visible_env") or {}})
    for host, h in sorted(per_host.items()):
        if h["nvidia_smi"] is None:
            problems.append("%s: nvidia-smi could not be read" % host)
        elif h["torch"] != h["nvidia_smi"]:
            mask = "".join(" (%s=%s in the ranks' environment: from the ssh session, the "
                           "image's env or the run's env; unset it there)" % kv
                           for kv in sorted(h["visible_env"].items()))
            problems.append("%s: torch sees %d GPU(s), nvidia-smi lists %d%s"
                            % (host, h["torch"], h["nvidia_smi"], mask))
        if h["expected"] is not None and h["nvidia_smi"] != h["expected"]:
            problems.append("%s: inventory expects %d GPU(s), nvidia-smi lists %s"
                            % (host, h["expected"], h["nvidia_smi"]))
        if h["nvidia_smi"] and h["ranks"] > h["torch"]:
            problems.append("%s: %d ranks but only %d GPU(s) visible to torch"
                            % (host, h["ranks"], h["torch"]))
    detail = "; ".join(problems) or ", ".join(
        "%s: %d GPU(s)" % (host, h["torch"]) for host, h in sorted(per_host.items()))
    return not problems, detail, {"per_host": per_host}


def _busbw(ranks, bw_world, args):
    ref = json.loads(args.reference) if args.reference else None
    ref = {int(k): float(v) for k, v in ref.items()} if ref else None
    if not all(r["info"]["device"].startswith("cuda") for r in ranks):
        ref = None  # the reference is for NCCL on these GPUs, not a gloo fallback
    res = bw_world["world"]
    ok, detail, data = busbw_verdict(res, ref)
    if ref and args.expectation:
        data["basis"] = "expectation"
        data["expectation"] = json.loads(args.expectation)
        top = max(s for s in res if s in ref) if any(s in ref for s in res) else None
        if top is not None:
            data["largest"] = {"bytes": top, "measured_gbps": res[top]["busbw_gbps"],
                               "expected_gbps": ref[top],
                               "ratio": res[top]["busbw_gbps"] / ref[top]}
            detail += " (%.0f%% of the %.1f GB/s expected at %s from %s)" % (
                100.0 * res[top]["busbw_gbps"] / ref[top], ref[top], human(top),
                data["expectation"].get("basis"))
    data["measured"] = True
    data["method"] = bw_world.get("method")
    data["world_size"] = len(ranks)
    local = {r["info"]["host"]: {str(s): v["busbw_gbps"] for s, v in r["bw"]["local"].items()}
             for r in ranks if r.get("bw", {}).get("local") and r["info"]["local_rank"] == 0}
    if local:
        data["per_host_busbw_gbps"] = local
    return ok, detail, data
