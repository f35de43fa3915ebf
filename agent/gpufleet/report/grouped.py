"""Findings for people: identical findings across hosts shown once (table, Markdown, HTML).

Two findings are identical when they have the same rule and severity, name one host each, and
their message and remediation are the same once that host's name is taken out. They are shown as
one row, `GF101 x200 gpu[001-200]: …`, the host list compressed as Slurm writes node lists
(python-hostlist). JSON, JUnit and Prometheus keep one finding per host: machines read those.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import hostlist  # type: ignore[import-untyped]

HOST = "{host}"  # where the host's name stood in a grouped message


def _without(text: str, host: str) -> str:
    return re.sub(rf"(?<![\w.-]){re.escape(host)}(?![\w-])", HOST, text)


def group(findings: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each finding as a dict, with identical ones merged: `count` (1 when alone), `hosts` all
    of them, `host_list` their compressed list; a merged message says `{host}` where the host's
    name stood, a merged remediation names every host (comma-joined, as `-l` takes them).
    Order: where each group's first finding stood."""
    out: list[dict[str, Any]] = []
    at: dict[tuple[str, str, str, str], int] = {}
    for f in findings:
        hosts = list(f.get("hosts") or ())
        row = {**f, "count": 1, "hosts": hosts, "host_list": ", ".join(hosts)}
        if len(hosts) != 1:
            out.append(row)
            continue
        key = (str(f["rule"]), str(f["severity"]), _without(str(f["message"]), hosts[0]),
               _without(str(f.get("remediation", "")), hosts[0]))
        if key not in at:
            at[key] = len(out)
            out.append(row)
            continue
        first = out[at[key]]
        first["hosts"] = [*first["hosts"], hosts[0]]
        first["count"] += 1
    for row in out:
        if row["count"] > 1:
            host0 = row["hosts"][0]
            row["message"] = _without(str(row["message"]), host0)
            # The fix runs as printed: an Ansible limit takes the comma-joined hosts.
            row["remediation"] = _without(str(row.get("remediation", "")), host0).replace(
                HOST, ",".join(row["hosts"]))
            row["host_list"] = hostlist.collect_hostlist(row["hosts"])
    return out

