"""Split the probe script's output into sections (pure)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

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


def tool_failure(tool: str, section: Section, tool_timeout: str) -> str:
    """A sentence for a tool that did not answer: not found, hung, or its exit and first line."""
    first = next((ln.strip() for ln in section.text.splitlines() if ln.strip()), "")
    if section.rc == NOT_FOUND_RC:
        return f"{tool}: not found"
    if section.hung:
        return f"{tool} hung (no answer in {tool_timeout} s)"
    return f"{tool} exited {section.rc}: {first}" if first else f"{tool} exited {section.rc}"


class ProbeOutput:
    """One probe run's sections, what the families have decided so far (`errors`), and the
    helpers every family uses. A family reads sections through it and writes only its own
    `errors` keys; the nvidia-smi tool's own failure is decided once, for all its families."""

    def __init__(self, sections: Mapping[str, Section], meta: Mapping[str, str],
                 smi_sections: Sequence[tuple[str, str]] = ()) -> None:
        self.sections = sections
        self.meta = meta
        self.tool_timeout = meta.get("tool_timeout", "?")
        self.errors: dict[str, str] = {}
        self.smi_sections = smi_sections  # (section, family) of every nvidia-smi family
        self.smi: tuple[str | None] | None = None  # gpus.smi_error's answer, once decided

    def get(self, name: str) -> Section | None:
        return self.sections.get(name)

    def ok(self, name: str) -> str | None:
        """The section's stdout when its tool exited 0, else None."""
        section = self.sections.get(name)
        return section.stdout if section is not None and section.ok else None

    def fail(self, family: str, name: str, tool: str) -> None:
        """errors[family] = why `tool` failed, when section `name` says it did."""
        section = self.sections.get(name)
        if section is not None and not section.ok:
            self.errors[family] = tool_failure(tool, section, self.tool_timeout)

    def safe(self, family: str, default: Any, parse: Callable[..., T], *args: Any) -> T:
        """What `parse` read, or `default` and a "could not read" sentence: one odd line
        from a host costs that fact, never the host's whole fact set."""
        try:
            return parse(*args)
        except Exception as exc:  # a parser bug on odd host data costs one fact, not all
            self.errors[family] = f"could not read {family}: {type(exc).__name__}: {exc}"[:300]
            got: T = default
            return got


@dataclass(frozen=True)
class Family:
    """One fact family: the probe sections it reads, the `Facts.errors` keys it may write, the
    `Facts` fields it fills, and a pure `build(out) -> {field: value}` over those sections.

    `smi`: the nvidia-smi section whose failure is this family's error (decided in
    gpus.smi_error, so one failed nvidia-smi is reported once). When `build` itself raises,
    the family's fields keep their `Facts` defaults and errors[name] says why; the other
    families are unaffected.
    """

    name: str
    sections: tuple[str, ...]
    errors: tuple[str, ...]
    fields: tuple[str, ...]
    build: Callable[[ProbeOutput], Mapping[str, Any]]
    smi: str | None = None
