"""JUnit XML as Jenkins and GitLab read it: one testsuite per host, one testcase per check family.

A family fails (<failure>) when it has an error finding; warnings and infos pass and are listed
in <system-out>. A host that could not be checked errors its host-state case and skips the rest.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import Any

from gpufleet.redact import clean, xml_text
from gpufleet.report.common import family_of
from gpufleet.report.wording import row_message
from gpufleet.rules import FAMILIES


def _text(findings: list[Mapping[str, Any]]) -> str:
    return "\n".join(
        f"{f['severity']} {f['rule']} [{', '.join(f['hosts'])}] {row_message(f)}\n"
        f"  fix: {f['remediation']}" for f in findings)


def render(doc: Mapping[str, Any], *, color: bool = False, width: int = 120) -> str:
    doc = clean(doc, xml_text)  # ElementTree writes any character, even those XML cannot hold
    root = ET.Element("testsuites", name="gpufleet")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for name in sorted(doc["hosts"]):
        h = doc["hosts"][name]
        checked = h["status"] in ("ok", "busy")
        suite = ET.SubElement(root, "testsuite", name=name, hostname=name)
        counts = dict.fromkeys(totals, 0)
        mine = [f for f in doc["findings"] if name in f["hosts"]]
        for fam, title in FAMILIES.items():
            case = ET.SubElement(suite, "testcase", classname=f"gpufleet.{name}",
                                 name=f"{fam} {title}", time="0")
            got = [f for f in mine if family_of(f["rule"]) == fam]
            errors = [f for f in got if f["severity"] == "error"]
            counts["tests"] += 1
            if fam == "GF0xx" and not checked:
                counts["errors"] += 1
                ET.SubElement(case, "error", message=f"{name}: {h['status']}",
                              type=h["status"]).text = _text(got) or (h.get("error") or "")
            elif not checked:
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message=f"host {h['status']}: not checked")
            elif errors:
                counts["failures"] += 1
                ET.SubElement(case, "failure", message=errors[0]["message"],
                              type=errors[0]["rule"]).text = _text(errors)
            rest = [f for f in got if f["severity"] != "error"]
            if rest and checked:
                ET.SubElement(case, "system-out").text = _text(rest)
        suite.set("time", f"{h.get('duration_s') or 0:.3f}")
        for key, n in counts.items():
            suite.set(key, str(n))
            totals[key] += n
    for key in ("tests", "failures", "errors"):
        root.set(key, str(totals[key]))
    ET.indent(root)
    body = ET.tostring(root, encoding="unicode")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + body + "\n"
