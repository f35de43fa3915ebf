"""The Ansible/AWX path: a playbook run's gpu_facts results → the gpufleet report.

`gpufleet.gpu.gpu_facts` (plugins/action/gpu_facts.py) runs the same probe on every node through
Ansible's own connection, forks and strategies, and returns the same facts JSON as
`gpufleet facts` (as `ansible_facts.gpufleet`). This module reads those results back — from the
callback plugin, from `ansible -t DIR` (one file per host), from ansible-runner's
`artifacts/*/job_events/` or from AWX's job events API — and judges them with the same rules.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gpufleet.inventory import node_spec
from gpufleet.model import Facts, HostResult, Report
from gpufleet.report.pipeline import judge
from gpufleet.smoke.levels import NO_SMOKE

FACTS_KEY = "gpufleet"  # ansible_facts.gpufleet
_EVENTS = {"runner_on_ok": "ok", "runner_on_failed": "error",
           "runner_on_unreachable": "unreachable"}


class AnsibleResultsError(Exception):
    """The file or directory holds no usable Ansible results; the message says why."""


# --------------------------------------------------------------------------- JSON → Facts


def from_jsonable(cls: Any, data: Any) -> Any:
    """The inverse of model.to_jsonable for the frozen dataclasses (lists → tuples, str keys →
    int keys where the field says so). Unknown keys are ignored; a wrong shape raises
    ValueError."""
    origin = typing.get_origin(cls)
    if cls is Any or cls is object:
        return data
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(cls)
        if data is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return from_jsonable(inner[0], data) if len(inner) == 1 else data
    if dataclasses.is_dataclass(cls) and isinstance(cls, type):
        if not isinstance(data, Mapping):
            raise ValueError(f"{cls.__name__}: expected an object, got {type(data).__name__}")
        hints = typing.get_type_hints(cls)
        kwargs = {f.name: from_jsonable(hints[f.name], data[f.name])
                  for f in dataclasses.fields(cls) if f.name in data}
        return cls(**kwargs)
    if origin is tuple:
        args = typing.get_args(cls)
        if not isinstance(data, list):
            raise ValueError(f"expected a list, got {type(data).__name__}")
        return tuple(from_jsonable(args[0], v) for v in data)
    if origin in (Mapping, dict, typing.Mapping):
        key_t, value_t = typing.get_args(cls)
        if not isinstance(data, Mapping):
            raise ValueError(f"expected an object, got {type(data).__name__}")
        return {(int(k) if key_t is int else k): from_jsonable(value_t, v)
                for k, v in data.items()}
    if cls is float and isinstance(data, int) and not isinstance(data, bool):
        return float(data)
    return data


def facts_from_json(data: Mapping[str, Any]) -> Facts:
    facts: Facts = from_jsonable(Facts, data)
    return facts


# --------------------------------------------------------------------------- reading results


def _host_result(host: str, status: str, res: Mapping[str, Any]) -> HostResult:
    facts_json = (res.get("ansible_facts") or {}).get(FACTS_KEY)
    if status == "ok" and isinstance(facts_json, Mapping):
        try:
            return HostResult(name=host, status="ok", facts=facts_from_json(facts_json))
        except (ValueError, TypeError) as exc:
            return HostResult(name=host, status="error",
                              error=f"{host}: gpu_facts result unreadable: {exc}")
    msg = str(res.get("msg") or res.get("stderr") or "no gpu_facts result").strip()
    if status == "unreachable":
        return HostResult(name=host, status="unreachable", error=f"{host}: {msg}")
    return HostResult(name=host, status="error", error=f"{host}: gpu_facts failed: {msg}")


def _from_events(events: Iterable[Mapping[str, Any]]) -> dict[str, HostResult]:
    """ansible-runner / AWX job events: the last gpu_facts outcome per host wins."""
    results: dict[str, HostResult] = {}
    for ev in events:
        status = _EVENTS.get(str(ev.get("event")))
        data = ev.get("event_data") or {}
        host, res = data.get("host"), data.get("res") or {}
        if status is None or not host or not isinstance(res, Mapping):
            continue
        if status == "ok" and FACTS_KEY not in (res.get("ansible_facts") or {}):
            continue  # some other task of the play
        if status != "ok" and "gpu_facts" not in str(data.get("task_action", "gpu_facts")):
            continue
        results[str(host)] = _host_result(str(host), status, res)
    return results


def results_from_mapping(doc: Mapping[str, Any]) -> dict[str, HostResult]:
    """{host: result} (callback plugin, `ansible -t` files, or the verify playbook's dump)."""
    out: dict[str, HostResult] = {}
    for host, res in doc.items():
        if res is None:
            out[host] = HostResult(name=host, status="unreachable",
                                   error=f"{host}: no gpu_facts result (unreachable or failed "
                                   "in Ansible; see the play recap)")
        elif isinstance(res, Mapping):
            if res.get("unreachable"):
                status = "unreachable"
            elif res.get("failed"):
                status = "error"
            else:
                status = "ok"
            out[host] = _host_result(host, status, res)
    return out


def load_ansible_results(path: Path) -> dict[str, HostResult]:
    """One HostResult per host from any of the supported result shapes at `path`."""
    try:
        if path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.is_file())
            docs = [(p, json.loads(p.read_text(encoding="utf-8"))) for p in files]
            if docs and all(isinstance(d, Mapping) and "event" in d for _, d in docs):
                results = _from_events(d for _, d in docs)
            else:  # ansible -t DIR: one file per host, named by the host
                results = results_from_mapping({p.name: d for p, d in docs})
        else:
            doc = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(doc, Mapping) and isinstance(doc.get("results"), list):
                results = _from_events(doc["results"])  # an AWX job_events API page
            elif isinstance(doc, list):
                results = _from_events(doc)
            elif isinstance(doc, Mapping):
                results = results_from_mapping(doc.get("hosts", doc))
            else:
                results = {}
    except OSError as exc:
        raise AnsibleResultsError(f"cannot read {path}: {exc.strerror}") from exc
    except ValueError as exc:
        raise AnsibleResultsError(f"{path}: not JSON: {exc}") from exc
    if not results:
        raise AnsibleResultsError(f"{path}: no gpufleet.gpu.gpu_facts results in it")
    return dict(sorted(results.items()))


