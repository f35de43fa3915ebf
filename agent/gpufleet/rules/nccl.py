"""GF701-GF704: NCCL settings that cut bandwidth or hide hardware (facts: probes/nccl.py).

Read at `--level facts` from /etc/nccl.conf, the user file (NCCL_CONF_FILE or ~/.nccl.conf)
and the ssh user's environment; only the setting NCCL would actually use is judged.
`DEGRADING` lists the settings known to cut bandwidth or hide hardware, each with its source;
the smoke verdict and rules/links.py name them (`suspects`) when busbw fails.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from gpufleet.model import Finding, NcclConfig, NcclSetting
from gpufleet.probes.nccl import ENVIRONMENT
from gpufleet.rules.base import Ctx, finding

# The ids this module emits (tests/unit/test_rules_plumbing.py holds it to that).
RULES: tuple[str, ...] = ("GF701", "GF702", "GF703", "GF704")


def _on(v: str) -> bool:
    return v.strip().lower() not in ("", "0", "false", "no", "off")


def _level_loc(v: str) -> bool:
    return v.strip().upper() in ("LOC", "0")


@dataclass(frozen=True)
class Degrading:
    name: str
    rule: str  # GF701 transport off, GF702 multinode network, GF703 tuning cap
    test: Callable[[str], bool]
    why: str
    source: str


_DOCS = "NCCL docs, Environment Variables"
DEGRADING: tuple[Degrading, ...] = (
    Degrading("NCCL_P2P_DISABLE", "GF701", _on,
              "turns off the P2P transport (NVLink/PCIe between GPUs); traffic goes through "
              "host memory: 26.8 GB/s instead of 267.8 at 64 MiB on 2xH200 (REFERENCE.md)",
              _DOCS + " (NCCL_P2P_DISABLE)"),
    Degrading("NCCL_P2P_LEVEL", "GF701", _level_loc,
              "LOC means never use P2P, as NCCL_P2P_DISABLE=1", _DOCS + " (NCCL_P2P_LEVEL)"),
    Degrading("NCCL_SHM_DISABLE", "GF701", _on,
              "turns off the shared-memory transport: GPUs without P2P fall back to the network",
              _DOCS + " (NCCL_SHM_DISABLE)"),
    Degrading("NCCL_IB_DISABLE", "GF702", _on,
              "turns off InfiniBand/RoCE: NCCL falls back to IP sockets between hosts",
              _DOCS + " (NCCL_IB_DISABLE)"),
    Degrading("NCCL_NET", "GF702", lambda v: v.strip().lower() == "socket",
              "forces the socket transport between hosts", _DOCS + " (NCCL_NET)"),
    Degrading("NCCL_NET_GDR_LEVEL", "GF702", _level_loc,
              "LOC turns off GPUDirect RDMA: network traffic is staged in host memory",
              _DOCS + " (NCCL_NET_GDR_LEVEL)"),
    Degrading("NCCL_PXN_DISABLE", "GF702", _on,
              "turns off PXN (sending through an NVLink peer's NIC)",
              _DOCS + " (NCCL_PXN_DISABLE)"),
    Degrading("NCCL_ALGO", "GF703", lambda v: bool(v.strip()),
              "forces the algorithm; the docs list it under Debugging: not for production",
              _DOCS + " (Debugging: NCCL_ALGO)"),
    Degrading("NCCL_PROTO", "GF703", lambda v: bool(v.strip()),
              "forces the protocol; the docs list it under Debugging: not for production",
              _DOCS + " (Debugging: NCCL_PROTO)"),
    Degrading("NCCL_MAX_NCHANNELS", "GF703", lambda v: v.strip().isdigit(),
              "caps the channels (parallel rings/trees) and with them the bandwidth",
              _DOCS + " (NCCL_MAX_NCHANNELS, formerly NCCL_MAX_NRINGS)"),
    Degrading("NCCL_MAX_CTAS", "GF703", lambda v: v.strip().isdigit(),
              "caps the CTAs (channels) NCCL may use", _DOCS + " (NCCL_MAX_CTAS)"),
    Degrading("NCCL_BUFFSIZE", "GF703",
              lambda v: v.strip().isdigit() and int(v) < 4 * 1024 * 1024,
              "below the 4 MiB default: smaller pipelined chunks, lower bandwidth",
              _DOCS + " (NCCL_BUFFSIZE)"),
)
_BY_NAME = {d.name: d for d in DEGRADING}


def degrading(config: NcclConfig | None) -> Iterable[tuple[NcclSetting, Degrading]]:
    """Effective settings that cut performance, with their table row."""
    if config is None:
        return []
    return [(s, _BY_NAME[s.name]) for s in config.effective
            if s.name in _BY_NAME and _BY_NAME[s.name].test(s.value)]


def suspects(config: NcclConfig | None, *, multinode: bool) -> list[tuple[NcclSetting, str]]:
    """What a busbw failure should name first: transport and tuning settings (network ones
    only in a multinode world)."""
    return [(s, d.why) for s, d in degrading(config) if multinode or d.rule != "GF702"]


def _multinode(ctx: Ctx, host: str) -> bool:
    """In a named inventory group with another host: it may run multinode jobs."""
    groups = set(ctx.groups(host)) - {"all"}
    return any(set(s.groups) & groups for n, s in ctx.report.specs.items() if n != host)


def check(ctx: Ctx) -> Iterator[Finding]:
    for h, f in ctx.with_facts():
        conf = f.nccl_config
        if conf is None or not f.gpus:
            continue
        multinode = _multinode(ctx, h.name)
        for s, d in degrading(conf):
            if d.rule == "GF702" and not multinode:
                continue
            where = "the ssh user's environment" if s.source == ENVIRONMENT else s.source
            fix = (f"unset {s.name} where the environment is set (~/.ssh/environment, "
                   "/etc/environment, sshd SetEnv)" if s.source == ENVIRONMENT
                   else f"remove the {s.name} line from {s.source}")
            yield finding(d.rule, [h.name], f"{h.name}: {s.name}={s.value} in {where}: {d.why}",
                          {"name": s.name, "value": s.value, "source": s.source,
                           "why": d.why, "reference": d.source, "subject": s.name},
                          fix=fix)
        conf_file = next((s.value for s in conf.effective if s.name == "NCCL_CONF_FILE"), None)
        if conf_file and conf.files.get(conf_file) in ("absent", "unreadable"):
            yield finding("GF704", [h.name],
                          f"{h.name}: NCCL_CONF_FILE={conf_file} is {conf.files[conf_file]}",
                          {"path": conf_file, "state": conf.files[conf_file]})
