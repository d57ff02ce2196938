#!/usr/bin/env bash
# The test command: set up, lint and format-check with ruff, build the documentation site
# (strict), run the default test suite.
# Extra arguments go to pytest (e.g. -m slow for the long checks).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check fedretain tests benchmarks docs
.venv/bin/ruff format --check fedretain tests benchmarks docs
# the documentation site (mkdocs.yml, docs/): built strict into a temporary folder, then removed
SITE=$(mktemp -d)
trap 'rm -rf "$SITE"' EXIT
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir "$SITE"
.venv/bin/python -m pytest "$@"
