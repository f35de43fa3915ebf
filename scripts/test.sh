#!/usr/bin/env bash
# The whole test suite as CI runs it: setup, static checks, then every test that needs no GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check agent tests
.venv/bin/mypy
# ansible-test sanity on the collection, as Galaxy's importer and Automation Hub run it (issue 30),
# runs next to pytest instead of before it: its 20 s (150 s on a fresh machine, where it builds
# its tool environments) partly fill the time the tests spend waiting on daemons and SSH. It
# reads only the collection's tracked and unignored files, which no test writes. Its own session:
# stopped with everything it started however this script ends. Its output follows pytest's;
# either failing fails the run.
sanity_log=$(mktemp)
setsid bash scripts/sanity.sh >"$sanity_log" 2>&1 &
sanity=$!
trap 'kill -- -"$sanity" 2>/dev/null || true; rm -f "$sanity_log"' EXIT
trap 'exit 130' INT TERM
# Two workers (CI has 2 cores; much of the suite waits on daemons); tests/conftest.py groups them.
rc=0
.venv/bin/python -m pytest -m "not gpu" -n "${GPUFLEET_TEST_WORKERS:-2}" "$@" || rc=$?
sanity_rc=0
wait "$sanity" || sanity_rc=$?
echo "== bash scripts/sanity.sh (ran during pytest): exit $sanity_rc"
cat "$sanity_log"
if [ "$rc" -ne 0 ]; then
  exit "$rc"
fi
exit "$sanity_rc"
