"""SSH transport against real sshd daemons: host keys, auth, failures, timeouts, jumps, config."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sshdlab import PORT, Lab, keygen, start_sshd

from gpufleet.model import HostResult, HostSpec
from gpufleet.sweep.fanout import fan_out
from gpufleet.transport import TransportError, connect, interrupt_all, ssh
from gpufleet.transport._remote import CANCEL


def spec(lab: Lab, **kw: object) -> HostSpec:
    base: dict[str, object] = {
        "name": "gpu-a", "address": lab.target.address, "port": PORT, "user": "root",
        "key_files": (str(lab.client_key),),
    }
    base.update(kw)
    return HostSpec(**base)  # type: ignore[arg-type]


def failure(s: HostSpec, **kw: object) -> TransportError:
    with pytest.raises(TransportError) as info:
        connect(s, connect_timeout=5, **kw).close()  # type: ignore[arg-type]
    return info.value


def fingerprint(pub: Path) -> str:
    out = subprocess.run(["ssh-keygen", "-l", "-f", str(pub)], capture_output=True, text=True,
                         check=True).stdout
    return out.split()[1]  # "SHA256:…"


def test_runs_a_command_and_returns_streams_and_status(lab: Lab) -> None:
    lab.known_hosts(lab.target)
    with connect(spec(lab)) as t:
        r = t.run(["sh", "-c", 'echo out; echo err >&2; exit 3'], timeout=10)
        quoted = t.run(["printf", "%s|", "a b", "$HOME", "'q'"], timeout=10)
        fed = t.run(["cat"], timeout=10, stdin=b"from stdin")
        env = t.run(["sh", "-c", 'echo "$GF_X"'], timeout=10, env={"GF_X": "a;b"})
    assert (r.rc, r.stdout, r.stderr, r.timed_out) == (3, "out\n", "err\n", False)
    assert quoted.stdout == "a b|$HOME|'q'|"
    assert fed.stdout == "from stdin"
    assert env.stdout == "a;b\n"


def test_unknown_host_key_is_refused_with_its_fingerprint(lab: Lab) -> None:
    err = failure(spec(lab))
    # Its own status (issue 37.3): nothing is listed, so there is nothing to ssh-keygen -R.
    assert err.status == "hostkey_unknown"
    assert "not yet known" in err.message and "--accept-new-host-keys" in err.message
    assert "ssh-keygen -R" not in err.message
    assert fingerprint(lab.target.host_key.with_suffix(".pub")) in err.message
    assert not (lab.home / ".ssh" / "known_hosts").exists()


def test_accept_new_records_the_key_and_it_is_then_trusted(
        lab: Lab, capsys: pytest.CaptureFixture[str]) -> None:
    connect(spec(lab), accept_new_host_keys=True).close()
    known = lab.home / ".ssh" / "known_hosts"
    recorded = known.read_text()
    assert recorded.split()[:2] == lab.target.host_key_line.split()[:2]
    # One stderr line per key recorded, worded as OpenSSH's (known_hosts.recorded_line cites it),
    # with the fingerprint and the file.
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "Permanently added" in ln]
    assert lines == [
        f"gpufleet: Warning: Permanently added '[{lab.target.address}]:{PORT}' (ED25519 "
        f"{fingerprint(lab.target.host_key.with_suffix('.pub'))}) to the list of known hosts "
        f"({known})."]
    connect(spec(lab)).close()  # now known: no flag needed
    assert "Permanently added" not in capsys.readouterr().err


def test_changed_host_key_is_refused_even_with_accept_new(lab: Lab, tmp_path: Path) -> None:
    other = keygen(tmp_path / "other_host_key")
    kind, blob = other.with_suffix(".pub").read_text().split()[:2]
    known = lab.home / ".ssh" / "known_hosts"
    known.write_text(f"[{lab.target.address}]:{PORT} {kind} {blob}\n")
    err = failure(spec(lab), accept_new_host_keys=True)
    assert err.status == "hostkey_mismatch"
    assert "changed" in err.message
    assert fingerprint(other.with_suffix(".pub")) in err.message  # expected
    assert fingerprint(lab.target.host_key.with_suffix(".pub")) in err.message  # got
    assert known.read_text().count("\n") == 1  # nothing recorded


def test_known_hosts_file_from_ssh_args_is_used(lab: Lab, tmp_path: Path) -> None:
    extra = tmp_path / "fleet_known_hosts"
    extra.write_text(lab.target.host_key_line)
    connect(spec(lab, known_hosts_files=(str(extra),))).close()


def test_key_not_authorized_is_auth_failed(lab: Lab) -> None:
    lab.known_hosts(lab.target)
    err = failure(spec(lab, key_files=(str(lab.stranger_key),)))
    assert err.status == "auth_failed"
    assert "root@gpu-a" in err.message and str(lab.stranger_key) in err.message


def test_closed_port_is_unreachable(lab: Lab) -> None:
    err = failure(spec(lab, address="127.0.0.202"))
    assert err.status == "unreachable"
    assert "connection refused" in err.message


def test_unresolvable_name_says_so(lab: Lab) -> None:
    err = failure(spec(lab, address="no-such-host.invalid"))
    assert err.status == "unreachable"
    assert "does not resolve" in err.message


def _pgrep(pattern: str) -> list[str]:
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout
    return out.split()


def test_timeout_kills_the_whole_process_group_on_the_host(lab: Lab) -> None:
    lab.known_hosts(lab.target)
    with connect(spec(lab)) as t:
        started = time.monotonic()
        # A parent and a background child: both must die, not only the leader.
        r = t.run(["sh", "-c", "sleep 321.5 & sleep 321.6; echo never"], timeout=1.5)
        elapsed = time.monotonic() - started
        assert r.timed_out and r.rc is None
        assert elapsed < 60  # the sleeps last 321 s
        deadline = time.monotonic() + 30  # polled: generous for a loaded machine
        while _pgrep("sleep 321.[56]") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _pgrep("sleep 321.[56]") == []
        # A tool under timeout(1) has a process group of its own; it dies with the session.
        r = t.run(["sh", "-c", "timeout 300 sleep 321.7; echo never"], timeout=1.5)
        assert r.timed_out
        deadline = time.monotonic() + 30  # polled: generous for a loaded machine
        while _pgrep("sleep 321.7") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _pgrep("sleep 321.7") == []
        # The connection is still usable after a timeout.
        assert t.run(["true"], timeout=5).rc == 0


@pytest.mark.slow
def test_dropped_connection_still_ends_the_command_on_the_host(lab: Lab) -> None:
    lab.known_hosts(lab.target)
    t = connect(spec(lab))
    result: list[object] = []
    worker = threading.Thread(
        target=lambda: result.append(_safe_run(t, ["sleep", "322.5"], 1.0)), daemon=True)
    worker.start()
    _until_running("sleep 322.5")
    t._client.close()  # type: ignore[attr-defined]  # the controller vanishes mid-command
    worker.join(30)
    # No kill could be sent; the host-side deadline (timeout + 5 s) ends it.
    deadline = time.monotonic() + 60  # polled
    while _pgrep("sleep 322.5") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _pgrep("sleep 322.5") == []


def _until_running(pattern: str) -> None:
    """Waits (polled, generous for a loaded machine) until the command runs on the host."""
    deadline = time.monotonic() + 60
    while not _pgrep(pattern):
        assert time.monotonic() < deadline, f"{pattern!r} never started on the host"
        time.sleep(0.1)


def _safe_run(t: object, argv: list[str], timeout: float) -> object:
    try:
        return t.run(argv, timeout=timeout)  # type: ignore[attr-defined]
    except TransportError as exc:
        return exc


def test_put_writes_file_with_mode(lab: Lab, tmp_path: Path) -> None:
    lab.known_hosts(lab.target)
    dest = tmp_path / "shipped.py"
    with connect(spec(lab)) as t:
        t.put(b"print('hi')\n", str(dest), 0o750)
    assert dest.read_bytes() == b"print('hi')\n"
    assert dest.stat().st_mode & 0o777 == 0o750


def test_become_runs_through_sudo(lab: Lab) -> None:
    lab.known_hosts(lab.target)
    with connect(spec(lab, become=True, become_user="nobody")) as t:
        r = t.run(["id", "-un"], timeout=10)
        timed = t.run(["sleep", "323.5"], timeout=1)
    assert (r.rc, r.stdout.strip()) == (0, "nobody")
    assert timed.timed_out
    deadline = time.monotonic() + 30  # polled: generous for a loaded machine
    while _pgrep("sleep 323.5") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _pgrep("sleep 323.5") == []


def test_proxy_jump_goes_through_the_jump_host(lab: Lab) -> None:
    lab.known_hosts(lab.target, lab.jump)
    # The jump host resolves its own settings from ~/.ssh/config, as OpenSSH does.
    (lab.home / ".ssh" / "config").write_text(
        f"Host bastion\n  HostName {lab.jump.address}\n  Port {PORT}\n  User root\n"
        f"  IdentityFile {lab.client_key}\n")
    mark = lab.jump.log.read_text().count("direct-tcpip")
    with connect(spec(lab, proxy_jump="bastion")) as t:
        assert t.run(["echo", "via"], timeout=10).stdout == "via\n"
    assert lab.jump.log.read_text().count("direct-tcpip") > mark


def test_jump_host_failure_names_the_jump(lab: Lab) -> None:
    lab.known_hosts(lab.target)
    err = failure(spec(lab, proxy_jump=f"root@127.0.0.202:{PORT}"))
    assert err.status == "unreachable"
    assert "via jump host" in err.message and "refused" in err.message


def test_ssh_config_supplies_hostname_port_user_key(lab: Lab) -> None:
    lab.known_hosts(lab.target)
    (lab.home / ".ssh" / "config").write_text(
        f"Host gpu-alias\n  HostName {lab.target.address}\n  Port {PORT}\n  User root\n"
        f"  IdentityFile {lab.client_key}\n")
    bare = HostSpec(name="gpu-alias", address="gpu-alias")
    with connect(bare, connect_timeout=5) as t:
        assert t.run(["whoami"], timeout=10).stdout == "root\n"


def test_inventory_values_override_ssh_config(lab: Lab) -> None:
    lab.known_hosts(lab.target)
    (lab.home / ".ssh" / "config").write_text(
        f"Host {lab.target.address}\n  Port 1\n  IdentityFile {lab.stranger_key}\n")
    connect(spec(lab)).close()  # port and key from the spec win


def test_interrupt_kills_the_running_command_and_returns_at_once(lab: Lab) -> None:
    lab.known_hosts(lab.target)
    t = connect(spec(lab))
    outcome: list[object] = []
    worker = threading.Thread(
        target=lambda: outcome.append(_safe_run(t, ["sleep", "324.5"], 60.0)), daemon=True)
    try:
        worker.start()
        _until_running("sleep 324.5")
        interrupt_all()
        worker.join(30)
        assert not worker.is_alive()
        assert isinstance(outcome[0], TransportError) and "interrupted" in outcome[0].message
        deadline = time.monotonic() + 30  # polled: generous for a loaded machine
        while _pgrep("sleep 324.5") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _pgrep("sleep 324.5") == []
        with pytest.raises(TransportError, match="interrupted before connecting"):
            connect(spec(lab))
    finally:
        CANCEL.clear()
        t.close()


@pytest.fixture()
def agent_with_client_key(lab: Lab, tmp_path: Path,
                          monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    sock = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30  # polled: generous for a loaded machine
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        subprocess.run(["ssh-add", "-q", str(lab.client_key)], check=True,
                       env={**os.environ, "SSH_AUTH_SOCK": str(sock)})
        yield sock
    finally:
        agent.terminate()
        agent.wait()


def test_keys_come_from_ssh_agent(lab: Lab, agent_with_client_key: Path) -> None:
    lab.known_hosts(lab.target)
    # No identity file anywhere: only the agent holds the authorized key.
    with connect(spec(lab, key_files=())) as t:
        assert t.run(["true"], timeout=10).rc == 0


def test_identities_only_limits_the_agent_to_the_identity_files(
    lab: Lab, agent_with_client_key: Path, tmp_path: Path
) -> None:
    lab.known_hosts(lab.target)
    # An encrypted copy of the authorized key: the agent signs for it.
    locked = tmp_path / "id_locked"
    shutil.copy(lab.client_key, locked)
    shutil.copy(lab.client_key.with_suffix(".pub"), locked.with_suffix(".pub"))
    locked.chmod(0o600)
    subprocess.run(["ssh-keygen", "-q", "-p", "-N", "pass-phrase", "-P", "", "-f", str(locked)],
                   check=True)
    (lab.home / ".ssh" / "config").write_text("Host *\n  IdentitiesOnly yes\n")
    with connect(spec(lab, key_files=(str(locked),))) as t:
        assert t.run(["true"], timeout=10).rc == 0
    # The agent's key is not offered for an identity file it does not belong to.
    err = failure(spec(lab, key_files=(str(lab.stranger_key),)))
    assert err.status == "auth_failed" and "agent:" not in err.message


def test_encrypted_key_without_agent_says_so(lab: Lab, tmp_path: Path) -> None:
    lab.known_hosts(lab.target)
    locked = tmp_path / "id_locked"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "secret-pass", "-f", str(locked)],
                   check=True)
    err = failure(spec(lab, key_files=(str(locked),)))
    assert err.status == "auth_failed"
    assert "encrypted (load it into ssh-agent)" in err.message
    assert "secret-pass" not in err.message


def test_hashed_known_hosts_entries_are_matched(lab: Lab) -> None:
    known = lab.known_hosts(lab.target)
    subprocess.run(["ssh-keygen", "-H", "-f", str(known)], check=True, capture_output=True)
    assert lab.target.address not in known.read_text()  # really hashed
    connect(spec(lab)).close()


def test_proxy_jump_from_ssh_config(lab: Lab) -> None:
    lab.known_hosts(lab.target, lab.jump)
    (lab.home / ".ssh" / "config").write_text(
        f"Host {lab.target.address}\n  ProxyJump root@{lab.jump.address}:{PORT}\n"
        f"Host *\n  IdentityFile {lab.client_key}\n")
    mark = lab.jump.log.read_text().count("direct-tcpip")
    with connect(spec(lab, key_files=())) as t:
        assert t.run(["true"], timeout=10).rc == 0
    assert lab.jump.log.read_text().count("direct-tcpip") > mark


def test_loaded_keys_are_cached_across_hosts(lab: Lab, tmp_path: Path) -> None:
    rsa = keygen(tmp_path / "id_rsa", "rsa")
    first = ssh._cached(str(rsa), ssh._load_key)
    assert first is ssh._cached(str(rsa), ssh._load_key)  # parsed once, reused


def test_hosts_behind_one_bastion_share_one_connection_to_it(lab: Lab) -> None:
    lab.known_hosts(lab.target, lab.jump)
    jump = f"root@{lab.jump.address}:{PORT}"
    (lab.home / ".ssh" / "config").write_text(f"Host *\n  IdentityFile {lab.client_key}\n")
    specs = [spec(lab, name=f"n{i}", proxy_jump=jump) for i in range(4)]

    def work(s: HostSpec) -> HostResult:
        with connect(s) as t:
            r = t.run(["sh", "-c", "sleep 0.5; echo ok"], timeout=10)
        return HostResult(name=s.name, status="ok", error=r.stdout)

    before = lab.jump.log.read_text().count("Accepted publickey")
    results = fan_out(specs, work, forks=4, progress=False)
    assert [r.error for r in results.values()] == ["ok\n"] * 4
    assert lab.jump.log.read_text().count("Accepted publickey") == before + 1
    assert ssh._jumps[("root", lab.jump.address, PORT)].transport is None  # closed after use


def test_silent_server_times_out_at_the_connect_timeout(lab: Lab) -> None:
    server = socket.create_server(("127.0.0.203", PORT))
    accepted: list[socket.socket] = []
    threading.Thread(target=lambda: accepted.append(server.accept()[0]), daemon=True).start()
    try:
        started = time.monotonic()
        with pytest.raises(TransportError) as info:
            connect(spec(lab, address="127.0.0.203"), connect_timeout=1.5)
        assert 1.0 < time.monotonic() - started < 60  # the silent server never answers
        assert info.value.status == "unreachable"
        assert "SSH handshake failed" in info.value.message
    finally:
        for s in accepted:
            s.close()
        server.close()


@pytest.mark.parametrize(
    ("hop", "parsed"),
    [
        ("bastion", (None, "bastion", None)),
        ("ops@bastion:2222", ("ops", "bastion", 2222)),
        ("ssh://ops@[fd00::1]:2200", ("ops", "fd00::1", 2200)),
        ("fd00::1", (None, "fd00::1", None)),
    ],
)
def test_proxy_jump_spellings(hop: str, parsed: tuple[str | None, str, int | None]) -> None:
    assert ssh._parse_jump(hop) == parsed


def test_bad_proxy_jump_is_an_error_not_a_crash() -> None:
    with pytest.raises(TransportError, match="cannot read ProxyJump 'bastion:ssh'"):
        ssh._parse_jump("bastion:ssh")


def test_accept_new_records_a_key_once_for_many_names_of_one_host(lab: Lab) -> None:
    specs = [spec(lab, name=f"alias{i}") for i in range(4)]

    def work(s: HostSpec) -> HostResult:
        connect(s, accept_new_host_keys=True).close()
        return HostResult(name=s.name, status="ok")

    results = fan_out(specs, work, forks=4, progress=False)
    assert {r.status for r in results.values()} == {"ok"}
    lines = (lab.home / ".ssh" / "known_hosts").read_text().splitlines()
    assert len(lines) == 1


def test_put_without_an_sftp_subsystem_falls_back_to_cat(lab: Lab, tmp_path: Path) -> None:
    server = start_sshd(tmp_path / "nosftp", "127.0.0.204", lab.root / "authorized_keys",
                        sftp=False)
    try:
        lab.known_hosts(server)
        dest = tmp_path / "shipped.sh"
        with connect(spec(lab, address="127.0.0.204")) as t:
            t.put(b"echo hi\n", str(dest), 0o700)
        assert dest.read_bytes() == b"echo hi\n"
        assert dest.stat().st_mode & 0o777 == 0o700
    finally:
        server.stop()


def _descendants(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    kids = [int(p) for p in out.split()]
    return kids + [d for k in kids for d in _descendants(k)]


def test_a_host_that_stops_answering_times_out_instead_of_hanging(lab: Lab) -> None:
    lab.known_hosts(lab.target)
    t = connect(spec(lab))
    frozen = _descendants(lab.target.proc.pid)  # this connection's sshd processes
    assert frozen
    try:
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        started = time.monotonic()
        r = t.run(["true"], timeout=1.5)
        assert r.timed_out and r.rc is None
        assert time.monotonic() - started < 60  # the stopped sshd never answers
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
        t.close()
