# Copyright: gpufleet maintainers
# SPDX-License-Identifier: Apache-2.0
"""Callback gpufleet.gpu.gpufleet_report: a playbook run's gpu_facts results → gpufleet report."""

from __future__ import annotations

DOCUMENTATION = r"""
name: gpufleet_report
type: aggregate
short_description: Write the gpufleet report for the hosts that ran gpufleet.gpu.gpu_facts
description:
  - Collects every host's gpu_facts result (and unreachable hosts) and, when the playbook ends,
    writes the gpufleet report (rules, findings, summary) to a file.
  - Requires the gpufleet Python package on the controller or in the execution environment.
requirements:
  - enable it in callbacks_enabled (ANSIBLE_CALLBACKS_ENABLED)
options:
  output:
    description: Path of the report.
    env:
      - name: GPUFLEET_REPORT
    ini:
      - section: callback_gpufleet_report
        key: output
    default: gpufleet-report.json
  format:
    description: Report format (table, json, junit, prometheus, markdown, html).
    env:
      - name: GPUFLEET_REPORT_FORMAT
    ini:
      - section: callback_gpufleet_report
        key: format
    default: json
"""

import datetime as dt  # noqa: E402  # after DOCUMENTATION, as Ansible plugins do
from pathlib import Path  # noqa: E402

from ansible.plugins.callback import CallbackBase  # noqa: E402


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpufleet.gpu.gpufleet_report"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._results = {}

    def _keep(self, result, status):
        res = dict(result._result)
        action = getattr(result._task, "action", "") or ""
        # Only the gpu_facts task's own result: any other task's result is the host's output,
        # and a forged ansible_facts.gpufleet or gpufleet_expect in it must not replace the
        # facts or erase the expectations (issue 22 F22).
        if not action.endswith("gpu_facts"):
            return
        if status == "ok" and "gpufleet" not in (res.get("ansible_facts") or {}):
            return
        res["unreachable"] = status == "unreachable"
        res["failed"] = status == "failed"
        self._results[result._host.get_name()] = res

    def v2_runner_on_ok(self, result):
        self._keep(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._keep(result, "failed")

    def v2_runner_on_unreachable(self, result):
        self._keep(result, "unreachable")

    def v2_playbook_on_stats(self, stats):
        if not self._results:
            return
        from gpufleet.engines.ansible import (  # noqa: PLC0415
            report_from_results,
            results_from_mapping,
        )
        from gpufleet.files import write_atomic  # noqa: PLC0415
        from gpufleet.report import render  # noqa: PLC0415

        now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        report = report_from_results(results_from_mapping(self._results), generated_at=now,
                                     expect={h: r.get("gpufleet_expect") or {}
                                             for h, r in self._results.items()})
        path = self.get_option("output")
        # A fresh temp file beside the report, then a rename: a link planted at a fixed temp
        # name in the playbook's directory is never followed (issue 22 F13).
        write_atomic(Path(path), render(report, self.get_option("format")).rstrip("\n") + "\n")
        self._display.display(f"gpufleet: report for {len(self._results)} host(s) in {path}")
