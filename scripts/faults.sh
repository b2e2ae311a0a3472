#!/usr/bin/env bash
# The whole fault and bad-input suite on the lab, and every test too long for CI (marked `long`: the 4-node
# deployment too, which is no fault).
# Writes tests/output/fault-table.md (fault, expected, observed, verdict) and prints it. Root required.
# CI (scripts/test.sh) runs the same tests except the `long` ones, and writes the same table.
# Then molecule's role scenarios (each role alone on the lab), unless pytest arguments were given or
# SPARKFLEET_SKIP_MOLECULE=1.
# Usage: scripts/faults.sh [extra pytest args, e.g. -k lock]
# Long ones include day two's supervision (tests/integration/test_supervision.py: a worker's raylet frozen, vLLM killed
# four times, a rejected Ray token repaired by site.yml, and a 10-minute chaos soak through bench/soak.py, about 25 min
# in all): scripts/faults.sh -k supervision. The 60-minute soak behind bench/RESULTS.md is bench/soak.py itself.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
scripts/bootstrap.sh || exit 1
export PATH=$root/.venv/bin:$PATH
lab/prepare.sh || exit 1
rc=0
lab/labctl ctl -- .venv/bin/pytest tests/integration -m "lab and (fault or long)" -q -p no:cacheprovider \
  --junitxml=tests/output/junit-faults.xml "$@" || rc=$?
# Each role alone on the running lab (molecule's role scenarios; CI runs only the default one).
if [ -z "${SPARKFLEET_SKIP_MOLECULE:-}" ] && [ $# -eq 0 ]; then
  for s in gpu_cleanup model_sync ray_cluster vllm_serve healthcheck; do
    lab/labctl ctl -- .venv/bin/molecule test -s "$s" || rc=1
  done
fi
[ -n "${SPARKLAB_KEEP_LAB:-}" ] || lab/labctl down >/dev/null 2>&1
cat tests/output/fault-table.md 2>/dev/null
exit $rc
