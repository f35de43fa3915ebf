"""NCCL configuration as facts: the files and environment NCCL reads, and which settings hurt.

NCCL reads its variables from the process environment, then from a user file (`$NCCL_CONF_FILE`
since NCCL 2.23, else `~/.nccl.conf`), then from `/etc/nccl.conf`; it sets a file's value only
where the variable is still unset, so the environment wins, then the user file, then the system
file (NCCL docs, "Environment Variables"; src/misc/param.cc initEnv). A file holds `NAME=VALUE`
lines and `#` comments, without quoting.

The shell snippet below prints what a process started over SSH would see; `parse()` is pure.
`DEGRADING` lists the settings known to cut bandwidth or hide hardware, each with its source;
rules/nccl.py reports them (GF701-GF704) and the smoke verdict names them when busbw fails.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gpufleet.model import NcclConfig, NcclSetting

SYSTEM_FILE = "/etc/nccl.conf"
MAX_FILE_BYTES = 65536
ENVIRONMENT = "environment"

# POSIX sh: the files NCCL would read and the NCCL_* variables of this (ssh) environment.
SHELL = r"""
nccl_lines() {
  while IFS= read -r line; do case $line in NCCL_*=*) printf '%s\n' "$line" ;; esac; done
}
for f in /etc/nccl.conf "${HOME:-/nonexistent}/.nccl.conf" ${NCCL_CONF_FILE:+"$NCCL_CONF_FILE"}; do
  if [ -r "$f" ] && [ -f "$f" ]; then echo "@@file $f"; head -c 65536 "$f" | nccl_lines
  elif [ -e "$f" ]; then echo "@@unreadable $f"; else echo "@@absent $f"; fi
done
echo "@@home ${HOME:-}"
echo "@@env"
env | nccl_lines
"""


def _pairs(text: str) -> list[tuple[str, str]]:
    out = []
    for line in text.splitlines():
        if not line or line.lstrip().startswith("#") or "=" not in line:
            continue
        name, value = line.split("=", 1)
        name = name.strip()
        if name.startswith("NCCL_") and name.replace("_", "").isalnum():
            out.append((name, value.strip()))
    return out


def parse(text: str) -> NcclConfig:
    """The output of SHELL → NcclConfig (settings in NCCL's order of precedence)."""
    files: dict[str, str] = {}
    content: dict[str, list[str]] = {}
    env: list[tuple[str, str]] = []
    home = ""
    cur: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("@@"):
            kind, _, arg = line[2:].partition(" ")
            cur = None
            if kind == "file":
                files[arg] = "read"
                cur = content.setdefault(arg, [])
            elif kind in ("absent", "unreadable"):
                files[arg] = kind
            elif kind == "home":
                home = arg
            elif kind == "env":
                cur = []
                content["\0env"] = cur
            continue
        if cur is not None:
            cur.append(line)
    env = _pairs("\n".join(content.pop("\0env", [])))
    conf_file = dict(env).get("NCCL_CONF_FILE")
    user = conf_file or (f"{home}/.nccl.conf" if home else None)
    order: list[tuple[str, list[tuple[str, str]]]] = [(ENVIRONMENT, env)]
    if user and user in content:
        order.append((user, _pairs("\n".join(content[user]))))
    if SYSTEM_FILE in content and user != SYSTEM_FILE:
        order.append((SYSTEM_FILE, _pairs("\n".join(content[SYSTEM_FILE]))))
    settings = tuple(NcclSetting(n, v, src) for src, pairs in order for n, v in pairs
                     if n != "NCCL_CONF_FILE" or src == ENVIRONMENT)
    effective: dict[str, NcclSetting] = {}
    for s in settings:
        effective.setdefault(s.name, s)
    return NcclConfig(settings=settings, effective=tuple(sorted(effective.values(),
                                                                key=lambda s: s.name)),
                      files=files)


# --------------------------------------------------------------------------- what hurts


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
