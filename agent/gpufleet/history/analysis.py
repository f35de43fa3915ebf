"""Per-host history over saved runs: what the index keeps, known-good runs, changes, trends.

A run is known-good for a host when the host was reachable, its smoke test (if any) passed and no
finding at warning or above named it. A host's own baseline is the median of its last
BASELINE_RUNS good runs measured alike (same backend and world size); the slow-drift rules that
judge a run against it (GF520/GF521) are rules/history.py's.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from gpufleet.model import fmt_bytes
from gpufleet.redact import number
from gpufleet.report.common import host_worst, versions
from gpufleet.report.wording import row_message

BASELINE_RUNS = 10
TREND_RUNS = 20

Entry = Mapping[str, Any]


def _numbers(raw: object) -> dict[str, float]:
    if not isinstance(raw, Mapping):
        return {}
    got = {str(k): number(v) for k, v in raw.items()}
    return {k: v for k, v in got.items() if v is not None}


def measured_key(e: Mapping[str, Any]) -> str:
    """One hosts.<name>.expectations line's identity across runs: "hbm_gbps gpu0",
    "matmul_tflops.fp8 gpu1", "allreduce_busbw_gbps @4294967296"."""
    key = str(e.get("metric") or "?")
    if e.get("dtype"):
        key += f".{e['dtype']}"
    if isinstance(e.get("gpu"), int):
        key += f" gpu{e['gpu']}"
    if isinstance(e.get("bytes"), int):
        key += f" @{e['bytes']}"
    return key


def _measured(hdoc: Mapping[str, Any]) -> dict[str, float]:
    """Every measured value of the host's expectation lines (what its own past judges, GF546)."""
    out: dict[str, float] = {}
    for e in hdoc.get("expectations") or ():
        if isinstance(e, Mapping) and (got := number(e.get("measured"))) is not None:
            out[measured_key(e)] = got
    return out


def _host_summary(hdoc: Mapping[str, Any], worst: str | None) -> dict[str, Any]:
    smoke = hdoc.get("smoke") or {}
    # A figure that is missing or not a finite number is left out, as every renderer does: a
    # null saved by an older gpufleet must not stop every later --save (issue 22 F3).
    bw = {int(k): v for k, v in _numbers(smoke.get("busbw_gbps")).items() if k.isdigit()}
    tflops = _numbers(smoke.get("matmul_tflops"))
    good = (hdoc.get("status") == "ok" and worst not in ("error", "warning")
            and smoke.get("status") in (None, "pass"))
    size = max(bw) if bw else None
    return {"status": hdoc.get("status"), "smoke": smoke.get("status"), "worst": worst,
            "good": good, "backend": smoke.get("backend"),
            "world": max(len(smoke.get("hosts") or []), 1),
            "busbw": [size, bw[size]] if size is not None else None,
            "busbw_all": {str(k): v for k, v in sorted(bw.items())}, "tflops": tflops,
            "measured": _measured(hdoc)}


