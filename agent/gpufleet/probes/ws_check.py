"""Inside one workspace container: what its Jupyter answers without a token, which uids run
Jupyter, and what its running sshd accepts (sshd -T). Prints one JSON object.

Shipped inside probe.sh (probe_script() puts this text there, shell-quoted), which runs it as
the workspace's own uid, never root: `docker exec --user UID:UID -w / ID python3 -I -c
"$ws_check" JUPYTER_PORT SSHD`. -I keeps the working directory (a tenant's volume, the image's
WORKDIR) and the environment off sys.path, so no planted json.py runs. The tenant controls
process titles, so a title only ever contributes arguments, and only that of a root process
(the kernel's Uid in /proc/PID/status, which no tenant sets); what runs is SSHD, the path the
role configured (container label). Needs only the image's python3: stdlib only, no syntax newer
than the oldest python3 an image may carry (hence typing.Dict). parse_workspace_checks
(containers.py) reads its output.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from typing import Any, Dict, List, Optional

SSHD_KEYS = ("passwordauthentication", "kbdinteractiveauthentication",
             "permitrootlogin", "permitemptypasswords", "port", "allowtcpforwarding")
# OpenSSH >= 8.2 titles its listener "sshd: /usr/sbin/sshd -f CFG [listener] 0 of 10-100
# startups" (sshd.c); older ones keep their argv.
LISTENER = re.compile(r"sshd: (/\S*sshd)(.*?) \[listener\]|(/\S*sshd)((?: \S+)*)$")
PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def _uid(pid: str) -> Optional[int]:
    with open("/proc/%s/status" % pid) as f:
        found = re.search(r"^Uid:\s+(\d+)", f.read(), re.M)
    return int(found.group(1)) if found else None


def _sshd_t(sshd: str, args: List[str]) -> Dict[str, Any]:
    """`SSHD -T` with the listener's own options. sshd -T loads a host key, and the real ones
    are root's: a throwaway key (made here, as this uid) stands in for them."""
    tmp = tempfile.mkdtemp()
    try:
        key = os.path.join(tmp, "k")
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key],
                       capture_output=True, timeout=10, check=False, env={"PATH": PATH})
        t = subprocess.run([sshd, "-T", "-h", key, *args], capture_output=True, text=True,
                           timeout=5, check=False, env={"PATH": PATH})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"sshd_T": {k: v for k, _, v in (ln.partition(" ") for ln in t.stdout.splitlines())
                       if k in SSHD_KEYS}, "sshd_T_rc": t.returncode}


def check(argv: List[str]) -> Dict[str, Any]:
    r: Dict[str, Any] = {"uid": os.getuid()}
    jp = argv[1] if len(argv) > 1 else ""
    sshd = argv[2] if len(argv) > 2 and argv[2].startswith("/") else "/usr/sbin/sshd"
    if jp.isdigit():
        try:
            with urllib.request.urlopen(  # noqa: S310  (a fixed http://127.0.0.1 URL)
                    "http://127.0.0.1:%s/api/contents" % jp, timeout=3) as x:
                r["jupyter_status"] = x.status
        except urllib.error.HTTPError as e:
            r["jupyter_status"] = e.code
        except Exception as e:  # any failure to answer is the finding's evidence
            r["jupyter_error"] = type(e).__name__
    listener: Optional[List[str]] = None
    for pid in sorted(filter(str.isdigit, os.listdir("/proc")), key=int):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            uid = _uid(pid)
        except Exception:  # noqa: S112  (a process that ended meanwhile is skipped)
            continue
        if uid is None:
            continue
        # This process's own command line holds this text, "jupyter" included.
        if "jupyter" in cmd and pid != str(os.getpid()):
            r.setdefault("jupyter_uids", []).append(uid)
        m = LISTENER.match(cmd)
        if m and uid == 0 and listener is None:
            listener = [a for a in (m.group(2) or m.group(4) or "").split()
                        if a not in ("-D", "-d", "-e")]
    if listener is not None:
        r.update(_sshd_t(sshd, listener))
    return r


if __name__ == "__main__":
    print(json.dumps(check(sys.argv), sort_keys=True))
