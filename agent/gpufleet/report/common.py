"""What the renderers share: the report as a redacted JSON document, versions, summaries.

Every renderer works on the JSON document (the published contract), so a saved report renders
exactly like a live one, and redaction happens in one place.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from gpufleet.model import HOST_STATUSES, SEVERITIES, SEVERITY_ORDER, Finding, Report, to_jsonable
from gpufleet.redact import clean, number

Doc = dict[str, Any]

def summarize(report: Report) -> dict[str, Any]:
    """Counts by host status and finding severity (Report.summary)."""
    return summarize_doc(to_jsonable(report))


def summarize_doc(doc: Mapping[str, Any]) -> dict[str, Any]:
    hosts = doc.get("hosts", {})
    findings = doc.get("findings", [])
    status = Counter(h.get("status") for h in hosts.values())
    sev = Counter(f.get("severity") for f in findings)
    worst_of: dict[str, str] = {}
    for f in findings:
        for h in f.get("hosts", []):
            if SEVERITY_ORDER[f["severity"]] > SEVERITY_ORDER.get(worst_of.get(h, ""), -1):
                worst_of[h] = f["severity"]
    worst = max(sev, key=lambda s: SEVERITY_ORDER[s]) if sev else None
    return {
        "hosts": len(hosts),
        "status": {s: status.get(s, 0) for s in HOST_STATUSES},
        "findings": {s: sev.get(s, 0) for s in SEVERITIES},
        "hosts_with": {s: sum(1 for w in worst_of.values() if w == s) for s in SEVERITIES},
        "worst": worst,
        "healthy": status.get("ok", 0) == len(hosts) and not (sev["error"] or sev["warning"]),
    }


def document(report: Report) -> Doc:
    """The report as its JSON document: summary filled in, secrets redacted."""
    raw: Doc = to_jsonable(report)
    if not raw.get("summary"):
        raw["summary"] = summarize_doc(raw)
    order = ("schema", "generated_at", "level", "hosts", "findings", "summary")
    doc = {k: raw[k] for k in order} | {k: v for k, v in raw.items() if k not in order}
    cleaned: Doc = clean(doc)
    return cleaned


def exit_code(findings: Sequence[Finding], fail_on: str) -> int:
    """1 when a finding is at or above `fail_on` ("error", "warning" or "info"), else 0."""
    if fail_on not in SEVERITY_ORDER:
        raise ValueError(f"--fail-on must be one of error, warning, info; got {fail_on!r}")
    floor = SEVERITY_ORDER[fail_on]
    return int(any(SEVERITY_ORDER[f.severity] >= floor for f in findings))


# --------------------------------------------------------------------------- per host views


def _first_rank(hdoc: Mapping[str, Any], key: str) -> str | None:
    smoke = hdoc.get("smoke") or {}
    for r in smoke.get("ranks") or []:
        if r.get(key) and r.get("host") in (None, hdoc.get("name")):
            return str(r[key])
    return None


def gpu_summary(facts: Mapping[str, Any]) -> str | None:
    gpus = facts.get("gpus") or []
    if not gpus:
        return None
    names = Counter(str(g.get("name") or "?") for g in gpus)
    return ", ".join(f"{n}x {name}" for name, n in sorted(names.items()))


def versions(hdoc: Mapping[str, Any]) -> dict[str, str | None]:
    """The versions a host runs, flat, for tables, info metrics and diffs."""
    f = hdoc.get("facts") or {}
    os_ = f.get("os") or {}
    drv = f.get("driver") or {}
    docker = f.get("docker") or {}
    image = f.get("image") or {}
    vbios = sorted({str(g["vbios"]) for g in f.get("gpus") or [] if g.get("vbios")})
    digests = sorted(str(d).rsplit("@", 1)[-1] for d in image.get("digests") or [])
    return {
        "os": os_.get("pretty_name") or _join(os_.get("id"), os_.get("version_id")),
        "kernel": os_.get("kernel"),
        "driver": drv.get("version"),
        "kernel_module": drv.get("kernel_module_version"),
        "driver_cuda": drv.get("cuda_version"),
        "gpus": gpu_summary(f),
        "vbios": ",".join(vbios) or None,
        "toolkit": f.get("toolkit_version"),
        "docker": docker.get("server_version"),
        "containerd": f.get("containerd_version"),
        "image": image.get("ref"),
        "image_digest": ",".join(digests) or None,
        "nccl_system": f.get("nccl_system_version"),
        "torch": _first_rank(hdoc, "torch"),
        "torch_cuda": _first_rank(hdoc, "cuda"),
        "torch_nccl": _first_rank(hdoc, "nccl"),
    }


def _join(*parts: Any) -> str | None:
    got = [str(p) for p in parts if p]
    return " ".join(got) or None


def host_worst(doc: Mapping[str, Any]) -> dict[str, str | None]:
    worst: dict[str, str | None] = dict.fromkeys(doc.get("hosts", {}))
    for f in doc.get("findings", []):
        for h in f.get("hosts", []):
            cur = worst.get(h)
            if cur is None or SEVERITY_ORDER[f["severity"]] > SEVERITY_ORDER[cur]:
                worst[h] = f["severity"]
    return worst


def busbw_largest(hdoc: Mapping[str, Any]) -> tuple[int, float] | None:
    raw = (hdoc.get("smoke") or {}).get("busbw_gbps") or {}
    numbers = {int(k): number(v) for k, v in raw.items() if str(k).isdigit()}
    bw = {k: v for k, v in numbers.items() if v is not None}
    if not bw:
        return None
    size = max(bw)
    return size, bw[size]


def summary_line(doc: Mapping[str, Any]) -> str:
    s = doc["summary"]
    st = ", ".join(f"{n} {k}" for k, n in s["status"].items() if n and k != "ok")
    fs = s["findings"]
    verdict = "HEALTHY" if s["healthy"] else "UNHEALTHY"
    return (
        f"gpufleet: {verdict} — {s['hosts']} host(s), {s['status']['ok']} ok"
        + (f" ({st})" if st else "")
        + f"; findings: {fs['error']} error, {fs['warning']} warning, {fs['info']} info"
    )


def family_of(rule: str) -> str:
    return rule[:3] + "xx"
