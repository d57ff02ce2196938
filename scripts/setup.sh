#!/usr/bin/env bash
# Prepare a fresh machine: a virtual environment with fedretain, every extra, and the pinned
# versions of requirements-lock.txt,
# the Fashion-MNIST files (Debian package dataset-fashion-mnist) when they are missing, and,
# optionally, tcmalloc (libtcmalloc-minimal4), which scripts/main.sh preloads when present.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
# every extra (the suite tests every part) at the exact versions of requirements-lock.txt
if ! .venv/bin/python -c "import fedretain, pytest, xdist, ruff, flwr, ray, opacus, h5py" 2>/dev/null \
   || [ pyproject.toml -nt .venv/.fedretain-installed ] \
   || [ requirements-lock.txt -nt .venv/.fedretain-installed ]; then
    echo "installing fedretain and its pinned dependencies into .venv (log: .venv/install.log)"
    if ! { .venv/bin/python -m pip install --upgrade pip \
           && .venv/bin/python -m pip install -c requirements-lock.txt -e '.[dev]'; } \
           > .venv/install.log 2>&1; then
        tail -n 30 .venv/install.log >&2
        echo "error: installing fedretain failed; the full log is .venv/install.log" >&2
        exit 1
    fi
    touch .venv/.fedretain-installed
fi

FMNIST=/usr/share/datasets/fashion-mnist
if [ ! -f "$FMNIST/train-images-idx3-ubyte.gz" ]; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        echo "installing Fashion-MNIST (Debian package dataset-fashion-mnist)"
        apt-get update -qq && apt-get install -y -qq dataset-fashion-mnist >/dev/null
    else
        echo "note: $FMNIST is missing; install it with 'sudo apt-get install dataset-fashion-mnist'" \
             "(the tests that need it are skipped; the main job needs it)" >&2
    fi
fi

# tcmalloc: optional (scripts/main.sh runs without it), so a failed install is only a note
if ! ls /usr/lib/*/libtcmalloc_minimal.so.4 >/dev/null 2>&1 \
   && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    echo "installing tcmalloc (Debian package libtcmalloc-minimal4: faster allocation for torch)"
    { apt-get install -y -qq libtcmalloc-minimal4 >/dev/null 2>&1 \
      || { apt-get update -qq && apt-get install -y -qq libtcmalloc-minimal4 >/dev/null; }; } \
      || echo "note: libtcmalloc-minimal4 did not install; runs use glibc's allocator" >&2
fi
