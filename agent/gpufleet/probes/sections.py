"""Split the probe script's output into sections (pure)."""

from __future__ import annotations

import re
from dataclasses import dataclass

HEADER = re.compile(r"^==gpufleet== (\S+) rc=(\S+)$")
STDERR_MARK = "==gpufleet-stderr=="
HUNG_RCS = (124, 137)  # coreutils timeout: 124 after TERM, 137 after the -k KILL
NOT_FOUND_RC = 127


@dataclass(frozen=True)
class Section:
    name: str
    rc: int | None
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.rc == 0

    @property
    def hung(self) -> bool:
        return self.rc in HUNG_RCS

    @property
    def text(self) -> str:
        """stdout and stderr together (tools disagree about where errors go)."""
        return (self.stdout + "\n" + self.stderr).strip()


def split_sections(text: str) -> dict[str, Section]:
    """`==gpufleet== NAME rc=N` blocks -> {NAME: Section}; a repeated NAME keeps the last."""
    sections: dict[str, Section] = {}
    name: str | None = None
    rc: int | None = None
    out: list[str] = []
    err: list[str] = []
    in_err = False

    def close() -> None:
        if name is not None:
            sections[name] = Section(name, rc, "\n".join(out), "\n".join(err))

    for line in text.splitlines():
        match = HEADER.match(line)
        if match:
            close()
            name, rc_text = match.group(1), match.group(2)
            rc = int(rc_text) if rc_text.lstrip("-").isdigit() else None
            out, err, in_err = [], [], False
        elif name is None:
            continue  # login banners or shell noise before the first section
        elif line == STDERR_MARK:
            in_err = True
        else:
            (err if in_err else out).append(line)
    close()
    return sections
