#!/bin/bash
# Issue 5: capture real nvidia-smi outputs and run gpu_holders/gpu_release on a real GPU.
# On the device machine (repo root, .whl carried, $OUT set):
#   bash tests/gpu/run_device.sh
# Dry run without a GPU (holders hold a temp file instead of CUDA memory):
#   SPARKFLEET_FAKE_GPU=/tmp/fake-nvidia0 bash tests/gpu/run_device.sh
set -u
cd "$(dirname "$0")/../.."
export LC_ALL=C.UTF-8 LANG=C.UTF-8 PYTHONUNBUFFERED=1
OUT=${OUT:-$(mktemp -d)}; export OUT
if ! python3 -c 'import ansible' 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/ansible_core-*.whl || exit 3
    export PYTHONPATH=/tmp/site ANSIBLE_BIN=/tmp/site/bin/ansible
fi
[ -n "${SPARKFLEET_FAKE_GPU:-}" ] && touch "$SPARKFLEET_FAKE_GPU"
nvidia-smi -L 2>&1 | head -3
python3 tests/gpu/device_run.py 2>&1 | tee "$OUT/console.log"
exit "${PIPESTATUS[0]}"
