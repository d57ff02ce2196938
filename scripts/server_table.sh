#!/usr/bin/env bash
# The composable server side on experiments/server_side_dirichlet.toml: FedAvg, FedAvgM and the
# adaptive server optimizers (FedAdam, FedYogi, FedAdagrad at their defaults; FedAdagrad also at
# server_opt.lr=0.01, since its default step breaks this setting), and FedReg's
# clients with FedAdam's server, over 3 seeds; one report per seed and one over the seeds.
# Usage: JOBS=2 EXTRA="engine=vmap threads=1" bash scripts/server_table.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
OUT=${1:-results/server}
CONFIG=experiments/server_side_dirichlet.toml
declare -A RUNS=(
    [fedavg]="algorithm=fedavg"
    [fedavgm]="algorithm=fedavgm"
    [fedadam]="algorithm=fedavg server_opt=adam"
    [fedyogi]="algorithm=fedavg server_opt=yogi"
    [fedadagrad]="algorithm=fedavg server_opt=adagrad"
    [fedadagrad-lr0.01]="algorithm=fedavg server_opt=adagrad server_opt.lr=0.01"
    [fedreg+fedadam]="algorithm=fedreg server_opt=adam"
)
NAMES=(fedavg fedavgm fedadam fedyogi fedadagrad fedadagrad-lr0.01 fedreg+fedadam)
dirs=()
for seed in 0 1 2; do
    for name in "${NAMES[@]}"; do
        read -r -a args <<< "${RUNS[$name]}"
        run_one "$OUT/seed$seed/$name" --config "$CONFIG" "${args[@]}" name="$name" seed="$seed"
        dirs+=("$OUT/seed$seed/$name")
    done
done
finish "${dirs[@]}"
for seed in 0 1 2; do
    runs=()
    for name in "${NAMES[@]}"; do runs+=("$OUT/seed$seed/$name"); done
    "$PY" -m fedretain.cli compare "${runs[@]}" --out "$OUT/seed$seed/report"
done
"$PY" -m fedretain.cli compare "${dirs[@]}" --out "$OUT/report"
echo "done: open $OUT/report/report.md"
