"""What the renderers share: the report as a redacted JSON document, versions, summaries.

Every renderer works on the JSON document (the published contract), so a saved report renders
exactly like a live one, and redaction happens in one place.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from gpufleet.model import SEVERITY_ORDER, Finding, Report, to_jsonable

STATUSES = ("ok", "unreachable", "auth_failed", "hostkey_mismatch", "timeout", "busy", "error")
SEVERITIES = ("error", "warning", "info")

Doc = dict[str, Any]

# Secrets that tools like to echo (env dumps in smoke logs, URLs with credentials, keys).
_SECRET_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(-----END [A-Z ]*PRIVATE KEY-----|$)",
                re.DOTALL), "[REDACTED PRIVATE KEY]"),
    (re.compile(r"(?i)\b([A-Z0-9_]*(?:TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_KEY|"
                r"CREDENTIALS?)[A-Z0-9_]*)(\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|\S+)"), r"\1\2***"),
    (re.compile(r"(?i)\b(authorization:\s*(?:bearer|basic|token)?\s*)\S+"), r"\1***"),
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s:@]+:[^/\s@]+@"), r"\1***@"),
    (re.compile(r"\b(hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16})\b"), "***"),
)


# One cheap search first: almost no string holds a secret, and reports hold many strings.
_MAYBE_SECRET = re.compile(
    r"(?i)token|secret|passw|api_?key|access_key|credential|authorization|private key|"
    r"://[^/\s]*@|\bhf_|\bgh[pousr]_|\bAKIA"
)


_SECRET_KEY = re.compile(r"(?i)token|secret|passw|api_?key|access_key|credential")


def redact(text: str) -> str:
    if not _MAYBE_SECRET.search(text):
        return text
    for pattern, repl in _SECRET_PATTERNS:
        text = pattern.sub(repl, text)
    return text


def _clean(obj: Any) -> Any:
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, float) and not math.isfinite(obj):
        return None  # JSON has no NaN/Infinity
    if isinstance(obj, dict):
        # An environment captured as a mapping: the key names the secret, the value is it.
        return {k: "***" if isinstance(v, str) and v and _SECRET_KEY.search(k) else _clean(v)
                for k, v in obj.items()}
    if isinstance(obj, list):
        return [_clean(v) for v in obj]
    return obj


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
        "status": {s: status.get(s, 0) for s in STATUSES},
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
    cleaned: Doc = _clean(doc)
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
    bw = (hdoc.get("smoke") or {}).get("busbw_gbps") or {}
    if not bw:
        return None
    size = max(bw, key=int)
    return int(size), float(bw[size])


def fmt_bytes(n: int) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


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
