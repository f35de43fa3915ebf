"""Inside one workspace container: what its Jupyter answers without a token, which uids run
Jupyter, and what its running sshd accepts (sshd -T). Prints one JSON object.

Shipped inside probe.sh (probe_script() puts this text there, shell-quoted, and the probe runs
`docker exec ID python3 -c "$ws_check" JUPYTER_PORT`), so it needs only the image's python3:
stdlib only, no syntax newer than the oldest python3 an image may carry (hence typing.Dict).
parse_workspace_checks (containers.py) reads its output.
"""

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Any, Dict, List

SSHD_KEYS = ("passwordauthentication", "kbdinteractiveauthentication",
             "permitrootlogin", "permitemptypasswords", "port")


def check(argv: List[str]) -> Dict[str, Any]:
    r: Dict[str, Any] = {}
    jp = argv[1] if len(argv) > 1 else ""
    if jp.isdigit():
        try:
            with urllib.request.urlopen(  # noqa: S310  (a fixed http://127.0.0.1 URL)
                    "http://127.0.0.1:%s/api/contents" % jp, timeout=3) as x:
                r["jupyter_status"] = x.status
        except urllib.error.HTTPError as e:
            r["jupyter_status"] = e.code
        except Exception as e:  # any failure to answer is the finding's evidence
            r["jupyter_error"] = type(e).__name__
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode().strip()
            with open("/proc/%s/status" % pid) as f:
                found = re.search(r"^Uid:\s+(\d+)", f.read(), re.M)
            if found is None:
                continue
            uid = int(found.group(1))
        except Exception:  # noqa: S112  (a process that ended meanwhile is skipped)
            continue
        # This process's own command line holds this text, "jupyter" included.
        if "jupyter" in cmd and pid != str(os.getpid()):
            r.setdefault("jupyter_uids", []).append(uid)
        m = re.match(r"sshd: (/\S*sshd)(.*?) \[listener\]", cmd)
        if m and "sshd_T" not in r:
            args = [m.group(1), "-T"] + [a for a in m.group(2).split()
                                         if a not in ("-D", "-d", "-e")]
            t = subprocess.run(args, capture_output=True, text=True, timeout=5, check=False)
            r["sshd_T"] = {k: v for k, _, v in (ln.partition(" ") for ln in t.stdout.splitlines())
                           if k in SSHD_KEYS}
            r["sshd_T_rc"] = t.returncode
    return r


if __name__ == "__main__":
    print(json.dumps(check(sys.argv), sort_keys=True))
