"""How a finding reads where its host is already shown (a table row, a "[host]" prefix).

Rules write self-contained messages ("gpu07: busbw …"), which is right for JSON, Slurm drain
reasons and logs. A renderer that prints the host beside the message drops that lead-in so a
line does not read "gpu07: gpu07: busbw …".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def row_message(finding: Mapping[str, Any]) -> str:
    """The message without a leading "HOST: " or "HOST " when it names its only host (or, for
    a group of identical findings, the "{host}" that stands for each of them)."""
    message = str(finding.get("message") or "")
    hosts = finding.get("hosts") or []
    if int(finding.get("count") or 1) > 1:  # report/grouped.py: "{host}" stands for each
        host = "{host}"
    elif len(hosts) != 1:
        return message
    else:
        host = str(hosts[0])
    for sep in (": ", " "):
        lead = host + sep
        if message.startswith(lead) and len(message) > len(lead):
            return message[len(lead):]
    return message
