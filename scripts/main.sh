#!/usr/bin/env bash
# The main job, the README's main command: the `demo` preset of `fedretain reproduce`.
# FedAvg, FedProx, SCAFFOLD, FedCurv, FedReg, GradMA, FedAvg+TCE and FedAdam (with SGD as the
# reference of R_a) on Fashion-MNIST with pathological non-IID clients, 3 seeds, every run
# measuring its forgetting, two runs at a time (one torch thread each); each method's
# hyper-parameter was chosen alike on a validation split (`fedretain reproduce demo-tune`
# re-derives them). Then OUT_DIR/report.md with the table, the plots and a paragraph written
# from the numbers that ranks methods only beyond the seeds' spread. Finished runs are skipped
# and interrupted ones continued, so running it again after a stop picks up where it was.
# Usage: bash scripts/main.sh [OUT_DIR] [KEY=VALUE settings for every run] [more options]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# tcmalloc under torch where installed: 8 % less wall time on this job, up to 1.3x on the
# vectorised engine's MLP rounds (benchmarks/RESULTS.md, "Allocators"); same numbers
TCMALLOC=$(ls /usr/lib/*/libtcmalloc_minimal.so.4 2>/dev/null | head -n 1 || true)
[ -n "$TCMALLOC" ] && export LD_PRELOAD="$TCMALLOC${LD_PRELOAD:+:$LD_PRELOAD}"
OUT=${1:-results/demo}
shift || true
.venv/bin/fedretain reproduce demo "$@" --out "$OUT" --scale small --jobs 2