def expectations(path: Path) -> dict[str, dict[str, Any]]:
    """host -> the desired-state variables gpu_facts returned with its facts (gpufleet_expect)."""
    found: dict[str, dict[str, Any]] = {}

    def take(host: Any, res: Any) -> None:
        if isinstance(res, Mapping) and isinstance(res.get("gpufleet_expect"), Mapping):
            found[str(host)] = dict(res["gpufleet_expect"])

    for name, doc in _documents(path):
        if isinstance(doc, Mapping) and "event" in doc:
            data = doc.get("event_data") or {}
            take(data.get("host"), data.get("res"))
        elif name is not None:  # ansible -t DIR: one file per host, named by the host
            take(name, doc)
        elif isinstance(doc, Mapping):
            for host, res in doc.get("hosts", doc).items():
                take(host, res)
    return found


def _documents(path: Path) -> list[tuple[str | None, Any]]:
    """(file name in a directory, else None; its JSON) for each document at path."""
    try:
        if path.is_dir():
            return [(p.name, json.loads(p.read_text(encoding="utf-8")))
                    for p in sorted(path.rglob("*")) if p.is_file()]
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    if isinstance(doc, Mapping) and isinstance(doc.get("results"), list):
        return [(None, d) for d in doc["results"]]
    return [(None, d) for d in doc] if isinstance(doc, list) else [(None, doc)]


def report_from_results(results: Mapping[str, HostResult], *, generated_at: str,
                        expect: Mapping[str, Mapping[str, Any]] | None = None) -> Report:
    """The gpufleet report (findings and summary) over results gathered by Ansible; `expect`
    gives each host's desired-state variables (gpu_facts returns them as gpufleet_expect)."""

    specs = {h: node_spec(h, (expect or {}).get(h, {})) for h in results}
    report = Report(hosts=dict(results), specs=specs, generated_at=generated_at,
                    level=NO_SMOKE)
    return judge(report)
