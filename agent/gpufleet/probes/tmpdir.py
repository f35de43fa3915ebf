"""The temporary directory the probe and the smoke write to, and whether it takes a write.

probe.sh writes a test file in its own `mktemp -d` directory under $TMPDIR (or /tmp) and prints
`path=`, `free_kib=` (`df -Pk`'s Available column, POSIX: 1024-byte units) and `fallback=`: empty
when the write kept its content, else the directory it went on in (/dev/shm, $HOME). A full
tmpfs still makes directories, so the write, not mkdir, is the test.
"""

from __future__ import annotations

from typing import Any

from gpufleet.model import TempDir
from gpufleet.probes.sections import Family, ProbeOutput


def parse_tmpdir(text: str) -> TempDir | None:
    """probe.sh's tmpdir section -> TempDir; None when it names no path."""
    kv = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    path = kv.get("path", "").strip()
    if not path:
        return None
    free = kv.get("free_kib", "").strip()
    fallback = kv.get("fallback", "").strip()
    return TempDir(path=path, free_bytes=int(free) * 1024 if free.isdigit() else None,
                   writable=not fallback, fallback=fallback or None)


def build_tmpdir(out: ProbeOutput) -> dict[str, Any]:
    text = out.ok("tmpdir")
    return {"tmpdir": None if text is None else out.safe("tmpdir", None, parse_tmpdir, text)}


TMPDIR = Family("tmpdir", sections=("tmpdir",), errors=("tmpdir",), fields=("tmpdir",),
                build=build_tmpdir)
