"""Reading a file gpufleet did not just write: the one validation layer.

Every command that reads a user's file (an expectations file, a saved report, a run store's
index and runs, Ansible results) says the same thing for the same failure, so the translation
lives here once: an OS or parse error, nesting no renderer can walk, a number no float holds, or
a field the shipped JSON Schema refuses becomes one FileError whose message names the file and
the field ("PATH is not a gpufleet JSON report: hosts.gpu01.smoke.busbw_gbps: a string where an
object is expected"). The file's own text never reaches the message raw: keys are host data.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
import tempfile
from collections.abc import Callable, Iterable
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from gpufleet.redact import text as inert

T = TypeVar("T")

# No report, index or Ansible result nests deeper than ~12; 64 leaves room and keeps every
# recursive reader (redact.clean, the renderers, jsonschema) far from Python's limit.
MAX_DEPTH = 64
# Counters, bytes and PIDs fit 64 bits; a 400-digit "measurement" is a hostile file (float()
# of it raises OverflowError in the page renderer).
MAX_INT = 2**63


REPORT_SCHEMA = "report-v1.json"
STORE_SCHEMA = "store-v1.json"


class FileError(Exception):
    """The file cannot be read or parsed; the message names the file and why."""


_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link"))


def not_regular(mode: int) -> str | None:
    """"a FIFO", "a symbolic link", … for a mode that is not a regular file's; else None."""
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


class NotRegular(OSError):
    """open_regular found something other than a regular file; strerror says what."""

    def __init__(self, kind: str) -> None:
        super().__init__(errno.EINVAL, f"{kind}, not a regular file")
        self.kind = kind


def open_regular(path: Path, flags: int, mode: int = 0o644) -> int:
    """os.open for a file in a shared directory: a link is not followed (ELOOP), a FIFO or
    device neither blocks (O_NONBLOCK) nor is used: NotRegular("a FIFO, not a regular file")."""
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    kind = not_regular(os.fstat(fd).st_mode)
    if kind is not None:
        os.close(fd)
        raise NotRegular(kind)
    return fd


def _read_text(path: Path, follow: bool) -> str:
    if follow:
        return path.read_text(encoding="utf-8")
    with os.fdopen(open_regular(path, os.O_RDONLY), encoding="utf-8") as f:
        return f.read()


