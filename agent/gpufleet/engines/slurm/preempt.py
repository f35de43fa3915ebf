"""Would a real job preempt a deep check at once? Read from Slurm's own configuration, every
line of it untrusted text: `scontrol show config`, `scontrol -o show partition` and, under
PreemptType=preempt/qos, `sacctmgr -P -n show qos format=Name,Preempt,PreemptMode,
PreemptExemptTime`.

A deep check that a real job has to wait for is worse than none, so each function returns None
only when every way a real job could reach the check's nodes preempts it by killing or
requeueing it (a suspended check keeps its GPUs' memory), and otherwise the missing setting
as a sentence.

What sacctmgr prints (Slurm 22.05, Debian bookworm's slurm-client 22.05.8-4+deb12u3, sacctmgr(1)
as installed, /usr/share/man/man1/sacctmgr.1.gz): `-P` "Output will be '|' delimited without
a '|' at the end", `-n` no header; QOS `Preempt` "Other QOS' this QOS can preempt", and "The
Priority of a QOS is NOT related to QOS preemption, only Preempt is used"; `PreemptMode`
overrides the cluster-wide PreemptMode for this QOS, "OFF", "" or "Cluster" meaning the
cluster's; `PreemptExemptTime` "a minimum run time for jobs of this QOS before they are
considered for preemption", taking precedence over the global one. The printed values
(SchedMD/slurm@0367b663965e22dd617b9d732ea028be5ed4e1c2:src/sacctmgr/qos_functions.c,
`sacctmgr_list_qos`): PreemptMode is "cluster" when the QOS sets none, else the mode in lower
case; Preempt is the QOS names, comma-separated. No slurmdbd runs in the test lab, so the QOS
path is tested on text written to that format (tests/fixtures/slurm-deepcheck-2026-12-01/
sacctmgr-show-qos.txt, which says so), not on a capture.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpufleet import redact

QOS_FORMAT = "format=Name,Preempt,PreemptMode,PreemptExemptTime"
_QOS_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_KILLS = ("REQUEUE", "CANCEL")


@dataclass(frozen=True)
class Qos:
    name: str
    preempts: frozenset[str]  # the QOS this one preempts
    mode: str  # "" when the QOS uses the cluster's PreemptMode
    exempt: str  # PreemptExemptTime as printed; "" when unset


def config_map(text: str) -> dict[str, str]:
    """`scontrol show config` → key -> value ("Key = value" lines)."""
    return {k.strip(): v.strip() for k, sep, v in
            (ln.partition("=") for ln in text.splitlines()) if sep}


def parse_qos(text: str) -> tuple[dict[str, Qos], list[str]]:
    """`sacctmgr -P -n show qos format=Name,Preempt,PreemptMode,PreemptExemptTime` → name ->
    Qos, and notes on lines left out (not four fields, or a name that is no QOS name)."""
    out: dict[str, Qos] = {}
    notes: list[str] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split("|")]
        names = parts[1].split(",") if len(parts) == 4 and parts[1] else []
        if (len(parts) != 4 or not _QOS_NAME.fullmatch(parts[0])
                or not all(_QOS_NAME.fullmatch(n) for n in names)):
            notes.append(f"sacctmgr: line {redact.text(line)[:80]!r} left out")
            continue
        mode = "" if parts[2].lower() in ("", "cluster", "off") else parts[2].upper()
        out[parts[0]] = Qos(parts[0], frozenset(names), mode, parts[3])
    return out, notes


def _fields(line: str) -> dict[str, str]:
    return dict(f.split("=", 1) for f in line.split() if "=" in f)


def _no_wait(exempt: str) -> bool:
    """PreemptExemptTime unset or zero ("00:00:00", "NONE", "0")."""
    return exempt.upper() in ("", "NONE", "N/A") or not any(c in "123456789" for c in exempt)


def by_partition(partitions_text: str, config: Mapping[str, str], partition: str,
                 neighbours: Sequence[str]) -> str | None:
    """preempt/partition_prio: the partition requeues or cancels, and every partition in
    `neighbours` (those sharing a node with it) has a higher PriorityTier."""
    parts = {f.get("PartitionName", ""): f for f in map(_fields, partitions_text.splitlines())}
    mine = parts.get(partition)
    if mine is None:
        return f"scontrol show partition lists no partition {partition!r}"
    mode = mine.get("PreemptMode") or config.get("PreemptMode", "OFF")
    if mode.split(",")[0].upper() not in _KILLS:
        return (f"partition {partition}: PreemptMode={redact.text(mode)}, not REQUEUE (or "
                f"CANCEL): a suspended check would keep its GPUs' memory")

    def tier(f: Mapping[str, str]) -> int:
        text = f.get("PriorityTier", "1")
        return int(text) if text.isdigit() else 1

    low = [n for n in neighbours if n in parts and tier(parts[n]) <= tier(mine)]
    if low:
        return (f"partition {partition}: PriorityTier={tier(mine)} is not below that of "
                f"{', '.join(redact.text(n) for n in sorted(low))}, which share(s) its nodes")
    return None


def by_qos(qos: Mapping[str, Qos], config: Mapping[str, str], scavenger: str | None,
           production: Sequence[str]) -> str | None:
    """preempt/qos: every QOS real jobs run under (`production`; empty: every other QOS
    sacctmgr lists) names `scavenger` in its Preempt list, and the scavenger QOS requeues or
    cancels with no PreemptExemptTime (its own, else the cluster's)."""
    if scavenger is None:
        return ("PreemptType is preempt/qos: say which QOS the deep checks run under "
                "(--qos NAME)")
    mine = qos.get(scavenger)
    if mine is None:
        return f"sacctmgr lists no QOS {scavenger!r}"
    mode = mine.mode or config.get("PreemptMode", "OFF")
    if mode.split(",")[0].upper() not in _KILLS:
        return (f"QOS {scavenger}: PreemptMode={redact.text(mode)}, not REQUEUE (or CANCEL): "
                f"a suspended check would keep its GPUs' memory")
    exempt = mine.exempt or config.get("PreemptExemptTime", "")
    if not _no_wait(exempt):
        return (f"QOS {scavenger}: PreemptExemptTime={redact.text(exempt)}: a real job would "
                f"wait that long for a deep check")
    others = list(production) or sorted(set(qos) - {scavenger})
    unknown = [n for n in others if n not in qos]
    if unknown:
        return f"sacctmgr lists no QOS {', '.join(map(repr, unknown))} (--production-qos)"
    if not others:
        return f"sacctmgr lists no QOS besides {scavenger}: nothing preempts the deep checks"
    late = [n for n in others if scavenger not in qos[n].preempts]
    if late:
        return (f"QOS {', '.join(late)} do(es) not list {scavenger} in Preempt=: their jobs "
                f"would wait for a deep check")
    return None


def preemptible(partitions_text: str, config_text: str, partition: str,
                neighbours: Sequence[str], *, qos_text: str | None = None,
                qos: str | None = None, production: Sequence[str] = ()) -> str | None:
    """None when a real job would preempt a deep check at once, under the PreemptType
    `config_text` (`scontrol show config`) names; else why not. `qos_text` is sacctmgr's
    output, needed only under preempt/qos."""
    config = config_map(config_text)
    kind = config.get("PreemptType", "preempt/none")
    if kind == "preempt/partition_prio":
        return by_partition(partitions_text, config, partition, neighbours)
    if kind == "preempt/qos":
        table, _ = parse_qos(qos_text or "")
        return by_qos(table, config, qos, production)
    return (f"PreemptType is {redact.text(kind)!r}, not preempt/partition_prio or preempt/qos: "
            f"a real job would wait for a deep check to end")
