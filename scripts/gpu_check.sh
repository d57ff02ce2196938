#!/usr/bin/env bash
# The GPU verification of fedretain in one command (issue 27): the CUDA conformance of the
# whole registry against the CPU reference, the determinism check, every `reproduce` preset at
# --scale ci, `fedretain privacy` and the speed table, as ONE markdown table; exit status 1 on
# any failure, 2 without a CUDA GPU. The work is done by benchmarks/gpu_check.py (its docstring
# says what each part checks); this script installs the wheels the image lacks and puts the
# repository on PYTHONPATH (no virtual environment, no installed console script).
#
#   bash scripts/gpu_check.sh --data .data          # on the GPU machine, <= 8 min
#   bash scripts/gpu_check.sh --only conformance,determinism    # a subset of the parts
#   bash scripts/gpu_check.sh --rehearse            # the whole check on this CPU, as on the image
#   PYTHON=.venv/bin/python bash scripts/gpu_check.sh --device cpu --quick   # the harness
#
# Other options go to the driver: --filter 'fedavg,aggregator=*' (conformance cases),
# --tolerance, --presets, --jobs, --models mlp,cnn, --cap PART=SECONDS, --budget SECONDS
# (default 480 on CUDA, shared out over the parts as they go; the table is rewritten to
# OUT/table.md and printed after each part), --out DIR
# (`python3 benchmarks/gpu_check.py --help`).
#
# The GPU machine (python3 3.12 with a CUDA build of torch, no network; its packages are listed
# in scripts/gpu_image.txt) has every dependency in pyproject.toml but tomli-w, and none of the
# extras' (flwr, Ray, Opacus; engine=flower is not checked here). The wheels it lacks are
# committed in scripts/gpu-wheels (scripts/wheels.sh says which): they are installed, into a
# folder of their own, when the interpreter has no tomli_w; --wheels DIR installs DIR's instead,
# --no-wheels none.
#
# --rehearse [FOLDER] runs every part on this CPU in an environment built like the image's
# (scripts/rehearse_env.py, in FOLDER, default /tmp/gpu_check-rehearsal): the image's packages
# linked from the project's environment (PYTHON, default .venv/bin/python), nothing else, the
# wheels installed as on the image, the CPU standing in for CUDA (--device cpu --quick, and the
# suite's tests marked cuda run on the CPU: FEDRETAIN_CUDA_STANDIN=cpu). It needs no network.
# It says where it differs from the image (Python 3.11, torch's CPU wheel, numpy 2.4).
#
# Fashion-MNIST (30 MB: the determinism check's CNN, the presets' stand-in dataset, the main
# job's shape) travels as an ignored folder; --data DIR links DIR/fashion-mnist to its default
# folder /usr/share/datasets/fashion-mnist where that is missing:
#
#   echo /.data/ >> .git/info/exclude
#   mkdir -p .data && cp -r /usr/share/datasets/fashion-mnist .data/
set -euo pipefail
cd "$(dirname "$0")/.."

WHEELS="" NO_WHEELS="" REHEARSE=""
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --wheels) WHEELS=${2:?--wheels needs a folder}; shift 2 ;;
        --wheels=*) WHEELS=${1#*=}; shift ;;
        --no-wheels) NO_WHEELS=1; shift ;;
        --rehearse)
            REHEARSE=/tmp/gpu_check-rehearsal
            if [ $# -gt 1 ] && [ "${2#-}" = "$2" ]; then REHEARSE=$2; shift; fi
            shift ;;
        *) args+=("$1"); shift ;;
    esac
done

if [ -n "$REHEARSE" ]; then
    # nothing of the calling environment's packages: only the image's, then the wheels
    unset PYTHONPATH PYTHONHOME PYTHONSTARTUP PYTHONUSERBASE
    builder=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
    mapfile -t built < <("$builder" scripts/rehearse_env.py "$REHEARSE")
    PYTHON=${built[0]:?the rehearsal environment was not built}
    printf '%s\n' "${built[@]:1}" >&2
    export GPU_CHECK_SITE="$REHEARSE/wheels-site" FEDRETAIN_CUDA_STANDIN=cpu
    args=(--device cpu --quick ${args[@]+"${args[@]}"})
fi
PYTHON=${PYTHON:-python3}

source scripts/wheels.sh
if [ -n "$WHEELS" ]; then
    install_wheels "$WHEELS" || exit 2
elif [ -z "$NO_WHEELS" ] && ! "$PYTHON" -c "import tomli_w" 2>/dev/null; then
    install_wheels || exit 2
fi
repository_on_path
exec "$PYTHON" benchmarks/gpu_check.py ${args[@]+"${args[@]}"}
