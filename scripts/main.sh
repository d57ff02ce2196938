#!/usr/bin/env bash
# The main job: compare the baselines on Fashion-MNIST with pathological non-IID clients,
# ending in a report folder (report.md and plots). Usage: bash scripts/main.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
OUT=${1:-results/main}
CONFIG=experiments/fmnist_pathological.toml
ALGORITHMS=(sgd fedavg fedavgm fedprox fedproxm scaffold)
for algo in "${ALGORITHMS[@]}"; do
    .venv/bin/fedretain run --config "$CONFIG" algorithm="$algo" --out "$OUT/$algo"
done
runs=()
for algo in "${ALGORITHMS[@]}"; do runs+=("$OUT/$algo"); done
.venv/bin/fedretain compare "${runs[@]}" --reference "$OUT/sgd" --out "$OUT/report"
echo "done: open $OUT/report/report.md"
