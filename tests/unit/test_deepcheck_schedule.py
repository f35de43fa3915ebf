"""The healthcheck role refuses, at play time, every duration `gpufleet deepcheck` would refuse
(issue 28: goals from the inventory): the role's pattern (vars/main.yml) and
gpufleet.history.coverage.parse_duration accept the same strings, so a goal the play lets
through never makes every cron run exit 2."""

from __future__ import annotations

import re
import string

import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from gpufleet.history.coverage import parse_duration
from paths import COLLECTION

ROLE_VARS = COLLECTION / "roles/gpufleet_healthcheck/vars/main.yml"
# The characters durations are made of, and a few that look like them.
DURATIONISH = st.text(alphabet=string.digits + "smhdwMHDy .-+_\t\n", max_size=8)


def _role_accepts(text: str) -> bool:
    # Ansible's `match` test is re.match with the pattern as written.
    pattern = yaml.safe_load(ROLE_VARS.read_text())["_gpufleet_healthcheck_duration_re"]
    return re.match(pattern, text) is not None


@given(DURATIONISH)
@example("7d")
@example("07d")
@example("0d")
@example("7d\n")
@example("1 week")
@example("15")
def test_the_role_and_deepcheck_accept_the_same_durations(text: str) -> None:
    if text != text.strip():  # deepcheck strips its argument; the role takes the value as is
        assert not _role_accepts(text), repr(text)
        return
    assert _role_accepts(text) == (parse_duration(text) is not None), repr(text)


def test_the_documented_defaults_are_durations() -> None:
    defaults = yaml.safe_load((COLLECTION / "roles/gpufleet_healthcheck/defaults/main.yml")
                              .read_text())
    for key in ("goal", "multinode_goal", "every", "cooldown"):
        value = defaults[f"gpufleet_healthcheck_deepcheck_{key}"]
        assert _role_accepts(value) and parse_duration(value) is not None, (key, value)
