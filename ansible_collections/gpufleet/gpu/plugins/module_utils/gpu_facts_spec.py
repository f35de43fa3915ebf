# Copyright: gpufleet maintainers
# SPDX-License-Identifier: Apache-2.0
"""The argument spec of gpufleet.gpu.gpu_facts, in one place: the action plugin validates a task's
arguments with it, and the module file hands it to AnsibleModule so that ansible-test's
validate-modules checks it against the module's DOCUMENTATION."""

from __future__ import annotations

ARGUMENT_SPEC = {
    "timeout": {"type": "float", "default": 60.0},
}
