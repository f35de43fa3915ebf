"""known_hosts files read the way OpenSSH reads them (sshd(8) "SSH_KNOWN_HOSTS FILE FORMAT").

A line is `[@marker] patterns keytype base64 [comment]`. Patterns are comma-separated host names
or `[host]:port` forms with `*` and `?` wildcards; a pattern starting with `!` is a negation (a host
it matches is not matched by the line at all, whatever else matches); `|1|salt|hash` is a hashed
name. `@revoked` keys are refused for every host the line matches. `@cert-authority` lines are
skipped with a one-time warning: paramiko cannot check host certificates, so a CA line never
vouches for a host here (the host then needs a plain key line, or it is "not known").
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

import paramiko

from gpufleet.transport.base import TransportError

_warned: set[str] = set()
_warn_lock = threading.Lock()
_lock = threading.RLock()
_cache: dict[str, tuple[float, list[Entry]]] = {}


def warn_once(message: str) -> None:
    """A warning on stderr, once per process: a fleet sweep would otherwise repeat it per host."""
    with _warn_lock:
        if message in _warned:
            return
        _warned.add(message)
    print(f"gpufleet: warning: {message}", file=sys.stderr)


# One host pattern, ready to test: (negated, exact name or None, compiled wildcard or None).
_Pattern = tuple[bool, str | None, "re.Pattern[str] | None"]


@dataclass(frozen=True)
class Entry:
    patterns: str  # the host field as written
    key: paramiko.PKey
    marker: str | None = None  # "revoked" (cert-authority lines are never entries)
    compiled: tuple[_Pattern, ...] = field(default=(), compare=False, repr=False)

    @classmethod
    def make(cls, patterns: str, key: paramiko.PKey, marker: str | None = None) -> Entry:
        # Compiled once per line: a sweep tests every host against every line.
        return cls(patterns, key, marker, _compile(patterns))

    def matches(self, name: str) -> bool:
        if self.patterns.startswith("|"):
            return _hashed_match(self.patterns, name)
        return _match(self.compiled or _compile(self.patterns), name.lower())


@dataclass(frozen=True)
class KnownKeys:
    keys: tuple[paramiko.PKey, ...]  # keys that vouch for the host, every type, in file order
    revoked: tuple[paramiko.PKey, ...]


def known_name(host: str, port: int) -> str:
    """The name OpenSSH looks up and records: host, or [host]:port off port 22."""
    return host if port == 22 else f"[{host}]:{port}"


def _compile(patterns: str) -> tuple[_Pattern, ...]:
    if patterns.startswith("|"):
        return ()
    out: list[_Pattern] = []
    for raw in patterns.lower().split(","):
        negated = raw.startswith("!")
        pattern = raw[1:] if negated else raw
        if not pattern:
            continue
        if "*" in pattern or "?" in pattern:
            body = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c)
                           for c in pattern)
            out.append((negated, None, re.compile(body, re.DOTALL)))
        else:
            out.append((negated, pattern, None))
    return tuple(out)


def _match(compiled: tuple[_Pattern, ...], name: str) -> bool:
    """OpenSSH's match_hostname: any positive pattern matches and no negated one does."""
    found = False
    for negated, exact, wildcard in compiled:
        if exact == name if wildcard is None else wildcard.fullmatch(name):
            if negated:
                return False
            found = True
    return found


def _hashed_match(field_: str, name: str) -> bool:
    parts = field_.split("|")  # "", "1", salt, hash
    if len(parts) != 4 or parts[1] != "1":
        return False
    try:
        salt, want = base64.b64decode(parts[2]), base64.b64decode(parts[3])
    except (binascii.Error, ValueError):
        return False
    got = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return hmac.compare_digest(got, want)


def parse(text: str, source: str = "known_hosts") -> list[Entry]:
    """Every usable line; lines that cannot be used are skipped with a one-time warning."""
    entries: list[Entry] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        words = line.split()
        marker = None
        if words[0].startswith("@"):
            marker = words.pop(0)[1:].lower()
            if marker == "cert-authority":
                warn_once(f"{source}:{number}: @cert-authority line skipped (host certificates "
                          "are not checked; list the host's own key to trust it)")
                continue
            if marker != "revoked":
                warn_once(f"{source}:{number}: unknown marker @{marker}: line skipped")
                continue
        if len(words) < 3:
            warn_once(f"{source}:{number}: not 'hosts keytype key': line skipped")
            continue
        patterns, kind, blob = words[:3]
        try:
            key = paramiko.PKey.from_type_string(kind, base64.b64decode(blob, validate=True))
        except (binascii.Error, ValueError, paramiko.SSHException, TypeError) as exc:
            warn_once(f"{source}:{number}: {kind} key cannot be used ({exc or type(exc).__name__})"
                      ": line skipped")
            continue
        except Exception as exc:  # paramiko raises bare errors for odd blobs
            warn_once(f"{source}:{number}: {kind} key cannot be read ({type(exc).__name__})"
                      ": line skipped")
            continue
        entries.append(Entry.make(patterns, key, marker))
    return entries


