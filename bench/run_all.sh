#!/usr/bin/env bash
# Every benchmark of issue 8, one after the other on one lab, then bench/RESULTS.md from their output.
#   SPARKLAB_NAME=perf bench/run_all.sh        # as root from the repo root; ~30 min on a 2-core machine
# B1 model_sync.py (a/b/c, then b under tbf caps of 1 and 5 Gbit/s), B2 resume.py, B5 fanout.py (4-node lab),
# B4 diagnosis.py, B7 timeline.py (on paper), B6 cold_deploy.py last (it takes the lab down and up with 2 hosts).
# Every figure is a ratio taken side by side in one run; nothing here asserts on time.
set -uo pipefail
cd "$(dirname "$0")/.."
export SPARKLAB_NAME=${SPARKLAB_NAME:-sfl}
log=${BENCH_LOG:-bench/results.log}
: >"$log"
run() {
  printf '\n### %s\n' "$*" | tee -a "$log"
  .venv/bin/python "$@" 2>&1 | grep -v -e DEPRECATION -e '^$' | tee -a "$log"
}
lab/labctl down >/dev/null 2>&1; lab/labctl up --hosts 4 >/dev/null  # a fresh lab: nothing deployed competes for the CPU
run bench/model_sync.py
run bench/model_sync.py --shape 1gbit --cases module,tcp
run bench/model_sync.py --shape 5gbit --cases module,tcp
run bench/resume.py
run bench/fanout.py
run bench/fanout.py --shape 1gbit
run bench/diagnosis.py
run bench/timeline.py
run bench/cold_deploy.py --hosts 2
.venv/bin/python bench/results.py "$log" >bench/RESULTS.md && echo "wrote bench/RESULTS.md"
