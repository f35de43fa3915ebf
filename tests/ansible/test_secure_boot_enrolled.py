"""Issue 23 M6, the enrolled-key path: UEFI Secure Boot on and `mokutil --test-key` reporting the
DKMS signing key enrolled (exit 1, "... is already enrolled", as lcp/mokutil's test_key() does) ->
the nvidia_driver role's preflight lets the install proceed; the same key not enrolled -> refused.
The role's own check (tasks/secure_boot.yml) runs on the controller through
playbooks/render_secure_boot.yml, with the mokutil stand-in (tests/ansible/standin/mokutil) first
on PATH; the other cases (off, no UEFI, no key) are test_ansible_render.py's."""

from __future__ import annotations

import json
import os
from pathlib import Path

from conftest import ansible_env, run_playbook

HERE = Path(__file__).resolve().parent
SECURE_BOOT = HERE / "playbooks" / "render_secure_boot.yml"
SB_ON = b"\x06\x00\x00\x00\x01"  # attributes NV|BS|RT, then 1 (docs.kernel.org efivarfs.html)


def test_secure_boot_with_the_dkms_key_enrolled_proceeds(tmp_path: Path) -> None:
    efivar = tmp_path / "SecureBoot"
    efivar.write_bytes(SB_ON)
    hosts = {}
    for case in ("enrolled", "not-enrolled"):
        cert = tmp_path / f"{case}-MOK.der"
        cert.write_bytes(b"0\x82")
        hosts[case] = {"ansible_connection": "local", "render_efivar": str(efivar),
                       "render_certs": [str(tmp_path / "absent.der"), str(cert)]}
    (tmp_path / "enrolled.list").write_text(f"{tmp_path}/enrolled-MOK.der\n")
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"all": {"hosts": hosts}}))
    env = ansible_env() | {"PATH": f"{HERE / 'standin'}{os.pathsep}{ansible_env()['PATH']}",
                           "GPUFLEET_MOK_ENROLLED": str(tmp_path / "enrolled.list")}
    res = run_playbook(SECURE_BOOT, inventory, tmp_path, "secure-boot-enrolled", env=env)
    assert res.host("enrolled")["failed"] == 0, res.tail()
    assert "SECURE BOOT CHECK PASSED enrolled" in res.flat, res.tail()
    assert res.host("not-enrolled")["failed"] == 1, res.tail()
    assert (f"the DKMS signing key {tmp_path}/not-enrolled-MOK.der is not known to be enrolled "
            f"(mokutil --test-key: {tmp_path}/not-enrolled-MOK.der is not enrolled)") in res.flat, \
        res.tail()
