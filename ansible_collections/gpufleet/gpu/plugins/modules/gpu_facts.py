# Copyright: gpufleet maintainers
# SPDX-License-Identifier: Apache-2.0
"""gpufleet.gpu.gpu_facts: the documentation and the argument spec; the work is done by the action
plugin of the same name on the controller, so this file only runs if that plugin is bypassed."""

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_facts
short_description: GPU host facts from gpufleet's probe (the same JSON as gpufleet facts)
description:
  - Sends gpufleet's POSIX sh probe to the host over the task's connection (no Python needed on
    the host) and parses its output where Ansible runs, with gpufleet's own parser.
  - Returns the facts as C(ansible_facts.gpufleet), identical to C(gpufleet facts --format json)
    for the same host, and the host's desired-state variables as C(gpufleet_expect).
  - Render a run's results into the gpufleet report with the C(gpufleet.gpu.gpufleet_report)
    callback or C(gpufleet ansible-report).
  - Requires the gpufleet Python package on the controller or in the execution environment.
version_added: 0.1.0
author: gpufleet maintainers (!UNKNOWN)
options:
  timeout:
    description:
      - Seconds for the probe; each tool on the host gets a sixth of it (1 to 10 s).
      - Enforced on the host with C(timeout) (TERM, then KILL 5 s later); a host without
        C(timeout) runs the probe unbounded and the task's own C(timeout) keyword is the limit.
    type: float
    default: 60
attributes:
  check_mode:
    description: Reads the host only, so check mode runs it the same way.
    support: full
  diff_mode:
    description: Changes nothing, so there is no diff to show.
    support: none
  action:
    description: Runs as an action plugin on the controller, which sends the probe over the task's connection.
    support: full
notes:
  - Connections that take a command's stdin (ssh, local, docker, ...) work; paramiko does not.
"""

EXAMPLES = r"""
- name: Collect GPU facts
  gpufleet.gpu.gpu_facts:

- name: Show the driver
  ansible.builtin.debug:
    var: ansible_facts.gpufleet.driver.version
"""

RETURN = r"""
ansible_facts:
  description: C(gpufleet) holds the facts (schema gpufleet.facts/v1, docs/facts.md).
  returned: success
  type: dict
gpufleet_expect:
  description:
    - The host's desired-state variables the rules compare against (gpufleet.inventory.desired).
    - Each C(pytorch_workspaces) item keeps only name, state and image_digest, never a token.
  returned: success
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.gpufleet.gpu.plugins.module_utils.gpu_facts_spec import (  # noqa: E402
    ARGUMENT_SPEC,
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.fail_json(msg="gpufleet.gpu.gpu_facts runs as its action plugin on the controller; "
                         "this module ran on the host instead (the action plugin was not found)")


if __name__ == "__main__":
    main()
