# Sourced by gpu_check.sh and gpu_slice.sh on a machine without network (a lent GPU machine):
# install_wheels [DIR] puts the wheels of DIR (default scripts/gpu-wheels, committed: the
# pure-Python packages the GPU image lacks) that this interpreter can install into a site
# folder on PYTHONPATH; repository_on_path puts the repository itself there.
# PYTHON: the interpreter (default python3).
#
# scripts/gpu-wheels holds tomli-w (the core writes config.toml with it), opacus (the privacy
# part), pfl-research 0.6.0 and what it needs beside the image (multiprocess for Python 3.11
# and 3.12, dill, dp-accounting, prv-accountant: the speed table's pfl row), about 1 MB, each
# checked against scripts/gpu-wheels/SHA256SUMS before it is installed. download_wheels makes
# them again, on a machine with network.

WHEELS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/gpu-wheels"
WHEELS_PINNED=(tomli-w==1.2.0 opacus==1.6.0 pfl==0.6.0 multiprocess==0.70.18 dill==0.4.0
    dp-accounting==0.5.0 prv-accountant==0.2.0)

install_wheels() {
    local dir=${1:-$WHEELS_DIR} site=${GPU_CHECK_SITE:-/tmp/gpu_check-site}
    local py=${PYTHON:-python3}
    if [ -f "$dir/SHA256SUMS" ] && ! (cd "$dir" && sha256sum --quiet -c SHA256SUMS); then
        echo "a wheel in $dir does not match its SHA256SUMS: make them again (download_wheels)" >&2
        return 2
    fi
    # only the wheels this interpreter can install (multiprocess comes for 3.11 and for 3.12)
    local wheels
    mapfile -t wheels < <("$py" - "$dir" <<'EOF'
import sys
from pathlib import Path

from packaging.tags import sys_tags
from packaging.utils import parse_wheel_filename

supported = set(sys_tags())
for wheel in sorted(Path(sys.argv[1]).glob("*.whl")):
    if supported & set(parse_wheel_filename(wheel.name)[3]):
        print(wheel)
EOF
)
    if [ ${#wheels[@]} -eq 0 ]; then
        echo "no wheels for this interpreter in $dir" >&2
        return 2
    fi  # pip says what went wrong itself
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --upgrade --target "$site" "${wheels[@]}"
    # opacus's wheel also installs top-level packages named benchmarks and examples: a regular
    # package there would shadow this repository's benchmarks/ folder
    rm -rf "$site/benchmarks" "$site/examples"
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
}

# download_wheels [DIR]: the wheels of WHEELS_PINNED for Python 3.11 and 3.12 on x86_64 Linux
# (pure Python, about 1 MB) into DIR (default scripts/gpu-wheels), with their SHA256SUMS
download_wheels() {
    local dir=${1:-$WHEELS_DIR} py=${PYTHON:-python3} version
    mkdir -p "$dir"
    for version in 3.11 3.12; do
        "$py" -m pip download -q --no-deps --only-binary=:all: --python-version "$version" \
            --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
            -d "$dir" "${WHEELS_PINNED[@]}"
    done
    (cd "$dir" && sha256sum -- *.whl > SHA256SUMS)
}

# repository_on_path [ROOT]: the repository (default: the current folder) on PYTHONPATH
repository_on_path() {
    export PYTHONPATH="${1:-$(pwd)}${PYTHONPATH:+:$PYTHONPATH}"
    export PYTHONUNBUFFERED=1
}
