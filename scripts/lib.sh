# Shared by the experiment scripts (source it): set up, then run many runs, resumably and in
# parallel.
#   PY=python3     use this Python (fedretain importable) instead of setting up .venv
#   JOBS=N         runs at a time (default 1)
#   EXTRA="k=v .." settings added to every run, e.g. EXTRA="engine=vmap device=cuda threads=1"
# A finished run (summary.json) is skipped; an unfinished one continues from its checkpoint.

if [ -z "${PY:-}" ]; then
    bash scripts/setup.sh
    PY=.venv/bin/python
fi
JOBS=${JOBS:-1}
read -r -a EXTRA_ARGS <<< "${EXTRA:-}"

# run_one DIR KEY=VALUE...: one run into DIR (log: DIR.log), in the background
run_one() {
    local dir=$1
    shift
    [ -f "$dir/summary.json" ] && return 0
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
    mkdir -p "$(dirname "$dir")"
    if [ -f "$dir/checkpoint/meta.json" ]; then
        "$PY" -m fedretain.cli run --resume "$dir" "${EXTRA_ARGS[@]}" >> "$dir.log" 2>&1 &
    else
        "$PY" -m fedretain.cli run "$@" "${EXTRA_ARGS[@]}" --out "$dir" > "$dir.log" 2>&1 &
    fi
}

# finish: wait for every run; fail (naming the logs) if any run did not finish
finish() {
    wait
    local missing=()
    for dir in "$@"; do [ -f "$dir/summary.json" ] || missing+=("$dir.log"); done
    if [ ${#missing[@]} -gt 0 ]; then
        echo "error: ${#missing[@]} run(s) did not finish; see ${missing[*]}" >&2
        return 1
    fi
}
