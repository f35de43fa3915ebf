#!/usr/bin/python
# Copyright: gpufleet maintainers
# SPDX-License-Identifier: Apache-2.0
"""Ansible module: is an apt repository URI already configured by another source file?"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: apt_source_present
short_description: Find apt sources for a repository URI configured outside one file
description:
  - Lists the apt index targets of every configured source (C(sources.list), C(*.list) and deb822
    C(*.sources)) except one file, with C(apt-get indextargets), and reports those whose URI is the
    given one. apt refuses every operation when two sources name one URI with different
    C(Signed-By) values, so a role that finds the repository already configured (cuda-keyring,
    nvidia-container-toolkit.list, Docker's docker.sources) reuses it instead of adding its own.
  - Read-only; runs the same way in check mode.
version_added: "0.1.0"
author: gpufleet maintainers (!UNKNOWN)
options:
  uri:
    description: Repository URI; C($(ARCH)) is replaced with the dpkg architecture. A trailing C(/) is ignored.
    type: str
    required: true
  exclude:
    description: Source file left out (the calling role's own file).
    type: path
    required: true
"""

EXAMPLES = r"""
- name: Look for NVIDIA's CUDA repository set up by cuda-keyring
  gpufleet.gpu.apt_source_present:
    uri: https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/
    exclude: /etc/apt/sources.list.d/gpufleet-nvidia-driver.sources
  register: cuda_source
"""

RETURN = r"""
present:
  description: Whether another source already names the URI.
  type: bool
  returned: always
fetched:
  description: Whether apt has downloaded the index of every matching target (else an update is due).
  type: bool
  returned: always
targets:
  description: The matching index targets, as "URI SUITE COMPONENT".
  type: list
  elements: str
  returned: always
"""

import glob
import os
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "uri": {"type": "str", "required": True},
            "exclude": {"type": "path", "required": True},
        },
        supports_check_mode=True,
    )
    rc, arch, err = module.run_command(["dpkg", "--print-architecture"])
    if rc != 0:
        module.fail_json(msg=f"dpkg --print-architecture failed: {err}")
    wanted = module.params["uri"].replace("$(ARCH)", arch.strip()).rstrip("/")
    exclude = os.path.realpath(module.params["exclude"])
    parts = tempfile.mkdtemp(prefix="gpufleet-apt-")
    try:
        for path in sorted(glob.glob("/etc/apt/sources.list.d/*.list") + glob.glob("/etc/apt/sources.list.d/*.sources")):
            if os.path.realpath(path) != exclude:
                os.symlink(path, os.path.join(parts, os.path.basename(path)))
        rc, out, err = module.run_command(
            [
                "apt-get",
                "-o",
                f"Dir::Etc::SourceParts={parts}",
                "indextargets",
                "--no-release-info",
                "--format",
                "$(REPO_URI) $(RELEASE) $(COMPONENT) $(FILENAME)",
                "Identifier: Packages",
            ]
        )
    finally:
        shutil.rmtree(parts, ignore_errors=True)
    if rc != 0:
        module.fail_json(msg=f"apt-get indextargets failed (the host's apt sources are broken?): {err.strip()}")
    rows = [line.split(" ") for line in out.splitlines() if line.split(" ", 1)[0].rstrip("/") == wanted]
    # Flat repositories have no component: indextargets prints the placeholder itself.
    targets = sorted({" ".join(f for f in r[:3] if f and f != "$(COMPONENT)") for r in rows})
    fetched = bool(rows) and all(glob.glob(glob.escape(r[-1]) + "*") for r in rows)
    module.exit_json(changed=False, present=bool(targets), targets=targets, fetched=fetched)


if __name__ == "__main__":
    main()
