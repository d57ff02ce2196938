#!/usr/bin/env bash
# FedReg's convergence and forgetting claims on Fashion-MNIST with one class per client
# (experiments/fedreg_fmnist_one_class.toml), 3 seeds, then one report:
#  - SGD, FedAvg and FedReg (γ 0.3, η_s 0.2: the paper's MNIST one-class values), each with
#    R_a against SGD's final accuracy of the same seed (FedReg's Table 1);
#  - forgetting (FedReg App. B.3): FedReg with γ = 1 and FedAvg's local models trained from
#    FedReg's global models on the same clients and batches, FORGET_ROUNDS rounds (losses on
#    100 samples per client).
# Usage: [JOBS=N] [EXTRA="engine=vmap device=cuda"] bash scripts/fedreg_table.sh [OUT_DIR]
# 2 CPU cores: about 20 minutes with JOBS=2 EXTRA="model=mlp engine=vmap threads=1 eval_every=1";
# the CNN needs a GPU (JOBS=12 EXTRA="engine=vmap device=cuda threads=1").
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
OUT=${1:-results/fedreg}
CONFIG=experiments/fedreg_fmnist_one_class.toml
FORGET_ROUNDS=${FORGET_ROUNDS:-20}
SEEDS=(0 1 2)
runs=() refs=() forget=()
for seed in "${SEEDS[@]}"; do
    d=$OUT/seed$seed
    run_one "$d/sgd" --config "$CONFIG" algorithm=sgd seed="$seed"
    run_one "$d/fedavg" --config "$CONFIG" algorithm=fedavg seed="$seed"
    run_one "$d/fedreg" --config "$CONFIG" algorithm=fedreg algo.gamma=0.3 algo.eta_s=0.2 \
        seed="$seed"
    run_one "$OUT/forgetting/seed$seed" --config "$CONFIG" algorithm=fedreg algo.gamma=1.0 \
        algo.eta_s=0.2 seed="$seed" rounds="$FORGET_ROUNDS" diagnostics=forgetting \
        diagnostics.reference=fedavg diagnostics.samples=100 name=fedreg-gamma1
    runs+=("$d/sgd" "$d/fedavg" "$d/fedreg")
    refs+=(--reference "$d/sgd")
    forget+=("$OUT/forgetting/seed$seed")
done
finish "${runs[@]}" "${forget[@]}"
"$PY" -m fedretain.cli compare "${runs[@]}" "${refs[@]}" --out "$OUT/report"
"$PY" -m fedretain.cli compare "${forget[@]}" --out "$OUT/forgetting/report"
echo "done: open $OUT/report/report.md and $OUT/forgetting/report/report.md"
