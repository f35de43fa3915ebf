#!/usr/bin/env bash
# The whole test suite as CI runs it: setup, static checks, then every test that needs no GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check agent tests
.venv/bin/mypy
exec .venv/bin/python -m pytest -m "not gpu" "$@"