def _load(path: str) -> list[Entry]:
    with open(path, encoding="utf-8", errors="replace") as f:
        return parse(f.read(), path)


def entries(path: str) -> list[Entry]:
    """The file's entries, parsed again only when its mtime changes; [] when it is absent."""
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        return []
    with _lock:
        hit = _cache.get(path)
        if hit is not None and hit[0] == mtime:
            return hit[1]
        try:
            value = _load(path)
        except OSError:
            value = []
        _cache[path] = (mtime, value)
        return value


def find(files: Sequence[str], name: str) -> KnownKeys:
    """The keys listed (and revoked) for `name` in `files`, in order; /dev/null is empty."""
    keys: list[paramiko.PKey] = []
    revoked: list[paramiko.PKey] = []
    for path in files:
        if path == "/dev/null":
            continue
        for entry in entries(path):
            if entry.matches(name):
                (revoked if entry.marker == "revoked" else keys).append(entry.key)
    return KnownKeys(tuple(keys), tuple(revoked))


def fingerprint(key: paramiko.PKey) -> str:
    return f"{key.algorithm_name} {key.fingerprint}"


def prefer_types(t: paramiko.Transport, known: Sequence[paramiko.PKey]) -> None:
    """Ask for the key type we already know, as OpenSSH orders HostKeyAlgorithms."""
    wanted: list[str] = []
    for key in known:
        kind = key.get_name()
        wanted += ["rsa-sha2-512", "rsa-sha2-256"] if kind == "ssh-rsa" else [kind]
    opts = t.get_security_options()
    current = list(opts.key_types)
    first = [k for k in dict.fromkeys(wanted) if k in current]
    if first:
        opts.key_types = first + [k for k in current if k not in first]


def check(key: paramiko.PKey, found: KnownKeys, *, name: str, where: str, files: Sequence[str],
          record_to: str, may_record: bool) -> None:
    """Accept a listed key (any of them), refuse a revoked or changed one; an unknown key is
    refused unless `may_record` (accept-new), then appended to `record_to`."""
    if any(k.asbytes() == key.asbytes() for k in found.revoked):
        raise TransportError(
            "hostkey_mismatch",
            f"host key for {where} is marked @revoked in known_hosts: {fingerprint(key)}. "
            "It is refused; the host needs a new key.",
        )
    known = found.keys
    if any(k.asbytes() == key.asbytes() for k in known):
        return

    def changed(expected: Sequence[paramiko.PKey]) -> TransportError:
        return TransportError(
            "hostkey_mismatch",
            f"host key for {where} changed: expected "
            f"{', '.join(fingerprint(k) for k in expected)}, got {fingerprint(key)}. "
            f"If the host was reinstalled, remove the old key (ssh-keygen -R '{name}') "
            "and connect again; otherwise treat this as an attack.",
        )

    if known:
        raise changed(known)
    if not may_record:
        raise TransportError(
            "hostkey_unknown",
            f"host key for {where} is not yet known: {fingerprint(key)}. Verify the fingerprint, "
            f"then rerun with --accept-new-host-keys or add it to "
            f"{record_to} with ssh-keyscan.",
        )
    if record_to == "/dev/null":
        return
    with _lock:
        # Another host with the same address may have recorded a key meanwhile.
        now = find(files, name)
        if any(k.asbytes() == key.asbytes() for k in now.keys):
            return
        if now.keys:
            raise changed(now.keys)
        before = entries(record_to)
        os.makedirs(os.path.dirname(record_to) or ".", mode=0o700, exist_ok=True)
        with open(record_to, "a", encoding="ascii") as f:
            f.write(f"{name} {key.get_name()} {key.get_base64()}\n")
        # Keep the parsed file current instead of re-reading it for every new host.
        _cache[record_to] = (os.stat(record_to).st_mtime, [*before, Entry.make(name, key)])
    print(recorded_line(name, key, record_to), file=sys.stderr)


def recorded_line(name: str, key: paramiko.PKey, path: str) -> str:
    """OpenSSH's line for a key it records, plus the fingerprint and the file.

    OpenSSH 9.2p1 sshconnect.c: "Warning: Permanently added '%.200s' (%s) to the list of known
    hosts." (read from the strings of Debian's /usr/bin/ssh, 1:9.2p1-2+deb12u10: a capture).
    """
    return (f"gpufleet: Warning: Permanently added '{name}' ({fingerprint(key)}) to the list "
            f"of known hosts ({path}).")
