# Copyright: gpufleet maintainers
# SPDX-License-Identifier: Apache-2.0
"""Action for gpufleet.gpu.gpu_facts: ship gpufleet's probe to the node over the task's connection
and parse it on the controller with gpufleet's own parser, so the facts equal `gpufleet facts`."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.gpu.plugins.module_utils.gpu_facts_spec import ARGUMENT_SPEC


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)

    def run(self, tmp=None, task_vars=None):
        try:
            from gpufleet.inventory import desired  # noqa: PLC0415
            from gpufleet.inventory import node_spec  # noqa: PLC0415
            from gpufleet.model import to_jsonable  # noqa: PLC0415
            from gpufleet.probes import collect  # noqa: PLC0415
            from gpufleet.transport.ansible import AnsibleTransport  # noqa: PLC0415
        except ImportError as exc:
            raise AnsibleActionFail(
                "gpufleet.gpu.gpu_facts needs the gpufleet Python package where Ansible runs "
                f"(pip install gpufleet into the controller or execution environment): {exc}"
            ) from exc

        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        # The module's spec: a wrong type or an unknown option fails the task with Ansible's message.
        args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)[1]
        timeout = args["timeout"]
        # The desired-state variables (gpufleet.inventory.desired), passed on in the result as
        # gpufleet_expect for `gpufleet ansible-report`: workspace items keep only what the
        # agent reads, never their tokens (the result lands in AWX job events).
        expect = {}
        for var in desired.VARS:
            if var.name in task_vars:
                value = self._templar.template(task_vars[var.name])
                if value is not None and value != "":
                    expect[var.name] = desired.carried(var.name, value)
        host = str(task_vars.get("inventory_hostname",
                                 self._connection._play_context.remote_addr))
        spec = node_spec(host, expect)

        def execute(cmd, in_data):
            return self._low_level_execute_command(cmd, in_data=in_data)

        facts = collect(AnsibleTransport(host, execute), spec, timeout=timeout)
        result.update(changed=False, ansible_facts={"gpufleet": to_jsonable(facts)},
                      gpufleet_expect=expect)
        return result
