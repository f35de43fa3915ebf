"""The Ansible/AWX path: a playbook run's gpu_facts results → the gpufleet report.

`gpufleet.gpu.gpu_facts` (plugins/action/gpu_facts.py) runs the same probe on every node through
Ansible's own connection, forks and strategies, and returns the same facts JSON as
`gpufleet facts` (as `ansible_facts.gpufleet`). This module reads those results back — from the
callback plugin, from `ansible -t DIR` (one file per host), from ansible-runner's
`artifacts/*/job_events/` or from AWX's job events API — and judges them with the same rules.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gpufleet.files import FileError, read_json
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
    if cls in _SCALARS:
        # The JSON came from a results file anyone may have edited: a number where a version
        # string belongs is a refused field, not a TypeError deep in a rule (issue 22 F15).
        if not isinstance(data, _SCALARS[cls]) or (cls is not bool and isinstance(data, bool)):
            raise ValueError(f"expected {cls.__name__}, got {type(data).__name__}")
        return float(data) if cls is float and isinstance(data, int) else data
    return data


_SCALARS: dict[Any, tuple[type, ...]] = {str: (str,), int: (int,), float: (int, float),
                                         bool: (bool,)}


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


def _is_gpu_facts(action: object) -> bool:
    return str(action).endswith("gpu_facts")  # gpu_facts, gpufleet.gpu.gpu_facts


def _from_events(events: Iterable[Mapping[str, Any]]) -> dict[str, tuple[str, Mapping[str, Any]]]:
    """ansible-runner / AWX job events: per host its last gpu_facts outcome, in the order the
    run emitted them (`counter`; file names sort `10-` before `9-`, issue 22 F14). Only the
    gpu_facts task's own events count: a later task's result is the host's output and must not
    stand in for the facts or erase the expectations (issue 22 F22)."""
    numbered = [(ev.get("counter"), i, ev) for i, ev in enumerate(events)]
    numbered.sort(key=lambda t: (t[0] if isinstance(t[0], int) else t[1], t[1]))
    results: dict[str, tuple[str, Mapping[str, Any]]] = {}
    for _, _, ev in numbered:
        status = _EVENTS.get(str(ev.get("event")))
        data = ev.get("event_data") or {}
        if status is None or not isinstance(data, Mapping):
            continue
        host, res = data.get("host"), data.get("res") or {}
        if not isinstance(host, str) or not host or not isinstance(res, Mapping):
            continue
        if not _is_gpu_facts(data.get("task_action", "gpu_facts")):
            continue  # some other task of the play
        if status == "ok" and FACTS_KEY not in (res.get("ansible_facts") or {}):
            continue
        results[host] = (status, res)
    return results


def _from_mapping(doc: Mapping[str, Any]) -> dict[str, tuple[str, Mapping[str, Any]]]:
    """{host: result} (callback plugin, `ansible -t` files, or the verify playbook's dump)."""
    out: dict[str, tuple[str, Mapping[str, Any]]] = {}
    for host, res in doc.items():
        if res is None:
            out[str(host)] = ("unreachable", {"msg": "no gpu_facts result (unreachable or "
                                              "failed in Ansible; see the play recap)"})
        elif isinstance(res, Mapping):
            status = ("unreachable" if res.get("unreachable") else
                      "error" if res.get("failed") else "ok")
            out[str(host)] = (status, res)
        else:  # still that host's line in the report: one bad result hides no host
            out[str(host)] = ("error", {"msg": f"result unreadable: {type(res).__name__} where "
                                               "an object is expected"})
    return out


def _host_results(chosen: Mapping[str, tuple[str, Mapping[str, Any]]]) -> dict[str, HostResult]:
    return {h: _host_result(h, status, res) for h, (status, res) in chosen.items()}


def results_from_mapping(doc: Mapping[str, Any]) -> dict[str, HostResult]:
    """{host: result} (callback plugin, `ansible -t` files, or the verify playbook's dump)."""
    return _host_results(_from_mapping(doc))


def _read(path: Path) -> Any:
    try:
        return read_json(path, "Ansible results JSON")
    except FileError as exc:
        raise AnsibleResultsError(str(exc)) from exc


def _judged(path: Path) -> dict[str, tuple[str, Mapping[str, Any]]]:
    """Per host the one gpu_facts result that is judged, from any supported shape at `path`;
    its facts and its expectations come from that one result (issue 22 F4, F22)."""
    try:
        is_dir = path.is_dir()
        files = sorted(p for p in path.rglob("*") if p.is_file()) if is_dir else []
    except OSError as exc:
        raise AnsibleResultsError(f"cannot read {path}: {exc.strerror}") from exc
    if is_dir:
        docs: dict[Path, Any] = {}
        bad: dict[Path, str] = {}
        for p in files:
            try:
                docs[p] = _read(p)
            except AnsibleResultsError as exc:
                bad[p] = str(exc)
        if any(isinstance(d, Mapping) and "event" in d for d in docs.values()):
            if bad:  # an event file names no host of its own: the run is not judged half-read
                raise AnsibleResultsError(next(iter(bad.values())))
            return _from_events(d for d in docs.values() if isinstance(d, Mapping))
        # ansible -t DIR: one file per host, named by the host; an unreadable file is that
        # host's error
        chosen = _from_mapping({p.name: d for p, d in docs.items()})
        chosen.update({p.name: ("error", {"msg": why}) for p, why in bad.items()})
        return chosen
    doc = _read(path)
    if isinstance(doc, Mapping) and isinstance(doc.get("results"), list):
        return _from_events(e for e in doc["results"] if isinstance(e, Mapping))  # AWX page
    if isinstance(doc, list):
        return _from_events(e for e in doc if isinstance(e, Mapping))
    if isinstance(doc, Mapping):
        hosts = doc.get("hosts", doc)
        return _from_mapping(hosts) if isinstance(hosts, Mapping) else {}
    return {}


def load_ansible_results(path: Path) -> dict[str, HostResult]:
    """One HostResult per host from any of the supported result shapes at `path`."""
    results = _host_results(_judged(path))
    if not results:
        raise AnsibleResultsError(f"{path}: no gpufleet.gpu.gpu_facts results in it")
    return dict(sorted(results.items()))


def expectations(path: Path) -> dict[str, dict[str, Any]]:
    """host -> the desired-state variables gpu_facts returned with the facts that are judged
    (gpufleet_expect of that same result)."""
    return {host: dict(res["gpufleet_expect"]) for host, (_, res) in _judged(path).items()
            if isinstance(res.get("gpufleet_expect"), Mapping)}


def report_from_results(results: Mapping[str, HostResult], *, generated_at: str,
                        expect: Mapping[str, Mapping[str, Any]] | None = None) -> Report:
    """The gpufleet report (findings and summary) over results gathered by Ansible; `expect`
    gives each host's desired-state variables (gpu_facts returns them as gpufleet_expect)."""

    specs = {h: node_spec(h, (expect or {}).get(h, {})) for h in results}
    report = Report(hosts=dict(results), specs=specs, generated_at=generated_at,
                    level=NO_SMOKE)
    return judge(report)
