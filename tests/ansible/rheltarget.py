"""A Rocky Linux 9 target for the roles: the debootstrap tree with Debian's dnf, libdnf, rpm
and dnf-plugins-core (versionlock, config-manager) added, given Rocky's identity (/etc/os-release,
/etc/redhat-release and an rpm database whose rocky-release provides
system-release(releasever) = 9),
so Ansible's facts say os_family RedHat, pkg_mgr dnf, and ansible.builtin.dnf, `dnf module`,
`dnf versionlock` and `dnf config-manager` run for real against the rpm repositories of
tests/ansible/rpmgraph.py. Reached over SSH like the Debian targets (roletarget.start_sshd).
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import roletarget as tg
import rpmgraph

# What Debian 12 ships of the RHEL package stack (dnf 4.14, libdnf 0.69 with libmodulemd, rpm 4.18),
# and kmod (depmod, modinfo: what DKMS and the roles call; RHEL ships kmod too).
INCLUDE = [*tg.INCLUDE, "dnf", "python3-dnf", "python3-libdnf", "dnf-plugins-core", "rpm",
           "kmod"]

# Rocky 9.6's /etc/os-release (https://rockylinux.org/ release notes; fields as Ansible's
# distribution facts read them: ID, VERSION_ID, ID_LIKE).
OS_RELEASE = """NAME="Rocky Linux"
VERSION="9.6 (Blue Onyx)"
ID="rocky"
ID_LIKE="rhel centos fedora"
VERSION_ID="9.6"
PLATFORM_ID="platform:el9"
PRETTY_NAME="Rocky Linux 9.6 (Blue Onyx)"
"""
REDHAT_RELEASE = "Rocky Linux release 9.6 (Blue Onyx)\n"
# Rocky 8.10 (https://rockylinux.org/ release notes), the same fields.
OS_RELEASE_8 = """NAME="Rocky Linux"
VERSION="8.10 (Green Obsidian)"
ID="rocky"
ID_LIKE="rhel centos fedora"
VERSION_ID="8.10"
PLATFORM_ID="platform:el8"
PRETTY_NAME="Rocky Linux 8.10 (Green Obsidian)"
"""
REDHAT_RELEASE_8 = "Rocky Linux release 8.10 (Green Obsidian)\n"


def prepare(workdir: Path, addr: str, repos: rpmgraph.RpmRepos, key: Path) -> tg.Target:
    """Unpack the tree with dnf, make it Rocky 9, point its repos at the local mirror."""
    root = workdir / "root"
    root.mkdir(parents=True)
    tg.run(["tar", "-C", str(root), "--numeric-owner", "-xf", str(tg.rootfs_tarball(INCLUDE))])
    (root / "etc/apt/sources.list").write_text("")
    (root / "etc/os-release").unlink(missing_ok=True)
    (root / "usr/lib/os-release").write_text(OS_RELEASE_8 if repos.major == 8 else OS_RELEASE)
    (root / "etc/os-release").symlink_to("../usr/lib/os-release")
    (root / "etc/debian_version").unlink(missing_ok=True)
    for name in ("redhat-release", "rocky-release", "system-release"):
        (root / "etc" / name).write_text(REDHAT_RELEASE_8 if repos.major == 8 else REDHAT_RELEASE)
    # Debian's rpm keeps its database in ~/.rpmdb (it is not Debian's package manager); on RHEL
    # it is the system's: /var/lib/rpm.
    (root / "etc/rpm").mkdir(exist_ok=True)
    (root / "etc/rpm/macros").write_text("%_dbpath /var/lib/rpm\n")
    (root / "etc/yum.repos.d").mkdir(exist_ok=True)
    (root / "etc/yum.repos.d/rocky.repo").write_text(rpmgraph.rocky_repo_file(repos))
    (root / "etc/dnf/dnf.conf").write_text(
        "[main]\ngpgcheck=1\ninstallonly_limit=3\nclean_requirements_on_remove=True\n"
        "best=True\nskip_if_unavailable=False\nreposdir=/etc/yum.repos.d\n"
    )
    # dnf-plugins-core's "local" plugin is on in Debian; Rocky ships it separately, off.
    (root / "etc/dnf/plugins/local.conf").unlink(missing_ok=True)
    tg.run(["chroot", str(root), "rpm", "--initdb"])
    tg.run(["cp", str(key), str(root / "tmp/key.asc")])
    tg.run(["chroot", str(root), "rpm", "--import", "/tmp/key.asc"])
    # What every Rocky host has installed: its release package, and bash (/bin/sh, which the
    # DKMS package's scriptlets require).
    for name in ("rocky-release", "bash"):
        release = next(r for r in repos.rpms if r.name == name)
        pkg = f"{release.name}-{release.version}-{release.release}.{release.arch}.rpm"
        local = root / "tmp" / pkg
        tg.run(["cp", str(workdir / "mirror" / repos.dirs["baseos"] / "Packages" / pkg),
                str(local)])
        tg.run(["chroot", str(root), "rpm", "-i", "--nodeps", f"/tmp/{pkg}"])
    return tg.ssh_access(tg.Target(root=root, workdir=workdir, addr=addr))


# The loaded module's line of /proc/driver/nvidia/version (the NVRM line format of the fleet
# profiles, tests/fleet/profiles: a capture of a real host).
NVRM = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  %s  Release Build\\n"


def boot(t: tg.Target, log: Path, gpu: bool = False) -> None:
    """Power-cycle the target: its sshd (and with it its mount namespace: /dev, the loaded
    driver's /proc/driver) stops, and a new boot starts a new one. gpu: this boot has an NVIDIA
    GPU on its bus, so the kernel loads the nvidia module that is on disk for the running kernel
    (the PCI modalias autoload at boot: an inference), found as modprobe finds it, through the
    modules.dep DKMS's depmod wrote (modinfo -k); /proc/driver/nvidia/version then names its
    version. No module on disk: no /proc/driver/nvidia, as on a host that lost its driver."""
    t.stop()
    r = shlex.quote(str(t.root))
    load = (
        f'v=$(chroot {r} modinfo -k "$(uname -r)" -F version nvidia 2>/dev/null || true); '
        f'mount -t tmpfs -o mode=0555,size=1m gpufleet-driver {r}/proc/driver; '
        f'if [ -n "$v" ]; then mkdir {r}/proc/driver/nvidia; '
        f'printf {shlex.quote(NVRM)} "$v" >{r}/proc/driver/nvidia/version; fi; '
    ) if gpu else ""
    tg.start_sshd(t, log, boot=load)


def loaded_driver(t: tg.Target) -> str:
    """/proc/driver/nvidia/version as the target's current boot sees it ("" when absent)."""
    assert t.sshd is not None
    path = f"{t.root}/proc/driver/nvidia/version"
    out = subprocess.run(["nsenter", "-t", str(t.sshd.pid), "-m", "--", "cat", path],
                         capture_output=True, text=True, check=False)
    return out.stdout


def rpms(t: tg.Target) -> dict[str, str]:
    """Installed name -> epoch:version-release (epoch 0 shown as none), from the target's rpmdb."""
    out = t.chroot("rpm", "-qa", "--queryformat", "%{NAME} %{EPOCHNUM}:%{VERSION}-%{RELEASE}\n")
    found: dict[str, str] = {}
    for line in out.stdout.splitlines():
        name, evr = line.split()
        found[name] = evr.removeprefix("0:")
    return found


def locks(t: tg.Target) -> list[str]:
    """The versionlock list's entries, as dnf versionlock wrote them."""
    text = (t.root / "etc/dnf/plugins/versionlock.list").read_text()
    return [line for line in text.splitlines() if line and not line.startswith("#")]
