#!/usr/bin/env bash
# Truncated cross-entropy (TCE) against plain cross-entropy, both with FedAvg, in TCE's
# setting (experiments/tce_dirichlet.toml: Dirichlet α = 0.1, 100 clients, 10 per round,
# 10% of each client's data for validation), 3 seeds. Add
# EXTRA="diagnostics=forgetting diagnostics.rounds=[50,100]" for F_ki and F_k, with heat maps at
# rounds 50 and 100 (costly on a CPU: every round evaluates 10x10 local models).
# Usage: [JOBS=N] [EXTRA="engine=vmap device=cuda"] bash scripts/tce_table.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
OUT=${1:-results/tce}
CONFIG=experiments/tce_dirichlet.toml
runs=()
for seed in 0 1 2; do
    for loss in ce tce; do
        run_one "$OUT/seed$seed/fedavg-$loss" --config "$CONFIG" algorithm=fedavg loss="$loss" \
            seed="$seed" name="fedavg+$loss"
        runs+=("$OUT/seed$seed/fedavg-$loss")
    done
done
finish "${runs[@]}"
"$PY" -m fedretain.cli compare "${runs[@]}" --out "$OUT/report"
echo "done: open $OUT/report/report.md"
