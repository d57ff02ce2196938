# Sourced by gpu_check.sh and gpu_slice.sh on a machine without network (a lent GPU machine):
# install_wheels DIR puts the wheels of DIR (pure-Python dependencies its image lacks, see
# gpu_check.sh) into a site folder on PYTHONPATH, then the repository itself on PYTHONPATH.
# PYTHON: the interpreter (default python3).

install_wheels() {
    local dir=$1 site=${GPU_CHECK_SITE:-/tmp/gpu_check-site}
    shopt -s nullglob
    local wheels=("$dir"/*.whl)
    shopt -u nullglob
    if [ ${#wheels[@]} -eq 0 ]; then
        echo "no wheels in $dir" >&2
        return 2
    fi  # pip says what went wrong itself
    "${PYTHON:-python3}" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --upgrade --target "$site" "${wheels[@]}"
    # opacus's wheel also installs top-level packages named benchmarks and examples: a regular
    # package there would shadow this repository's benchmarks/ folder
    rm -rf "$site/benchmarks" "$site/examples"
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
}

# repository_on_path [ROOT]: the repository (default: the current folder) on PYTHONPATH
repository_on_path() {
    export PYTHONPATH="${1:-$(pwd)}${PYTHONPATH:+:$PYTHONPATH}"
    export PYTHONUNBUFFERED=1
}
