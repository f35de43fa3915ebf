"""NCCL's configuration as facts: the files and environment NCCL reads (probe side).

NCCL reads its variables from the process environment, then from a user file (`$NCCL_CONF_FILE`
since NCCL 2.23, else `~/.nccl.conf`), then from `/etc/nccl.conf`; it sets a file's value only
where the variable is still unset, so the environment wins, then the user file, then the system
file (NCCL docs, "Environment Variables"; src/misc/param.cc initEnv). A file holds `NAME=VALUE`
lines and `#` comments, without quoting.

`SHELL` prints what a process started over SSH would see; `parse()` is pure. Which settings
hurt is rules/nccl.py's table (GF701-GF703).
"""

from __future__ import annotations

from typing import Any

from gpufleet.model import NcclConfig, NcclSetting
from gpufleet.probes.sections import Family, ProbeOutput

SYSTEM_FILE = "/etc/nccl.conf"
MAX_FILE_BYTES = 65536
ENVIRONMENT = "environment"

# POSIX sh: the files NCCL would read and the NCCL_* variables of this (ssh) environment.
# probe.sh receives these lines at ship time (probe_script); the smoke preflight embeds them too.
# Its records stay `@@KIND ARG` inside the one `nccl_conf` section rather than becoming
# sections: ARG is a host path (NCCL_CONF_FILE may hold spaces), a section name is one word,
# and a file may be listed twice.
SHELL = r"""
nccl_lines() {
  while IFS= read -r line; do case $line in NCCL_*=*) printf '%s\n' "$line" ;; esac; done
}
for f in /etc/nccl.conf "${HOME:-/nonexistent}/.nccl.conf" ${NCCL_CONF_FILE:+"$NCCL_CONF_FILE"}; do
  if [ -r "$f" ] && [ -f "$f" ]; then echo "@@file $f"; head -c %MAX_FILE_BYTES% "$f" | nccl_lines
  elif [ -e "$f" ]; then echo "@@unreadable $f"; else echo "@@absent $f"; fi
done
echo "@@home ${HOME:-}"
echo "@@env"
env | nccl_lines
""".replace("%MAX_FILE_BYTES%", str(MAX_FILE_BYTES))


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


def build_nccl_config(out: ProbeOutput) -> dict[str, Any]:
    text = out.ok("nccl_conf")
    return {"nccl_config": None if text is None else out.safe("nccl_config", None, parse, text)}


NCCL_CONFIG = Family("nccl_config", sections=("nccl_conf",), errors=("nccl_config",),
                     fields=("nccl_config",), build=build_nccl_config)
