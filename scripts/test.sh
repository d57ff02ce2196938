#!/usr/bin/env bash
# The test command: set up, lint and format-check with ruff, run the default test suite.
# Extra arguments go to pytest (e.g. -m slow for the long checks).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check fedretain tests benchmarks
.venv/bin/ruff format --check fedretain tests benchmarks
.venv/bin/python -m pytest "$@"
