"""SSH through paramiko, resolving hosts the way OpenSSH does.

One paramiko Transport per host, reused for every command. ~/.ssh/config (HostName, User, Port,
IdentityFile, ProxyJump, UserKnownHostsFile, StrictHostKeyChecking, IdentitiesOnly) fills what
the inventory left unset; inventory values win, as they do on Ansible's ssh command line.
Loaded keys, known_hosts files and jump-host connections are shared across hosts: RSA key
loading and bastion handshakes are the expensive parts of a fleet sweep.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import select
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import paramiko

from gpufleet.model import CommandResult, HostSpec
from gpufleet.transport import _remote, capture, known_hosts
from gpufleet.transport.base import Transport, TransportError

_DEFAULT_IDENTITIES = ("id_rsa", "id_ecdsa", "id_ecdsa_sk", "id_ed25519", "id_ed25519_sk")
_lock = threading.RLock()
_file_cache: dict[str, tuple[float, Any]] = {}


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class _Target:
    label: str  # what messages call the host
    host: str  # what we connect to (after HostName)
    port: int
    user: str
    key_files: tuple[str, ...]
    identities_only: bool
    known_hosts: tuple[str, ...]  # user files, read in order; new keys go to the first
    global_known_hosts: tuple[str, ...]
    host_key_alias: str | None
    accept_unknown: bool  # StrictHostKeyChecking no|accept-new (changed keys are always refused)
    jumps: tuple[str, ...] = field(default=())


def _cached(path: str, load: Any) -> Any:
    """load(path), re-read only when the file's mtime changes; None when the file is absent."""
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        return None
    with _lock:
        hit = _file_cache.get(path)
        if hit is not None and hit[0] == mtime:
            return hit[1]
        value = load(path)
        _file_cache[path] = (mtime, value)
        return value


def _ssh_config() -> paramiko.SSHConfig:
    config = _cached(os.path.expanduser("~/.ssh/config"), paramiko.SSHConfig.from_path)
    return config if config is not None else paramiko.SSHConfig()


def _resolve(address: str, *, port: int | None, user: str | None, key_files: Sequence[str],
             proxy_jump: str | None, known_hosts: Sequence[str], strict: bool,
             label: str) -> _Target:
    try:
        cfg = _ssh_config().lookup(address)
    except Exception as exc:  # a broken ~/.ssh/config is the user's to fix; say where
        raise TransportError("error", f"cannot read ~/.ssh/config for {address}: {exc}") from exc
    keys = [*key_files, *(os.path.expanduser(k) for k in cfg.get("identityfile", []))]
    if not keys:
        keys = [os.path.expanduser(f"~/.ssh/{n}") for n in _DEFAULT_IDENTITIES]
    if known_hosts:
        kh = list(known_hosts)
    elif cfg.get("userknownhostsfile"):
        kh = [os.path.expanduser(p) for p in cfg["userknownhostsfile"].split()]
    else:
        kh = [os.path.expanduser("~/.ssh/known_hosts"), os.path.expanduser("~/.ssh/known_hosts2")]
    global_kh = tuple(p for p in cfg.get("globalknownhostsfile", "/etc/ssh/ssh_known_hosts").split()
                      if p not in kh)
    jump = proxy_jump or cfg.get("proxyjump")
    jumps = () if not jump or jump.lower() == "none" else tuple(
        j.strip() for j in jump.split(",") if j.strip())
    strict_cfg = cfg.get("stricthostkeychecking", "").lower()
    return _Target(
        label=label,
        host=cfg.get("hostname", address),
        port=int(port or cfg.get("port") or 22),
        user=user or cfg.get("user") or getpass.getuser(),
        key_files=tuple(dict.fromkeys(keys)),
        identities_only=cfg.get("identitiesonly", "no").lower() == "yes",
        known_hosts=tuple(kh),
        global_known_hosts=global_kh,
        host_key_alias=cfg.get("hostkeyalias"),
        accept_unknown=not strict or strict_cfg in ("no", "off", "accept-new"),
        jumps=jumps,
    )


