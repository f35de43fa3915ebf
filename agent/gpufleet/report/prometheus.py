"""Prometheus text format for node_exporter's textfile collector (written by prometheus_client).

Write it to a temp file and rename into the textfile directory so the scrape never sees half.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any, get_args

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from gpufleet.model import SEVERITIES, LifecycleState
from gpufleet.redact import number
from gpufleet.report.common import versions


class _ReportCollector(Collector):
    def __init__(self, doc: Mapping[str, Any]) -> None:
        self.doc = doc

    def collect(self) -> Iterator[Metric]:
        doc = self.doc
        hosts = sorted(doc["hosts"])
        up = GaugeMetricFamily("gpufleet_host_up", "1 when the host could be checked",
                               labels=["host", "status"])
        gpus = GaugeMetricFamily("gpufleet_gpus", "GPUs nvidia-smi lists", labels=["host"])
        findings = GaugeMetricFamily("gpufleet_findings", "findings naming the host, by severity",
                                     labels=["host", "severity"])
        rules = GaugeMetricFamily("gpufleet_finding", "findings naming the host, by rule",
                                  labels=["host", "rule", "severity"])
        smoke = GaugeMetricFamily("gpufleet_smoke_passed", "1 when the smoke test passed",
                                  labels=["host", "status"])
        busbw = GaugeMetricFamily("gpufleet_busbw_gbps", "all-reduce bus bandwidth (GB/s)",
                                  labels=["host", "bytes"])
        tflops = GaugeMetricFamily("gpufleet_matmul_tflops", "matmul TFLOP/s per GPU",
                                   labels=["host", "gpu"])
        info = InfoMetricFamily("gpufleet_versions", "versions the host runs",
                                labels=["host"])
        # A state set (one sample per state, 1 for the current one), so a query for
        # state="rma" is 0, not absent, for a node in service.
        life = GaugeMetricFamily("gpufleet_lifecycle_state",
                                 "the node's Slurm break-fix state (1: the current one)",
                                 labels=["host", "state"])
        lifecycle = _lifecycle(doc["findings"])
        for name in hosts:
            h = doc["hosts"][name]
            up.add_metric([name, h["status"]], 1.0 if h["status"] == "ok" else 0.0)
            facts = h.get("facts")
            if facts is not None:
                gpus.add_metric([name], float(len(facts.get("gpus") or [])))
            mine = [f for f in doc["findings"] if name in f["hosts"]]
            by_sev = Counter(f["severity"] for f in mine)
            for sev in SEVERITIES:
                findings.add_metric([name, sev], float(by_sev.get(sev, 0)))
            for (rule, sev), n in sorted(Counter((f["rule"], f["severity"]) for f in mine).items()):
                rules.add_metric([name, rule, sev], float(n))
            s = h.get("smoke")
            if s is not None:
                smoke.add_metric([name, s["status"]], 1.0 if s["status"] == "pass" else 0.0)
                for size, bw in sorted(s.get("busbw_gbps", {}).items(), key=lambda kv: int(kv[0])):
                    if (value := number(bw)) is not None:  # non-finite: missing, not a sample
                        busbw.add_metric([name, str(size)], value)
                for gpu, t in sorted(s.get("matmul_tflops", {}).items(), key=lambda kv: int(kv[0])):
                    if (value := number(t)) is not None:
                        tflops.add_metric([name, str(gpu)], value)
            if facts is not None:
                info.add_metric([name], {k: v or "" for k, v in versions(h).items()})
            if (now := lifecycle.get(name)) is not None:
                for state in get_args(LifecycleState):
                    life.add_metric([name, state], 1.0 if state == now else 0.0)
        yield from (up, gpus, findings, rules, smoke, busbw, tflops, info, life)
        generated = doc.get("generated_at")
        if generated:
            ts = GaugeMetricFamily("gpufleet_report_timestamp_seconds",
                                   "when the report was generated (Unix time)")
            ts.add_metric([], datetime.fromisoformat(generated.replace("Z", "+00:00")).timestamp())
            yield ts


def _lifecycle(findings: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Each host's lifecycle state after this run: the `lifecycle.to` of the Slurm step findings
    (GF90x, engines/slurm/drain.py plan_evidence); hosts without one are not Slurm nodes here."""
    out: dict[str, str] = {}
    for f in findings:
        step = (f.get("evidence") or {}).get("lifecycle")
        if isinstance(step, Mapping) and step.get("to") in get_args(LifecycleState):
            for host in f["hosts"]:
                out[host] = str(step["to"])
    return out


def render(doc: Mapping[str, Any], *, color: bool = False, width: int = 120) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_ReportCollector(doc))
    return generate_latest(registry).decode("utf-8")
