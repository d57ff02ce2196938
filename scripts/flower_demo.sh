#!/usr/bin/env bash
# A 3-client Flower deployment on this machine: one SuperLink and three SuperNodes, all on
# 127.0.0.1 (--insecure is for the loopback only), one training run submitted with `flwr run`,
# then every process stopped, also on Ctrl-C or an error.
#
#   bash scripts/flower_demo.sh                       # FedAvg, 3 rounds, scikit-learn digits
#   ALGO=scaffold ROUNDS=5 bash scripts/flower_demo.sh
#   ALGO=mifa DATASET=fashion-mnist MODEL=cnn bash scripts/flower_demo.sh
#
# Results: results/flower_demo/<algo>/ (config.toml, metrics.jsonl, summary.json, accuracy.png);
# the processes' logs stay in results/flower_demo/<algo>-logs/.
set -euo pipefail
cd "$(dirname "$0")/.."

ALGO=${ALGO:-fedavg}
ROUNDS=${ROUNDS:-3}
DATASET=${DATASET:-digits}
MODEL=${MODEL:-mlp}
OUT=${OUT:-results/flower_demo/$ALGO}
CLIENTS=3

[ -x .venv/bin/flwr ] || bash scripts/setup.sh
BIN=$(pwd)/.venv/bin
free_port() {  # a TCP port nobody listens on right now
    "$BIN/python" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"
}
PORT=${PORT:-$(free_port)}       # the SuperLink (Fleet, Control and ServerApp APIs)
export PATH="$BIN:$PATH"         # Flower starts flower-superexec and flwr-clientapp by name
LOGS="$OUT-logs"
WORK=$(mktemp -d)
export FLWR_HOME="$WORK/flwr-home"  # Flower's own files for this demo, not ~/.flwr
mkdir -p "$LOGS" "$FLWR_HOME"

PIDS=()
tree() {  # a process and all its descendants
    local pid=$1 child
    echo "$pid"
    for child in $(ps -o pid= --ppid "$pid" 2>/dev/null); do tree "$child"; done
}
alive() {  # is any of these processes still running (zombies do not count)?
    local pid
    for pid in "$@"; do
        [ -r "/proc/$pid/stat" ] && [ "$(cut -d' ' -f3 "/proc/$pid/stat" 2>/dev/null)" != Z ] && return 0
    done
    return 1
}
stop() {  # SIGTERM to processes and all their descendants; SIGKILL to what is left after 20 s
    local all=() pid
    for pid in "$@"; do all+=($(tree "$pid")); done
    [ ${#all[@]} -gt 0 ] || return 0
    kill -TERM "${all[@]}" 2>/dev/null || true
    for _ in $(seq 100); do alive "${all[@]}" || return 0; sleep 0.2; done
    kill -KILL "${all[@]}" 2>/dev/null || true
}
cleanup() {
    trap - EXIT INT TERM
    # the SuperNodes first, while the SuperLink still answers their goodbye, then the SuperLink
    [ ${#PIDS[@]} -gt 1 ] && stop "${PIDS[@]:1}"
    [ ${#PIDS[@]} -gt 0 ] && stop "${PIDS[0]}"
    rm -rf "$WORK"
    echo "stopped the SuperLink, the SuperNodes and their processes"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "SuperLink on 127.0.0.1:$PORT"
"$BIN/flower-superlink" --insecure --host 127.0.0.1 --port "$PORT" \
    --disable-runtime-dependency-installation > "$LOGS/superlink.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
    sleep 0.2
done

for k in $(seq 0 $((CLIENTS - 1))); do
    NODE_PORT=$(free_port)       # the SuperNode's own API, for its ClientApp processes
    echo "SuperNode $k on 127.0.0.1:$NODE_PORT, partition-id=$k"
    # a warm SuperNode: one long-running ClientApp process serves every message (docs/flower.md)
    "$BIN/python" -m fedretain.flower.node node --insecure --superlink "127.0.0.1:$PORT" \
        --host 127.0.0.1 --port "$NODE_PORT" \
        --node-config "partition-id=$k num-partitions=$CLIENTS" > "$LOGS/supernode-$k.log" 2>&1 &
    PIDS+=($!)
done

# the Flower app folder of this experiment, and the SuperLink connection `flwr run` uses
"$BIN/python" -m fedretain.flower app "$WORK/app" --out "$OUT" \
    algorithm="$ALGO" clients=$CLIENTS clients_per_round=$CLIENTS rounds="$ROUNDS" \
    dataset="$DATASET" model="$MODEL" batch_size=16 lr=0.05 threads=1
cat > "$FLWR_HOME/config.toml" <<EOF
[superlink]
default = "local-demo"

[superlink.local-demo]
address = "127.0.0.1:$PORT"
insecure = true
EOF

rm -f "$OUT/summary.json"
"$BIN/flwr" run "$WORK/app" local-demo --stream 2>&1 | tee "$LOGS/run.log"
if [ ! -f "$OUT/summary.json" ]; then
    echo "error: the run wrote no $OUT/summary.json; logs in $LOGS/" >&2
    exit 1
fi
"$BIN/python" - "$OUT/summary.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
print(f"{s['name']}: final accuracy {s['final_accuracy']:.4f} after {s['rounds']} rounds, "
      f"{s['bytes_up'] / 1e6:.2f} MB up, {s['lost_replies']} lost replies -> {sys.argv[1]}")
EOF