def _parse_jump(hop: str) -> tuple[str | None, str, int | None]:
    """ "[ssh://][user@]host[:port]" → (user, host, port)."""
    user, _, rest = hop.removeprefix("ssh://").rpartition("@")
    host, port = rest, ""
    if rest.startswith("["):  # [v6]:port
        host, _, tail = rest[1:].partition("]")
        port = tail[1:] if tail.startswith(":") else ""
    elif rest.count(":") == 1:
        host, _, port = rest.partition(":")
    if not host or (port and not port.isdigit()):
        raise TransportError("error", f"cannot read ProxyJump {hop!r}: want [user@]host[:port]")
    return user or None, host, int(port) if port else None


# --------------------------------------------------------------------------- host keys


def _known_name(target: _Target) -> str:
    return known_hosts.known_name(target.host_key_alias or target.host, target.port)


def _known_files(target: _Target) -> tuple[str, ...]:
    return (*target.known_hosts, *target.global_known_hosts)


def _prefer_aead(t: paramiko.Transport) -> None:
    """AES-GCM first: paramiko checks CTR+HMAC MACs byte by byte in Python, GCM in C.

    That MAC loop was half of the controller's CPU per received packet.
    """
    opts = t.get_security_options()
    current = list(opts.ciphers)
    first = [c for c in ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com") if c in current]
    opts.ciphers = first + [c for c in current if c not in first]


# --------------------------------------------------------------------------- client keys


def _load_key(path: str) -> paramiko.PKey | str:
    try:
        key = paramiko.PKey.from_path(path)
    except paramiko.PasswordRequiredException:
        return "encrypted (load it into ssh-agent)"
    except TypeError as exc:  # cryptography's word for an OpenSSH-format key with a passphrase
        if "password" in str(exc):
            return "encrypted (load it into ssh-agent)"
        return f"unreadable ({exc})"
    except (OSError, paramiko.SSHException, ValueError) as exc:
        return f"unreadable ({exc})"
    except Exception as exc:  # e.g. a DSA key paramiko no longer supports
        known_hosts.warn_once(f"identity file {path} skipped: {type(exc).__name__}: {exc}")
        return f"unsupported ({type(exc).__name__}: {exc})"
    cert = path + "-cert.pub"
    if os.path.exists(cert):
        with contextlib.suppress(OSError, ValueError, paramiko.SSHException):
            key.load_certificate(cert)
    return key


def _public_blobs(key_files: Sequence[str]) -> set[str]:
    """Base64 public keys of the identity files, from their .pub companions."""
    blobs = set()
    for path in key_files:
        with (contextlib.suppress(OSError, IndexError, UnicodeDecodeError),
              open(path + ".pub", encoding="ascii") as f):
            blobs.add(f.read().split()[1])
    return blobs


def _authenticate(t: paramiko.Transport, target: _Target, timeout: float) -> None:
    tried: list[str] = []
    candidates: list[tuple[str, paramiko.PKey]] = []
    for path in target.key_files:
        key = _cached(path, _load_key)
        if isinstance(key, paramiko.PKey):
            candidates.append((path, key))
        elif key is not None:
            tried.append(f"{path}: {key}")
    agent: paramiko.Agent | None = None
    if os.environ.get("SSH_AUTH_SOCK"):
        # IdentitiesOnly still lets the agent sign for the identity files (encrypted ones).
        wanted = _public_blobs(target.key_files) if target.identities_only else None
        try:
            agent = paramiko.Agent()
            have = {k.asbytes() for _, k in candidates}
            candidates += [(f"agent:{k.fingerprint}", k) for k in agent.get_keys()
                           if k.asbytes() not in have
                           and (wanted is None or k.get_base64() in wanted)]
        except paramiko.SSHException as exc:
            tried.append(f"ssh-agent: {exc}")
    t.auth_timeout = timeout
    try:
        for description, key in candidates:
            try:
                t.auth_publickey(target.user, key)
            except paramiko.BadAuthenticationType as exc:
                raise TransportError(
                    "auth_failed",
                    f"{target.user}@{target.label}: server does not accept public keys "
                    f"(allowed: {', '.join(exc.allowed_types)})",
                ) from exc
            except paramiko.AuthenticationException:
                tried.append(description)
                continue
            except paramiko.SSHException as exc:  # e.g. MaxAuthTries reached: disconnect
                tried.append(f"{description} ({exc})")
                break
            if t.is_authenticated():
                return
    finally:
        if agent is not None:
            agent.close()
    what = "; ".join(tried) if tried else "no key in ssh-agent or in the identity files"
    raise TransportError(
        "auth_failed", f"{target.user}@{target.label}: permission denied (publickey); tried {what}"
    )


# --------------------------------------------------------------------------- connections


def _handshake(sock: Any, target: _Target, timeout: float, accept_new: bool) -> paramiko.Transport:
    t = paramiko.Transport(sock)
    try:
        t.banner_timeout = timeout
        t.handshake_timeout = timeout
        known = known_hosts.find(_known_files(target), _known_name(target))
        known_hosts.prefer_types(t, known.keys)
        _prefer_aead(t)
        try:
            t.start_client(timeout=timeout)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise TransportError(
                "unreachable",
                f"{target.label} ({target.host}:{target.port}): SSH handshake failed: "
                f"{exc or type(exc).__name__}",
            ) from exc
        if not t.is_active() or not t.initial_kex_done:  # start_client just stops waiting
            raise TransportError(
                "unreachable",
                f"{target.label} ({target.host}:{target.port}): SSH handshake failed: "
                f"no SSH answer within {timeout:g} s",
            )
        known_hosts.check(
            t.get_remote_server_key(), known, name=_known_name(target),
            where=f"{target.label} ({target.host}:{target.port})",
            files=_known_files(target), record_to=target.known_hosts[0],
            may_record=accept_new or target.accept_unknown)
        _authenticate(t, target, timeout)
        t.set_keepalive(30)
        return t
    except BaseException:
        t.close()
        raise


def _dial(target: _Target, via: paramiko.Transport | None, timeout: float) -> Any:
    where = f"{target.label} ({target.host}:{target.port})"
    if via is not None:
        try:
            return via.open_channel("direct-tcpip", (target.host, target.port), ("127.0.0.1", 0),
                                    timeout=timeout)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise TransportError(
                "unreachable", f"{where}: the jump host could not connect to it: {exc}"
            ) from exc
    try:
        return socket.create_connection((target.host, target.port), timeout=timeout)
    except socket.gaierror as exc:
        raise TransportError(
            "unreachable", f"{where}: name {target.host!r} does not resolve ({exc.strerror})"
        ) from exc
    except ConnectionRefusedError as exc:
        raise TransportError(
            "unreachable", f"{where}: connection refused (is sshd running on port {target.port}?)"
        ) from exc
    except TimeoutError as exc:
        raise TransportError("unreachable", f"{where}: no answer within {timeout:g} s") from exc
    except OSError as exc:
        raise TransportError("unreachable", f"{where}: {exc.strerror or exc}") from exc


class _Jump:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.transport: paramiko.Transport | None = None
        self.users = 0
        self.failure: tuple[float, TransportError] | None = None


_jumps: dict[tuple[Any, ...], _Jump] = {}


def _jump_chain(hops: Sequence[str], timeout: float, accept_new: bool
                ) -> tuple[tuple[Any, ...], paramiko.Transport]:
    """A shared connection through every hop; many hosts behind one bastion share it.

    As with ssh(1), options from the host's ssh args (StrictHostKeyChecking=no, a
    UserKnownHostsFile) apply to the destination only: a hop is checked by its own
    ~/.ssh/config settings, strictly unless that file says otherwise.
    """
    via: paramiko.Transport | None = None
    key: tuple[Any, ...] = ()
    held: tuple[Any, ...] = ()  # the hops this host counts as a user of
    try:
        for hop in hops:
            user, host, port = _parse_jump(hop)
            target = _resolve(host, port=port, user=user, key_files=(), proxy_jump="none",
                              known_hosts=(), strict=True, label=f"jump host {host}")
            key += (target.user, target.host, target.port)
            with _lock:
                slot = _jumps.setdefault(key, _Jump())
            with slot.lock:
                if slot.transport is None or not slot.transport.is_active():
                    # A dead bastion fails every host behind it once, not once per host.
                    if slot.failure and time.monotonic() - slot.failure[0] < timeout:
                        raise slot.failure[1]
                    try:
                        slot.transport = _handshake(_dial(target, via, timeout), target,
                                                    timeout, accept_new)
                        slot.failure = None
                    except TransportError as exc:
                        slot.failure = (time.monotonic(), exc)
                        raise
                slot.users += 1
                held = key
            via = slot.transport
    except BaseException:
        if held:
            _release_jumps(held)
        raise
    assert via is not None
    return key, via


def _release_jumps(key: tuple[Any, ...]) -> None:
    for end in range(len(key), 0, -3):
        with _lock:
            slot = _jumps.get(key[:end])
        if slot is None:
            continue
        with slot.lock:
            slot.users -= 1
            if slot.users <= 0 and slot.transport is not None:
                slot.transport.close()
                slot.transport = None


def connect_ssh(spec: HostSpec, *, connect_timeout: float = 10.0,
                accept_new_host_keys: bool = False) -> SshTransport:
    target = _resolve(
        spec.address, port=spec.port, user=spec.user, key_files=spec.key_files,
        proxy_jump=spec.proxy_jump, known_hosts=spec.known_hosts_files,
        strict=spec.strict_host_key_checking,
        label=spec.name,
    )
    jump_key: tuple[Any, ...] = ()
    via = None
    try:
        if target.jumps:
            try:
                jump_key, via = _jump_chain(target.jumps, connect_timeout, accept_new_host_keys)
            except TransportError as exc:
                raise TransportError(exc.status, f"{spec.name}: via {exc.message}") from exc
        client = _handshake(_dial(target, via, connect_timeout), target, connect_timeout,
                            accept_new_host_keys)
    except BaseException:
        if jump_key:
            _release_jumps(jump_key)
        raise
    return SshTransport(spec, client, jump_key, connect_timeout)


# --------------------------------------------------------------------------- the transport


class SshTransport(Transport):
    def __init__(self, spec: HostSpec, client: paramiko.Transport, jump_key: tuple[Any, ...],
                 connect_timeout: float) -> None:
        self.name = spec.name
        self._spec = spec
        self._client = client
        self._jump_key = jump_key
        self._timeout = connect_timeout
        self._sftp: paramiko.SFTPClient | None = None

    def _session(self, timeout: float | None = None) -> paramiko.Channel | None:
        """A new channel; None when the host did not answer within `timeout` (it is stuck)."""
        wait = self._timeout if timeout is None else min(self._timeout, timeout)
        started = time.monotonic()
        try:
            return self._client.open_session(timeout=wait)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            if self._client.is_active() and time.monotonic() - started >= wait * 0.9:
                return None
            raise TransportError("unreachable", f"{self.name}: connection lost ({exc})") from exc

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        line = _remote.shell_line(_remote.wrapped_argv(
            argv, timeout, env, self._spec.become, self._spec.become_user))
        started = time.monotonic()
        deadline = started + timeout
        out, err = capture.Capped(), capture.Capped()
        pending = b""  # stderr until the wrapper's pgid line has arrived (bounded below)
        group: _remote.Group | None = None
        looking = True
        chan = self._session(timeout)
        if chan is None:  # nothing started on the host: there is nothing to kill
            return self._result(None, out, err, pending, started, timed_out=True)
        try:
            if not self._exec(chan, line, stdin, timeout):
                return self._result(None, out, err, pending, started, timed_out=True)
            fd = chan.fileno()  # readable whenever stdout or stderr has data or EOF arrived
            while True:
                while chan.recv_ready():
                    out.add(chan.recv(1 << 16))
                while chan.recv_stderr_ready():
                    data = chan.recv_stderr(1 << 16)
                    if looking:
                        pending += data
                        group, pending = _remote.split_marker(pending)
                        if group is not None or len(pending) > 1 << 16:
                            err.add(pending)
                            pending, looking = b"", False
                    else:
                        err.add(data)
                # EOF or a close can land between the reads above and this test, together with
                # the last data: leave only once nothing is buffered (paramiko keeps a closed
                # channel's buffered data readable).
                if ((chan.eof_received or chan.closed)
                        and not chan.recv_ready() and not chan.recv_stderr_ready()):
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self._kill(group)
                    return self._result(None, out, err, pending, started, timed_out=True)
                if _remote.CANCEL.is_set():
                    raise TransportError("error", f"{self.name}: interrupted")  # killed below
                select.select([fd], [], [], min(remaining, _remote.POLL_S))
            remaining = max(0.0, deadline - time.monotonic())
            if not chan.status_event.wait(min(remaining, 10.0) or 0.1):
                self._kill(group)
                return self._result(None, out, err, pending, started, timed_out=True)
            rc: int | None = chan.recv_exit_status()
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise TransportError("unreachable", f"{self.name}: connection lost ({exc})") from exc
        except BaseException:
            # Interrupted (Ctrl-C, a thread torn down): do not leave the command running.
            self._kill(group)
            raise
        finally:
            chan.close()
        if rc == -1:  # paramiko: the channel closed without an exit status
            if not self._client.is_active():  # the host went away, not just the command
                raise TransportError("unreachable",
                                     f"{self.name}: connection lost while the command ran")
            rc = None  # killed by a signal on the host
        return self._result(rc, out, err, pending, started)

    @staticmethod
    def _exec(chan: paramiko.Channel, line: str, stdin: bytes | None, timeout: float) -> bool:
        """Start `line` on `chan` and send `stdin`; False when the host stopped answering within
        `timeout`. paramiko waits for the exec reply (and for window space to send stdin)
        without a timeout: a host that stops answering would hold this thread forever."""
        stuck: list[bool] = []

        def give_up() -> None:
            stuck.append(True)
            chan.close()

        watchdog = threading.Timer(timeout, give_up)
        watchdog.daemon = True
        watchdog.start()
        try:
            chan.exec_command(line)
            if stdin:
                chan.sendall(stdin)
            chan.shutdown_write()
        except (paramiko.SSHException, OSError, EOFError):
            if stuck:
                return False
            raise
        finally:
            watchdog.cancel()
        return True

    @staticmethod
    def _result(rc: int | None, out: capture.Capped, err: capture.Capped, pending: bytes,
                started: float, *, timed_out: bool = False) -> CommandResult:
        err.add(_remote.split_marker(pending)[1])
        return CommandResult(
            rc=rc,
            stdout=out.text(),
            stderr=err.text(),
            duration_s=time.monotonic() - started,
            timed_out=timed_out,
        )

    def _kill(self, group: _remote.Group | None) -> None:
        """Kill the command's session and process group on the host, over a fresh channel."""
        if group is None or not self._client.is_active():
            return
        try:
            chan = self._client.open_session(timeout=self._timeout)
            try:
                chan.exec_command(_remote.shell_line(_remote.killer_argv(
                    *group, self._spec.become, self._spec.become_user)))
                chan.shutdown_write()
                chan.status_event.wait(10.0)
            finally:
                chan.close()
        except (paramiko.SSHException, OSError, EOFError):
            pass  # the host-side `timeout` backstop still ends it

    def put(self, data: bytes, remote_path: str, mode: int = 0o644) -> None:
        if self._spec.become:
            # The become user made (and owns) the directory: SFTP would write as the login user.
            _remote.put_by_shell(self, data, remote_path, mode)
            return
        try:
            if self._sftp is None:
                # Our own channel, so that a host that stops answering times out here too.
                chan = self._session()
                if chan is None:
                    raise TransportError("timeout", f"{self.name}: no answer to an SFTP "
                                         f"request within {self._timeout:g} s")
                try:
                    chan.settimeout(max(60.0, self._timeout))
                    chan.invoke_subsystem("sftp")
                    self._sftp = paramiko.SFTPClient(chan)
                except BaseException:
                    chan.close()
                    raise
            with self._sftp.open(remote_path, "wb") as f:
                f.set_pipelined(True)
                f.write(data)
            self._sftp.chmod(remote_path, mode)
            return
        except OSError as exc:
            raise TransportError("error", f"{self.name}: cannot write {remote_path}: {exc}"
                                 ) from exc
        except (paramiko.SSHException, EOFError):
            pass  # no sftp subsystem: fall back to cat
        _remote.put_by_shell(self, data, remote_path, mode)

    def close(self) -> None:
        if self._sftp is not None:
            self._sftp.close()
            self._sftp = None
        self._client.close()
        if self._jump_key:
            _release_jumps(self._jump_key)
            self._jump_key = ()
