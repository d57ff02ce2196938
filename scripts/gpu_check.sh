#!/usr/bin/env bash
# The GPU verification of fedretain in one command (issue 27): the CUDA conformance of the
# whole registry against the CPU reference, the determinism check, every `reproduce` preset at
# --scale ci, `fedretain privacy` and the speed table, as ONE markdown table; exit status 1 on
# any failure, 2 without a CUDA GPU. The work is done by benchmarks/gpu_check.py (its docstring
# says what each part checks); this script installs the wheels it is given and puts the
# repository on PYTHONPATH (no virtual environment, no installed console script).
#
#   bash scripts/gpu_check.sh --wheels .whl --data .data        # on the GPU machine, <= 8 min
#   bash scripts/gpu_check.sh --only conformance,determinism    # a subset of the parts
#   PYTHON=.venv/bin/python bash scripts/gpu_check.sh --device cpu --quick   # on a CPU
#
# Other options go to the driver: --filter 'fedavg,aggregator=*' (conformance cases),
# --tolerance, --presets, --jobs, --models mlp,cnn, --cap PART=SECONDS, --budget SECONDS
# (default 480 on CUDA, shared out over the parts as they go; the table is rewritten to
# OUT/table.md and printed after each part), --out DIR
# (`python3 benchmarks/gpu_check.py --help`).
#
# The GPU machine (python3 3.12 with a CUDA build of torch, no network) has every dependency in
# pyproject.toml but tomli-w and opacus (flwr is left out: engine=flower is not checked here);
# the speed table's pfl-research 0.6.0 needs multiprocess, dill, dp-accounting and
# prv-accountant beside it. Their wheels (pure Python, about 1 MB), made once on a machine
# with network, from the repository root:
#
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#       --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
#       --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#       --platform manylinux1_x86_64 -d .whl tomli-w==1.2.0 opacus==1.6.0 pfl==0.6.0 \
#       multiprocess==0.70.18 dill==0.4.0 dp-accounting==0.5.0 prv-accountant==0.2.0
#
# Fashion-MNIST (30 MB: the determinism check's CNN, the presets' stand-in dataset, the main
# job's shape) travels the same way; --data DIR links DIR/fashion-mnist to its default folder
# /usr/share/datasets/fashion-mnist where that is missing:
#
#   echo /.data/ >> .git/info/exclude
#   mkdir -p .data && cp -r /usr/share/datasets/fashion-mnist .data/
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
WHEELS=""
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --wheels) WHEELS=${2:?--wheels needs a folder}; shift 2 ;;
        --wheels=*) WHEELS=${1#*=}; shift ;;
        *) args+=("$1"); shift ;;
    esac
done

source scripts/wheels.sh
if [ -n "$WHEELS" ]; then
    install_wheels "$WHEELS" || exit 2
fi
repository_on_path
exec "$PYTHON" benchmarks/gpu_check.py ${args[@]+"${args[@]}"}
