#!/usr/bin/env bash
# The whole test suite as CI runs it: setup, static checks, then every test that needs no GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check agent tests
.venv/bin/mypy
# ansible-test sanity on the collection, as Galaxy's importer and Automation Hub run it (issue 30).
bash scripts/sanity.sh
# Two workers (CI has 2 cores; much of the suite waits on daemons); tests/conftest.py groups them.
exec .venv/bin/python -m pytest -m "not gpu" -n "${GPUFLEET_TEST_WORKERS:-2}" "$@"
