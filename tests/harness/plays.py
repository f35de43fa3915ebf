"""Real ansible-playbook runs: the run, its log file and the PLAY RECAP, parsed."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

RECAP = re.compile(
    r"^(?P<host>\S+)\s+:\s+ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+unreachable=(?P<unreachable>\d+)"
    r"\s+failed=(?P<failed>\d+)\s+skipped=(?P<skipped>\d+)\s+rescued=(?P<rescued>\d+)\s+ignored=(?P<ignored>\d+)",
    re.M,
)


@dataclass(frozen=True)
class PlayResult:
    rc: int
    output: str
    recap: dict[str, dict[str, int]]
    log: Path
    default_host: str  # the lab's usual target: host() without a name

    @property
    def flat(self) -> str:
        """The output with whitespace collapsed: the YAML callback wraps long messages."""
        return " ".join(self.output.split())

    def tail(self, n: int = 6000) -> str:
        return f"(full log: {self.log})\n{self.output[-n:]}"

    def host(self, name: str | None = None) -> dict[str, int]:
        name = name or self.default_host
        assert name in self.recap, f"no recap line for {name}; rc={self.rc}\n{self.tail()}"
        return self.recap[name]


def run_play(argv: Sequence[str], *, logdir: Path, name: str, default_host: str,
             cwd: Path, env: Mapping[str, str], timeout: float,
             extra_vars: Mapping[str, object] | None = None) -> PlayResult:
    """Run ansible-playbook `argv` (extra_vars through a file in `logdir`), log it to
    `logdir/NAME.log` and parse its recap."""
    argv = list(argv)
    if extra_vars:
        ev = logdir / f"{name}.vars.json"
        ev.write_text(json.dumps(extra_vars))
        ev.chmod(0o600)  # workspace vars carry tokens
        argv += ["-e", f"@{ev}"]
    proc = subprocess.run(argv, cwd=cwd, env=dict(env), text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=timeout, check=False)
    log = logdir / f"{name}.log"
    log.write_text(f"$ {' '.join(argv)}\n{proc.stdout}")
    recap = {m["host"]: {k: int(v) for k, v in m.groupdict().items() if k != "host"}
             for m in RECAP.finditer(proc.stdout)}
    return PlayResult(proc.returncode, proc.stdout, recap, log, default_host)
