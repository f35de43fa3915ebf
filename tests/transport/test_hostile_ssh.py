"""Hostile known_hosts files and odd setups against real sshd (issue 10 items 1, 2, 3, 5, 15).

Server 127.0.0.200 (target) and 127.0.0.201 (jump) from the sshd lab; every test has a fresh HOME.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import dsa
from sshdlab import PORT, Lab, keygen
from test_ssh import failure, fingerprint, spec

from gpufleet.inventory import load_inventory
from gpufleet.model import HostSpec
from gpufleet.transport import connect, known_hosts, ssh
from gpufleet.transport.capture import HEAD_BYTES, TAIL_BYTES
from gpufleet.transport.local import LocalTransport


def _key_fields(pub: Path) -> str:
    return " ".join(pub.read_text().split()[:2])


def _other_key(tmp_path: Path, name: str = "other_host_key") -> Path:
    return keygen(tmp_path / name).with_suffix(".pub")


def _target_key(lab: Lab) -> str:
    return _key_fields(lab.target.host_key.with_suffix(".pub"))


# --------------------------------------------------------------------------- 1: patterns


def test_1_wildcard_entry_with_another_key_is_a_changed_key(lab: Lab, tmp_path: Path) -> None:
    other = _other_key(tmp_path)
    known = lab.home / ".ssh" / "known_hosts"
    known.write_text(f"[127.0.0.*]:{PORT} {_key_fields(other)}\n")
    err = failure(spec(lab), accept_new_host_keys=True)
    assert err.status == "hostkey_mismatch"
    assert "changed" in err.message
    assert fingerprint(other) in err.message
    assert known.read_text().count("\n") == 1  # nothing appended


def test_1_wildcard_and_hashed_entries_vouch_for_the_host(lab: Lab) -> None:
    known = lab.home / ".ssh" / "known_hosts"
    known.write_text(f"[127.0.0.2?0]:{PORT},gpu-*.example {_target_key(lab)}\n")
    connect(spec(lab), connect_timeout=5).close()
    salt = b"0123456789abcdef0123"
    digest = hmac.new(salt, f"[{lab.target.address}]:{PORT}".encode(), hashlib.sha1).digest()
    hashed = f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"
    known.write_text(f"{hashed} {_target_key(lab)}\n")
    connect(spec(lab), connect_timeout=5).close()


def test_1_negated_pattern_excludes_the_host(lab: Lab, tmp_path: Path) -> None:
    other = _other_key(tmp_path)
    known = lab.home / ".ssh" / "known_hosts"
    # The other key is pinned for every 127.0.0.* host but this one: this one is unknown.
    known.write_text(f"[127.0.0.*]:{PORT},![{lab.target.address}]:{PORT} {_key_fields(other)}\n")
    err = failure(spec(lab))
    assert err.status == "hostkey_unknown" and "not yet known" in err.message


def test_1_port_must_match_the_bracketed_form(lab: Lab, tmp_path: Path) -> None:
    other = _other_key(tmp_path)
    known = lab.home / ".ssh" / "known_hosts"
    # A bare-name entry is for port 22: on port 2222 the host is unknown, not changed.
    known.write_text(f"{lab.target.address} {_key_fields(other)}\n")
    err = failure(spec(lab))
    assert err.status == "hostkey_unknown" and "not yet known" in err.message


# --------------------------------------------------------------------------- 4: first -o wins


def test_4_yes_then_no_stays_strict_end_to_end(lab: Lab, tmp_path: Path) -> None:
    inv = tmp_path / "hosts.ini"
    inv.write_text(
        f"gpu-a ansible_host={lab.target.address} ansible_port={PORT} ansible_user=root "
        f"ansible_ssh_private_key_file={lab.client_key} ansible_ssh_common_args="
        "'-o StrictHostKeyChecking=yes -o StrictHostKeyChecking=no'\n")
    err = failure(load_inventory([str(inv)])[0])
    assert err.status == "hostkey_unknown" and "not yet known" in err.message
    assert not (lab.home / ".ssh" / "known_hosts").exists()


# --------------------------------------------------------------------------- 2: jump hosts


def test_2_jump_host_is_checked_strictly_when_the_destination_is_relaxed(
        lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    """-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null is for the destination."""
    # Our own bastion table: a failed hop is remembered for a while, for this test only.
    monkeypatch.setattr(ssh, "_jumps", {})
    (lab.home / ".ssh" / "config").write_text(  # the bastion's own settings: none relaxed
        f"Host bastion\n  HostName {lab.jump.address}\n  Port {PORT}\n  User root\n"
        f"  IdentityFile {lab.client_key}\n")
    s = spec(lab, proxy_jump="bastion", strict_host_key_checking=False,
             known_hosts_files=("/dev/null",))
    err = failure(s)
    assert err.status == "hostkey_unknown"
    assert "jump host" in err.message and "not yet known" in err.message
    assert not (lab.home / ".ssh" / "known_hosts").exists()  # nothing recorded for the bastion
    assert "127.0.0.201" in err.message
    # Once the bastion is known, the relaxed destination behind it connects.
    lab.known_hosts(lab.jump)
    monkeypatch.setattr(ssh, "_jumps", {})
    with connect(s, connect_timeout=5) as t:
        assert t.run(["true"], timeout=10).rc == 0


# --------------------------------------------------------------------------- 3: markers


def test_3_cert_authority_line_is_skipped_not_fatal(lab: Lab, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    ca = _other_key(tmp_path, "ca_key")
    known = lab.home / ".ssh" / "known_hosts"
    known.write_text(f"@cert-authority *.example.com {_key_fields(ca)}\n"
                     + lab.target.host_key_line)
    connect(spec(lab), connect_timeout=5).close()
    known_hosts._warned.clear()
    connect(spec(lab), connect_timeout=5).close()
    connect(spec(lab), connect_timeout=5).close()
    assert capsys.readouterr().err.count("@cert-authority") <= 1  # a one-time warning


def test_3_revoked_key_is_refused_even_if_listed(lab: Lab) -> None:
    known = lab.home / ".ssh" / "known_hosts"
    known.write_text(lab.target.host_key_line + f"@revoked * {_target_key(lab)}\n")
    err = failure(spec(lab), accept_new_host_keys=True)
    assert err.status == "hostkey_mismatch"
    assert "revoked" in err.message
    assert fingerprint(lab.target.host_key.with_suffix(".pub")) in err.message


# --------------------------------------------------------------------------- 5: keys


def test_5_unsupported_identity_file_is_skipped_for_the_next(lab: Lab, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]
                                                              ) -> None:
    legacy = tmp_path / "id_dsa"
    legacy.write_bytes(dsa.generate_private_key(1024).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption()))
    lab.known_hosts(lab.target)
    with connect(spec(lab, key_files=(str(legacy), str(lab.client_key))),
                 connect_timeout=5) as t:
        assert t.run(["true"], timeout=10).rc == 0
    assert "id_dsa" in capsys.readouterr().err  # said so


def test_5_any_listed_key_of_a_type_is_accepted(lab: Lab, tmp_path: Path) -> None:
    other = _other_key(tmp_path)  # ed25519 too: two keys of one type for one host
    name = f"[{lab.target.address}]:{PORT}"
    (lab.home / ".ssh" / "known_hosts").write_text(
        f"{name} {_key_fields(other)}\n{name} {_target_key(lab)}\n")
    connect(spec(lab), connect_timeout=5).close()


# --------------------------------------------------------------------------- 15: output caps


_FLOOD = "head -c 20000000 /dev/zero | tr '\\0' x; echo END"


def _assert_capped(stdout: str) -> None:
    assert len(stdout) < HEAD_BYTES + TAIL_BYTES + 1024
    assert stdout.startswith("xxxx") and stdout.rstrip().endswith("END")  # head and tail kept
    cut = 20000004 - HEAD_BYTES - TAIL_BYTES
    assert f"{cut} bytes of output cut" in stdout


def test_15_ssh_output_is_capped_keeping_head_and_tail(lab: Lab) -> None:
    lab.known_hosts(lab.target)
    with connect(spec(lab), connect_timeout=5) as t:
        r = t.run(["sh", "-c", _FLOOD + "; echo err >&2"], timeout=60)
    assert r.rc == 0 and r.stderr == "err\n"
    _assert_capped(r.stdout)


def test_15_local_output_is_capped_keeping_head_and_tail() -> None:
    t = LocalTransport(HostSpec(name="local", address="localhost", connection="local"))
    r = t.run(["sh", "-c", _FLOOD], timeout=60, stdin=b"ignored" * 100000)
    assert r.rc == 0, r.stderr
    _assert_capped(r.stdout)
    fed = t.run([sys.executable, "-c", "import sys; print(len(sys.stdin.buffer.read()))"],
                timeout=60, stdin=b"y" * (3 << 20))
    assert fed.stdout == f"{3 << 20}\n"
