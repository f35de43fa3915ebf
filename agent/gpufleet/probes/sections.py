"""Split the probe script's output into sections (pure)."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Anchored on "\n" rather than (?m)^ so the regex engine can jump between literal prefixes.
HEADER = re.compile(r"\n==gpufleet== (\S+) rc=(\S+)(?=\n|$)")
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
    """`==gpufleet== NAME rc=N` blocks -> {NAME: Section}; a repeated NAME keeps the last.

    Text before the first header (login banners, shell noise) is ignored.
    """
    sections: dict[str, Section] = {}
    text = "\n" + text
    headers = list(HEADER.finditer(text))
    for i, match in enumerate(headers):
        end = headers[i + 1].start() if i + 1 < len(headers) else len(text)
        body = text[match.end() + 1 : end]
        out, sep, err = body.partition(STDERR_MARK + "\n")
        if not sep and body.rstrip("\n").endswith(STDERR_MARK):
            out, err = body.rstrip("\n")[: -len(STDERR_MARK)], ""
        name, rc_text = match.group(1), match.group(2)
        rc = int(rc_text) if rc_text.lstrip("-").isdigit() else None
        sections[name] = Section(name, rc, out.rstrip("\n"), err.rstrip("\n"))
    return sections