def read_parsed(path: Path, parse: Callable[[str], T], what: str,
                errors: tuple[type[Exception], ...] = (ValueError,), *,
                follow: bool = True) -> T:
    """parse(text of path); "cannot read PATH: why" or "PATH is not WHAT: why" as FileError.
    `follow` False: a symbolic link at `path` is refused, not read (files a store owns)."""
    try:
        text = _read_text(path, follow)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:
            raise FileError(f"{path} is a symbolic link, not {what}: not read") from exc
        if isinstance(exc, NotRegular):
            raise FileError(f"{path} is {exc.kind}, not {what}: not read") from exc
        raise FileError(f"cannot read {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise FileError(f"{path} is not {what}: not UTF-8 text (byte {exc.start})") from exc
    try:
        return parse(text)
    except RecursionError as exc:
        raise FileError(f"{path} is not {what}: nested deeper than {MAX_DEPTH} levels") from exc
    except errors as exc:
        raise FileError(f"{path} is not {what}: {exc}") from exc


def field(parts: Iterable[object]) -> str:
    """A JSON path as one short, inert dotted name (keys come from the file: host data)."""
    names = [inert(p)[:60] for p in parts]
    return ".".join(names) or "the top level"


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def check_bounds(doc: Any) -> None:
    """ValueError naming the field when `doc` nests deeper than MAX_DEPTH or holds a number no
    reader can use (an int beyond 64 bits, a non-finite float). Iterative: no recursion."""
    stack: list[tuple[Any, tuple[object, ...]]] = [(doc, ())]
    while stack:
        obj, at = stack.pop()
        if len(at) > MAX_DEPTH:
            raise ValueError(f"{field(at[:8])}…: nested deeper than {MAX_DEPTH} levels")
        if isinstance(obj, dict):
            stack.extend((v, (*at, k)) for k, v in obj.items())
        elif isinstance(obj, list):
            stack.extend((v, (*at, i)) for i, v in enumerate(obj))
        elif isinstance(obj, bool):
            continue
        elif isinstance(obj, int) and abs(obj) >= MAX_INT:
            raise ValueError(f"{field(at)}: an integer of {len(str(abs(obj)))} digits")
        elif isinstance(obj, float) and not math.isfinite(obj):
            raise ValueError(f"{field(at)}: a non-finite number")


def loads(text: str) -> Any:
    """JSON as gpufleet reads it back: no NaN/Infinity, bounded depth and integers."""
    doc = json.loads(text, parse_constant=_no_constant)
    check_bounds(doc)
    return doc


def read_json(path: Path, what: str, *, follow: bool = True) -> Any:
    """The JSON document at `path` through `loads`, or FileError naming the file and why."""
    return read_parsed(path, loads, what, (ValueError,), follow=follow)


def write_atomic(path: Path, text: str, *, in_place: bool = True) -> None:
    """Write beside, then rename: readers see the old file or the new one, never half of one.
    The temp file is new and ours (mkstemp: O_EXCL, a random name), so a symlink planted in a
    shared directory is never followed and concurrent writers never share one; the rename
    replaces a link at `path` itself, never its target. A device, FIFO or socket at `path`
    (`-o /dev/null`, `-o /dev/stdout`) is written to, never renamed over: as root the rename
    would put a plain file where /dev/null was, for every program on the machine.
    `in_place` False (a store's files, never a path the user named): always the temp file and
    rename, so nothing planted at `path` is written through. Raises OSError."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = stat.S_IFREG
    if in_place and (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        umask = os.umask(0o022)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # what a plain open() would have made, not mkstemp's 0600
        os.replace(tmp, path)
    except BaseException:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise


@cache
def _validator(schema_file: str) -> Any:
    import jsonschema  # noqa: PLC0415  # only readers of saved files pay its import

    text = resources.files("gpufleet").joinpath(f"schema/{schema_file}").read_text("utf-8")
    return jsonschema.Draft202012Validator(json.loads(text))


_TYPE_NAMES = {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
               int: "an integer", float: "a number", type(None): "null"}


def _reason(err: Any) -> str:
    """Why jsonschema refused a value, in words that never echo the value itself."""
    kind, want = err.validator, err.validator_value
    if kind == "type":
        wants = " or ".join(want) if isinstance(want, list) else str(want)
        return f"{_TYPE_NAMES.get(type(err.instance), 'a value')} where {wants} is expected"
    if kind == "required":
        missing = [k for k in want if isinstance(err.instance, dict) and k not in err.instance]
        return f"lacks {', '.join(repr(k) for k in missing) or 'a required field'}"
    if kind == "enum":
        return "not one of " + ", ".join(json.dumps(v) for v in want)
    if kind == "const":
        return f"not {json.dumps(want)}"
    if kind in ("pattern", "propertyNames"):
        return "a name or value of the wrong form"
    if kind == "additionalProperties":
        return "a field the schema does not have"
    if kind in ("minimum", "minItems"):
        return f"below the minimum of {want}"
    return f"fails the schema's {kind!r} rule"


def check_schema(doc: Any, schema_file: str, path: Path, what: str) -> None:
    """FileError naming `path` and the first field `doc` breaks in gpufleet/schema/SCHEMA."""
    import jsonschema.exceptions  # noqa: PLC0415

    err = jsonschema.exceptions.best_match(_validator(schema_file).iter_errors(doc))
    if err is not None:
        raise FileError(f"{path} is not {what}: {field(err.absolute_path)}: {_reason(err)}")


def read_checked(path: Path, schema_file: str, what: str, *, follow: bool = True) -> Any:
    """read_json, then check_schema: the document, or FileError naming the file and field."""
    doc = read_json(path, what, follow=follow)
    check_schema(doc, schema_file, path, what)
    return doc