def summarize_run(doc: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Per host, what the index keeps of a run."""
    worst = host_worst(doc)
    return {name: _host_summary(h, worst.get(name)) for name, h in (doc.get("hosts") or {}).items()}


def _alike(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return bool(a.get("backend") == b.get("backend") and a.get("world") == b.get("world"))


def good_runs(name: str, now: Mapping[str, Any], entries: Sequence[Entry]) -> list[Entry]:
    """`name`'s last BASELINE_RUNS known-good runs measured like `now` (its run summary)."""
    good = [e for e in entries
            if (s := e["hosts"].get(name)) is not None and s["good"] and _alike(s, now)]
    return good[-BASELINE_RUNS:]


def baselined_hosts(doc: Mapping[str, Any], entries: Sequence[Entry]
                    ) -> Iterator[tuple[str, dict[str, Any], list[Entry]]]:
    """(name, run summary, its good runs) for each host of DOC that a baseline can judge: it
    answered, it measured on a GPU backend, and the store holds good runs measured alike."""
    for name, now in sorted(summarize_run(doc).items()):
        if now["status"] != "ok" or now["backend"] in (None, "gloo"):
            continue
        good = good_runs(name, now, entries)
        if good:
            yield name, now, good


def _finding_keys(doc: Mapping[str, Any], name: str) -> dict[tuple[str, str], Mapping[str, Any]]:
    return {(f["rule"], str((f.get("evidence") or {}).get("subject", ""))): f
            for f in doc.get("findings") or [] if name in (f.get("hosts") or [])}


def changes_since(good_doc: Mapping[str, Any], doc: Mapping[str, Any], name: str) -> list[str]:
    """What changed for `name` from its last good run to this one, one line each."""
    a, b = (good_doc.get("hosts") or {}).get(name) or {}, (doc.get("hosts") or {}).get(name) or {}
    lines: list[str] = []
    if a.get("status") != b.get("status"):
        lines.append(f"status: {a.get('status')} -> {b.get('status')}")
    if a.get("facts") and b.get("facts"):
        va, vb = versions(a), versions(b)
        lines += [f"{k}: {va[k] or '-'} -> {vb[k] or '-'}" for k in vb if va[k] != vb[k]]
    sa, sb = _host_summary(a, None), _host_summary(b, None)
    if sa["busbw"] and sb["busbw"] and sa["busbw"][0] == sb["busbw"][0]:
        old, new = sa["busbw"][1], sb["busbw"][1]
        if old and abs(new - old) > 0.02 * old:
            lines.append(f"busbw @ {fmt_bytes(sa['busbw'][0])}: {old:.1f} -> {new:.1f} GB/s "
                         f"({(new - old) / old:+.1%})")
    fa, fb = _finding_keys(good_doc, name), _finding_keys(doc, name)
    lines += [f"+ {f['rule']} {f['severity']}: {row_message(f)}"
              for k, f in sorted(fb.items()) if k not in fa]
    lines += [f"- {f['rule']} resolved: {row_message(f)}"
              for k, f in sorted(fa.items()) if k not in fb]
    return lines


def history_section(doc: Mapping[str, Any], entries: Sequence[Entry],
                    load: Callable[[Entry], Mapping[str, Any]],
                    hosts: Sequence[str] | None = None,
                    saved: Entry | None = None) -> dict[str, Any]:
    """The report's "history" member: per host its last known-good run, changes and trend.

    `saved`: the store's entry of `doc` itself (`gpufleet history` reads the latest saved run):
    a host that was good in it has that run as its last known-good, with nothing changed since;
    `check --save` judges a run before saving it, so there the last good run is an older one."""
    now = summarize_run(doc)
    cache: dict[str, Mapping[str, Any]] = {}
    out: dict[str, Any] = {}
    for name in sorted(hosts if hosts is not None else now):
        cur = now.get(name)
        past = [(e, e["hosts"][name]) for e in entries if name in e["hosts"]]
        trend = [{"run": e["file"], "generated_at": e["generated_at"],
                  "busbw": s["busbw"][1] if s["busbw"] else None,
                  "bytes": s["busbw"][0] if s["busbw"] else None,
                  "tflops": min(s["tflops"].values()) if s["tflops"] else None,
                  "good": s["good"]} for e, s in past]
        if cur is not None:
            trend.append({"run": "this run", "generated_at": doc.get("generated_at") or "",
                          "busbw": cur["busbw"][1] if cur["busbw"] else None,
                          "bytes": cur["busbw"][0] if cur["busbw"] else None,
                          "tflops": min(cur["tflops"].values()) if cur["tflops"] else None,
                          "good": cur["good"]})
        good = [e for e, s in past if s["good"]]
        this_good = saved is not None and cur is not None and cur["good"]
        entry: dict[str, Any] = {"last_good": None, "changes": [], "trend": trend[-TREND_RUNS:],
                                 "baseline": None}
        if this_good and saved is not None:
            entry["last_good"] = {"run": saved["file"], "generated_at": saved["generated_at"]}
        if good:
            last = good[-1]
            if not this_good:
                entry["last_good"] = {"run": last["file"], "generated_at": last["generated_at"]}
            else:  # the saved run is the last good one: say what changed since the one before
                entry["changes_since"] = {"run": last["file"],
                                          "generated_at": last["generated_at"]}
            if last["file"] not in cache:
                cache[last["file"]] = load(last)
            entry["changes"] = changes_since(cache[last["file"]], doc, name)
        if cur is not None and cur["busbw"]:
            alike = good_runs(name, cur, entries)
            size = str(cur["busbw"][0])
            vals = [e["hosts"][name]["busbw_all"][size] for e in alike
                    if size in e["hosts"][name].get("busbw_all", {})]
            if vals:
                entry["baseline"] = {"busbw": statistics.median(vals), "bytes": int(size),
                                     "runs": len(vals)}
        out[name] = entry
    return {"runs": [{"run": e["file"], "generated_at": e["generated_at"]} for e in entries],
            "hosts": out}
