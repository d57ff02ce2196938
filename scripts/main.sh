#!/usr/bin/env bash
# The main job, the README's main command: the `demo` preset of `fedretain reproduce`.
# FedAvg, FedProx, SCAFFOLD, FedCurv, FedReg, GradMA, FedAvg+TCE and FedAdam (with SGD as the
# reference of R_a) on Fashion-MNIST with pathological non-IID clients, every run measuring its
# forgetting, two runs at a time (one torch thread each); then OUT_DIR/report.md with the
# table, the plots and a paragraph written from the numbers. Finished runs are skipped and
# interrupted ones continued, so running it again after a stop picks up where it was.
# Usage: bash scripts/main.sh [OUT_DIR] [KEY=VALUE settings for every run] [more options]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
OUT=${1:-results/demo}
shift || true
.venv/bin/fedretain reproduce demo "$@" --out "$OUT" --scale small --jobs 2
