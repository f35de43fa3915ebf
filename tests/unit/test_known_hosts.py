"""known_hosts matching checked against OpenSSH itself (`ssh-keygen -F` is the oracle).

Issue 10 item 1: patterns, negations and [host]:port forms are matched as OpenSSH matches them;
unusable lines never break the file (item 3).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gpufleet.transport import known_hosts

PATTERNS = [
    "*.example.com",
    "*.example.com,!bad.example.com",
    "gpu?.example.com",
    "[10.0.0.*]:2222",
    "10.0.0.*",
    "GPU1.Example.COM",
    "!gpu1.example.com,*",
    "[gpu1.example.com]:22",
    "*",
]
NAMES = ["gpu1.example.com", "bad.example.com", "gpu12.example.com", "[10.0.0.5]:2222",
         "10.0.0.5", "[10.0.0.5]:22", "example.com", "[gpu1.example.com]:2222"]


@pytest.fixture(scope="module")
def key_line(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("kh") / "k"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return " ".join(path.with_suffix(".pub").read_text().split()[:2])


def _openssh_matches(file: Path, name: str) -> bool:
    r = subprocess.run(["ssh-keygen", "-F", name, "-f", str(file)], capture_output=True,
                       text=True, check=False)
    return r.returncode == 0 and "found" in r.stdout


@pytest.mark.parametrize("patterns", PATTERNS)
def test_patterns_match_as_openssh_matches_them(patterns: str, key_line: str,
                                                tmp_path: Path) -> None:
    file = tmp_path / "known_hosts"
    file.write_text(f"{patterns} {key_line}\n")
    (entry,) = known_hosts.parse(file.read_text())
    got = {name: entry.matches(name) for name in NAMES}
    want = {name: _openssh_matches(file, name) for name in NAMES}
    assert got == want


def test_hashed_file_from_ssh_keygen_matches(key_line: str, tmp_path: Path) -> None:
    file = tmp_path / "known_hosts"
    file.write_text(f"gpu1.example.com {key_line}\n[10.0.0.5]:2222 {key_line}\n")
    subprocess.run(["ssh-keygen", "-H", "-f", str(file)], check=True, capture_output=True)
    assert file.read_text().startswith("|1|")
    found = [known_hosts.find([str(file)], name).keys
             for name in ("gpu1.example.com", "[10.0.0.5]:2222", "10.0.0.5", "gpu2.example.com")]
    assert [len(k) for k in found] == [1, 1, 0, 0]


def test_unusable_lines_are_skipped_and_the_rest_kept(key_line: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    text = "\n".join([
        "# comment", "", "@cert-authority *.example.com " + key_line,
        "@unknown-marker host " + key_line, "host-only", "host ssh-ed25519 not-base64!",
        "host ssh-ed25519 AAAA", "host ssh-nonsense AAAAC3NzaC1lZDI1NTE5",
        "@revoked * " + key_line, "gpu1 " + key_line,
    ])
    entries = known_hosts.parse(text, "kh")
    assert [(e.patterns, e.marker) for e in entries] == [("*", "revoked"), ("gpu1", None)]
    assert "kh:3: @cert-authority" in capsys.readouterr().err
