"""Host data made safe to show, in one place that every output path (the sweep's raw files, every
renderer) calls: it sits below both, so the sweep does not import the report layer.

Everything a host prints is untrusted: it may carry secrets a tool echoed, terminal escape
sequences (an OSC 52 clipboard write, a cursor move that hides a line), rich markup, characters
XML cannot hold or Markdown that turns a version string into a link. `text()` redacts secrets and
removes control characters; the format-specific helpers (`xml_text`, `markdown`) go on from there.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

# Secrets that tools like to echo (env dumps in smoke logs, URLs with credentials, keys).
# A key may be quoted (`"password": "…"` in JSON, `'AWS_SECRET_ACCESS_KEY': '…'` in a repr).
_SECRET_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(-----END [A-Z ]*PRIVATE KEY-----|$)",
                re.DOTALL), "[REDACTED PRIVATE KEY]"),
    (re.compile(r"(?i)\b([A-Z0-9_]*(?:TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_KEY|"
                r"CREDENTIALS?)[A-Z0-9_]*)([\"']?\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|\S+)"),
     r"\1\2***"),
    (re.compile(r"(?i)\b(authorization:\s*(?:bearer|basic|token)?\s*)\S+"), r"\1***"),
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s:@]+:[^/\s@]+@"), r"\1***@"),
    (re.compile(r"\b(hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16})\b"), "***"),
)

# One cheap search first: almost no string holds a secret, and reports hold many strings.
_MAYBE_SECRET = re.compile(
    r"(?i)token|secret|passw|api_?key|access_key|credential|authorization|private key|"
    r"://[^/\s]*@|\bhf_|\bgh[pousr]_|\bAKIA"
)

SECRET_KEY = re.compile(r"(?i)token|secret|passw|api_?key|access_key|credential")

# Whole escape sequences first (so an OSC payload does not survive as text), then any control
# character left: C0 but tab and newline, DEL, C1, and the bidi overrides that reorder a line.
_ESCAPES = re.compile(
    r"\x1b\][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"  # OSC … BEL/ST (e.g. OSC 52, OSC 8 links)
    r"|\x1b[P^_X][^\x1b\x9c]*(?:\x1b\\|\x9c)?"  # DCS, PM, APC, SOS strings
    r"|\x1b\[[0-?]*[ -/]*[@-~]?"  # CSI (colours, cursor moves, erase)
    r"|\x1b[ -/]*[0-~]?"  # any other ESC sequence
    r"|\x9b[0-?]*[ -/]*[@-~]?"  # 8-bit CSI
    r"|[\x90\x9d\x9e\x9f][^\x07\x9c]*(?:\x07|\x9c)?"  # 8-bit DCS/OSC/PM/APC
)
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_MARKDOWN = re.compile(r"([\\`*_{}\[\]()<>#+!|~])")


def redact(text: str) -> str:
    """Credentials, tokens and private keys replaced by ***."""
    if not _MAYBE_SECRET.search(text):
        return text
    for pattern, repl in _SECRET_PATTERNS:
        text = pattern.sub(repl, text)
    return text


def strip_controls(text: str) -> str:
    """No escape sequence or control character reaches a terminal, file or page."""
    if text.isprintable():
        return text
    return _CONTROLS.sub("", _ESCAPES.sub("", text.replace("\r\n", "\n")))


def text(value: object) -> str:
    """Any value from a host as plain, inert text: secrets redacted, controls removed."""
    return redact(strip_controls(str(value)))


def clean(obj: Any, fn: Callable[[object], str] = text) -> Any:
    """A JSON-like document with every string through `fn` and non-finite numbers as None."""
    if isinstance(obj, str):
        return fn(obj)
    if isinstance(obj, float) and not math.isfinite(obj):
        return None  # JSON has no NaN/Infinity; every renderer shows None as missing
    if isinstance(obj, dict):
        # An environment captured as a mapping: the key names the secret, the value is it.
        return {fn(k) if isinstance(k, str) else k:
                "***" if isinstance(v, str) and v and isinstance(k, str) and SECRET_KEY.search(k)
                else clean(v, fn) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v, fn) for v in obj]
    return obj


def number(value: object) -> float | None:
    """A finite float, else None (missing): NaN, ±Infinity, None and non-numbers alike."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        got = float(value)
    except (ValueError, OverflowError):  # OverflowError: an int beyond a float (10**400)
        return None
    return got if math.isfinite(got) else None


def xml_text(value: object) -> str:
    """`text()` less the characters XML 1.0 cannot hold (lone surrogates, U+FFFE/FFFF)."""
    return _NOT_XML.sub("", text(value))


def markdown(value: object) -> str:
    """`text()` with Markdown's punctuation escaped: a version string stays a string."""
    return _MARKDOWN.sub(r"\\\1", text(value))
