# Copyright: gpufleet maintainers
# SPDX-License-Identifier: Apache-2.0
"""Action for gpufleet.gpu.gpu_facts: ship gpufleet's probe to the node over the task's connection
and parse it on the controller with gpufleet's own parser, so the facts equal `gpufleet facts`."""

from __future__ import annotations

import shlex
import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

# The inventory variables gpufleet reads as a host's desired state (inventory.py).
EXPECT_KEYS = (
    "nvidia_driver_version", "nvidia_driver_branch", "nvidia_driver_kernel_modules",
    "nvidia_container_toolkit_version", "container_runtime_engine", "pytorch_image",
    "pytorch_image_digest", "gpufleet_expected_gpu_count", "gpufleet_smoke_runtime",
    "gpufleet_smoke_python", "gpufleet_min_busbw_gbps", "gpufleet_mig_expected",
    "gpufleet_smoke_address", "gpufleet_smoke_interface",
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("timeout",))

    def run(self, tmp=None, task_vars=None):
        try:
            from gpufleet.model import CommandResult, to_jsonable  # noqa: PLC0415
            from gpufleet.nodecheck import node_spec  # noqa: PLC0415
            from gpufleet.probes import collect  # noqa: PLC0415
            from gpufleet.transport.base import Transport  # noqa: PLC0415
        except ImportError as exc:
            raise AnsibleActionFail(
                "gpufleet.gpu.gpu_facts needs the gpufleet Python package where Ansible runs "
                f"(pip install gpufleet into the controller or execution environment): {exc}"
            ) from exc

        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        timeout = float(self._task.args.get("timeout", 60))
        expect = {}
        for key in EXPECT_KEYS:
            if key in task_vars:
                value = self._templar.template(task_vars[key])
                if value is not None and value != "":
                    expect[key] = value
        host = task_vars.get("inventory_hostname", self._connection._play_context.remote_addr)
        spec = node_spec(str(host), expect)
        action = self

        class AnsibleTransport(Transport):
            """Transport over the task's connection (ssh, local, become: Ansible's job)."""

            name = str(host)

            def run(self, argv, *, timeout, stdin=None, env=None):
                started = time.monotonic()
                res = action._low_level_execute_command(shlex.join(argv), in_data=stdin)
                return CommandResult(rc=res.get("rc"), stdout=res.get("stdout", ""),
                                     stderr=res.get("stderr", ""),
                                     duration_s=time.monotonic() - started)

            def put(self, data, remote_path, mode=0o644):
                raise NotImplementedError("gpu_facts only runs the probe")

            def close(self):
                pass

        facts = collect(AnsibleTransport(), spec, timeout=timeout)
        result.update(changed=False, ansible_facts={"gpufleet": to_jsonable(facts)},
                      gpufleet_expect=expect)
        return result
