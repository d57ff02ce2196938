#!/usr/bin/env bash
# The test command: set up, lint and format-check with ruff, build the documentation site
# (strict), run the default test suite.
# Extra arguments go to pytest (e.g. -m slow for the long checks; -n 0 for one process).
# pytest runs one worker per CPU core (pytest-xdist), each test file in one worker (module
# fixtures are built once; the longest files first, as tests/conftest.py orders them), one
# torch thread per worker unless OMP_NUM_THREADS says otherwise:
# 5 min 49 s against 7 min 23 s in one process on 2 cores (benchmarks/RESULTS.md, "Test suite").
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check fedretain tests benchmarks docs
.venv/bin/ruff format --check fedretain tests benchmarks docs
# the documentation site (mkdocs.yml, docs/): built strict into a temporary folder, then removed
SITE=$(mktemp -d)
trap 'rm -rf "$SITE"' EXIT
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir "$SITE"
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} .venv/bin/python -m pytest -n auto --dist loadfile \
    --no-loadscope-reorder "$@"
