#!/usr/bin/env bash
# One slice of a long run or preset on a machine lent for a while (a GPU machine with a
# 10-minute limit per command): run it for at most SECONDS, every run pausing cleanly between
# rounds with a checkpoint (stop_after), then pack its folder, checkpoints included, so that
# the next machine continues it where this one stopped. Paper-scale runs accumulate this way
# over several machines; the numbers equal an uninterrupted run's (docs/beyond-one-machine.md).
#
#   bash scripts/gpu_slice.sh SECONDS FOLDER run --config exp.toml --out FOLDER device=cuda
#   bash scripts/gpu_slice.sh SECONDS FOLDER run --resume FOLDER
#   bash scripts/gpu_slice.sh SECONDS FOLDER reproduce PRESET --scale paper --out FOLDER \
#       device=cuda
#
# FOLDER arrives with the working tree (an ignored folder named in the device tool's carry,
# 64 MiB at most) or is made by the first slice. `run` gets stop_after=SECONDS-MARGIN; a
# `run` whose FOLDER already holds a checkpoint is turned into `run --resume FOLDER`;
# `reproduce` gets --stop-after SECONDS-MARGIN (a run not started by then waits for the next
# slice). The slice ends by packing FOLDER into $OUT/slice.tar (OUT: the device tool's
# folder that comes back; default .), which this machine unpacks where the slice ran from
# (the repository root, for the device tool):   tar xf FILES_AT/slice.tar
# Options before SECONDS: --wheels DIR (default: scripts/gpu-wheels, installed where the
# interpreter lacks tomli_w, as gpu_check.sh does), --margin S (default 30: packing and the
# last round's slack). PYTHON: the interpreter (default python3 with the repository on
# PYTHONPATH; .venv/bin/python where set up).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)  # FOLDER stays relative to where it is called from

PYTHON=${PYTHON:-python3}
WHEELS=""
MARGIN=30
while [ $# -gt 0 ]; do
    case "$1" in
        --wheels) WHEELS=${2:?--wheels needs a folder}; shift 2 ;;
        --margin) MARGIN=${2:?--margin needs seconds}; shift 2 ;;
        *) break ;;
    esac
done
if [ $# -lt 3 ]; then
    echo "usage: bash scripts/gpu_slice.sh [--wheels DIR] [--margin S] SECONDS FOLDER run|reproduce ARGS..." >&2
    exit 2
fi
SECONDS_GIVEN=$1 FOLDER=$2 COMMAND=$3
shift 3
case "$SECONDS_GIVEN" in
    '' | *[!0-9]*) echo "gpu_slice: SECONDS must be a whole number of seconds, got '$SECONDS_GIVEN'" >&2; exit 2 ;;
esac
LEFT=$((SECONDS_GIVEN - MARGIN))
if [ "$LEFT" -lt 10 ]; then
    echo "gpu_slice: $SECONDS_GIVEN s less a margin of $MARGIN s leaves no time to run" >&2
    exit 2
fi

source "$ROOT/scripts/wheels.sh"
if [ -n "$WHEELS" ]; then
    install_wheels "$WHEELS" || exit 2
elif ! "$PYTHON" -c "import tomli_w" 2>/dev/null; then
    install_wheels || exit 2  # the committed ones (scripts/gpu-wheels), as gpu_check.sh does
fi
repository_on_path "$ROOT"

case "$COMMAND" in
    run)
        if [ -f "$FOLDER/checkpoint/meta.json" ] && [ "${1:-}" != "--resume" ]; then
            set -- --resume "$FOLDER"  # its own config.toml; the first slice's settings kept
        fi
        set +e
        "$PYTHON" -m fedretain run "$@" "stop_after=$LEFT"
        code=$?
        set -e ;;
    reproduce)
        set +e
        "$PYTHON" -m fedretain reproduce "$@" --stop-after "$LEFT"
        code=$?
        set -e ;;
    *)
        echo "gpu_slice: the command is run or reproduce, got '$COMMAND'" >&2
        exit 2 ;;
esac

DEST=${OUT:-.}
mkdir -p "$DEST"
if [ -d "$FOLDER" ]; then
    tar cf "$DEST/slice.tar" "$FOLDER"
    echo "gpu_slice: $FOLDER packed into $DEST/slice.tar ($(du -h "$DEST/slice.tar" | cut -f1)); unpack it in the repository root: tar xf slice.tar"
else
    echo "gpu_slice: $FOLDER was not written (exit $code)" >&2
fi
exit "$code"
