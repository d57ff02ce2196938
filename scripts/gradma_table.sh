#!/usr/bin/env bash
# GradMA vs baselines in GradMA's Dirichlet setting, 3 seeds, then one report per seed.
# Every server momentum is 0.5 (FedAvgM, MIFAM, GradMA): at 0.9 FedAvgM collapses here.
# Usage: bash scripts/gradma_table.sh [OUT_DIR] [ALGORITHMS...]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
OUT=${1:-results/gradma}
shift || true
ALGORITHMS=("${@:-fedavg fedavgm mifa mifam gradma}")
read -r -a ALGORITHMS <<< "${ALGORITHMS[*]}"
for seed in 0 1 2; do
    for algo in "${ALGORITHMS[@]}"; do
        [ -f "$OUT/seed$seed/$algo/summary.json" ] && continue
        case "$algo" in
            fedavgm | fedproxm | mifam) extra=(algo.beta=0.5) ;;
            gradma | gradma-s) extra=(algo.beta1=0.5) ;;
            *) extra=() ;;
        esac
        .venv/bin/fedretain run --config experiments/gradma_dirichlet.toml \
            algorithm="$algo" seed="$seed" "${extra[@]}" --out "$OUT/seed$seed/$algo"
    done
    runs=()
    for algo in "${ALGORITHMS[@]}"; do runs+=("$OUT/seed$seed/$algo"); done
    .venv/bin/fedretain compare "${runs[@]}" --out "$OUT/seed$seed/report"
done
