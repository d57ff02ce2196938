#!/usr/bin/env bash
# The main job: compare the baselines and the forgetting-aware methods on Fashion-MNIST with
# pathological non-IID clients, ending in a report folder (report.md and plots).
# Usage: bash scripts/main.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
OUT=${1:-results/main}
CONFIG=experiments/fmnist_pathological.toml
RUNS=(sgd fedavg fedavgm fedprox fedproxm scaffold fedcurv fedreg fedavg+tce)
for run in "${RUNS[@]}"; do
    case "$run" in
        fedavg+tce) args=(algorithm=fedavg loss=tce name=fedavg+tce) ;;
        *) args=(algorithm="$run") ;;
    esac
    .venv/bin/fedretain run --config "$CONFIG" "${args[@]}" --out "$OUT/$run"
done
dirs=()
for run in "${RUNS[@]}"; do dirs+=("$OUT/$run"); done
.venv/bin/fedretain compare "${dirs[@]}" --reference "$OUT/sgd" --out "$OUT/report"
echo "done: open $OUT/report/report.md"
