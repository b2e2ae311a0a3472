#!/usr/bin/env bash
# B3: a no-op re-run of site.yml on a deployed lab: total wall time, changed count, and where the time goes (per
# role and per task), optionally side by side with another revision of the collection.
#
#   bench/noop_rerun.sh [--deploy] [--runs N] [--baseline REV] [--top N] [--out DIR]
#
# --deploy      stage the lab (lab/stage.sh) and run site.yml once first (not timed); without it the lab must
#               already be deployed (a first site.yml run).
# --runs N      timed re-runs per tree (default 2; the table shows the median run of each tree).
# --baseline REV  also time REV's site.yml (a detached git worktree), alternating with this tree's, so both see the
#               same machine load. Both must deploy the same configuration, or each run changes what the other set.
# Runs as root, in the lab's control namespace (lab/labctl ctl), against $SPARKLAB_NAME's lab. Every run starts
# with cold ssh connections (the masters a previous run left are closed first), as a re-run minutes later would.
# Timing comes from bench/callback_plugins/timetable.py; bench/timetable_report.py prints the tables, the node round
# trips (module runs on the nodes: the figure the machine's load does not move) and a BENCH-JSON line for
# bench/results.py.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
deploy=0 runs=2 baseline="" top=15 out=""
while [ $# -gt 0 ]; do
  case $1 in
    --deploy) deploy=1; shift ;;
    --runs) runs=$2; shift 2 ;;
    --baseline) baseline=$2; shift 2 ;;
    --top) top=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) sed -n '2,18p' "$0" >&2; exit 2 ;;
  esac
done
name=${SPARKLAB_NAME:-sfl}
if [ "$name" = sfl ]; then state=/var/tmp/sparklab/lab inv=$repo/inventories/lab
else state=/var/tmp/sparklab/lab-$name inv=$state/inventory; fi
[ -f "$state/nhosts" ] || { echo "lab $name is not up: SPARKLAB_NAME=$name lab/labctl up" >&2; exit 1; }
out=${out:-$(mktemp -d /var/tmp/noop-rerun.XXXXXX)}
mkdir -p "$out"
log() { printf '[noop_rerun] %s\n' "$*" >&2; }

trees=("current=$repo")
if [ -n "$baseline" ]; then
  rev=$(git -C "$repo" rev-parse --short "$baseline")
  wt=/var/tmp/noop-rerun-base-$rev
  [ -d "$wt" ] || git -C "$repo" worktree add --detach "$wt" "$rev" >/dev/null
  trees=("baseline-$rev=$wt" "${trees[@]}")
fi

cold() {  # close the ssh masters an earlier run left (the lab inventory keeps them in $state/cp for 120 s)
  local h
  for h in $(seq 1 "$(cat "$state/nhosts")"); do
    "$repo/lab/labctl" ctl -- ssh -F "$state/ssh/config" -o ControlPath="$state/cp/%C" -O exit "spark-$h" >/dev/null 2>&1 || true
  done
}

play() {  # play TREE_DIR LOGFILE [JSON]: site.yml from TREE_DIR against the lab; prints rc
  local tree=$1 logf=$2 json=${3:-}
  cold
  set +e
  (cd "$tree" && "$repo/lab/labctl" ctl -- env ANSIBLE_CONFIG="$tree/ansible.cfg" \
     ANSIBLE_CALLBACK_PLUGINS="$here/callback_plugins" ANSIBLE_CALLBACKS_ENABLED=sparkfleet.vllm.progress,timetable \
     SPARKFLEET_TIMETABLE="$json" "$repo/.venv/bin/ansible-playbook" -i "$inv" site.yml >"$logf" 2>&1)
  local rc=$?
  set -e
  echo "$rc"
}

if [ "$deploy" = 1 ]; then
  log "staging the lab and deploying (not timed)"
  SPARKLAB_NAME=$name "$repo/lab/stage.sh" >&2
  rc=$(play "$repo" "$out/deploy.log")
  [ "$rc" = 0 ] || { log "deploy failed (rc $rc): $out/deploy.log"; tail -30 "$out/deploy.log" >&2; exit 1; }
fi

"$repo/.venv/bin/python" -c 'import sys; sys.path.insert(0, sys.argv[1]); import model_sync as b; print("machine: " + b.machine())' "$here"
for i in $(seq 1 "$runs"); do
  for t in "${trees[@]}"; do
    label=${t%%=*} dir=${t#*=}
    rc=$(play "$dir" "$out/$label-$i.log" "$out/$label-$i.json")
    log "$label run $i: rc $rc ($out/$label-$i.log)"
    [ "$rc" = 0 ] || { tail -30 "$out/$label-$i.log" >&2; exit 1; }
  done
done

args=()
for t in "${trees[@]}"; do args+=("${t%%=*}=$out/${t%%=*}-*.json"); done
"$repo/.venv/bin/python" "$here/timetable_report.py" --top "$top" "${args[@]}"
log "logs and JSON: $out"
