#!/usr/bin/env bash
# B3: a no-op re-run of site.yml on a deployed lab: total wall time, changed count, and where the time goes (per
# role and per task), optionally side by side with another revision of the collection.
#
#   bench/noop_rerun.sh [--deploy] [--runs N] [--baseline REV | --base DIR [--baseline-lab NAME]] [--status] [--no-floor]
#                       [--monitoring-off] [--top N] [--out DIR]
#
# --deploy      stage the lab (lab/stage.sh) and run site.yml once first (not timed); without it the lab must
#               already be deployed (a first site.yml run).
# --runs N      timed re-runs per tree (default 2; the table shows the median run of each tree).
# --baseline REV  also time REV's site.yml (a detached git worktree), alternating with this tree's, so both see the
#               same machine load. Both must deploy the same configuration, or each run changes what the other set.
# --base DIR    the same with an existing checkout DIR (e.g. a worktree of main) instead of a commit.
# --status      also time playbooks/status.yml after each site.yml run of each tree (its own tables, BENCH-JSON
#               bench "B3-status"); the issue's goals: site.yml <= 12 s, status.yml <= 6 s, <= 15 round trips per node.
# --baseline-lab NAME  play REV's tree against the lab NAME (up, deployed by REV: --deploy does it) instead of this
#               one, when the two trees deploy different configurations; each tree uses its own .venv when it has one.
# --monitoring-off  also time this tree with `sparkfleet_monitoring: false` (the first column, so the ratio printed is
#               monitoring's cost: issue 42's goal is 1.1x or less), alternating with the runs with it on.
# --no-floor    leave out the floors. By default every round also plays this tree's two floors (bench/noop_floor.py,
#               written from its first run): the same tasks on the same hosts with the same connection settings,
#               (empty) every task an empty one, the cost of Ansible's per-task overhead alone, and (ping) every node
#               round trip a bare ping, the cost of the round trips with no work in them.
# Runs as root, in the lab's control namespace (lab/labctl ctl), against $SPARKLAB_NAME's lab. Every run starts
# with cold ssh connections (the masters a previous run left are closed first), as a re-run minutes later would.
# Timing comes from bench/callback_plugins/timetable.py; bench/timetable_report.py prints the tables, the node round
# trips (module runs on the nodes: the figure the machine's load does not move) and a BENCH-JSON line for
# bench/results.py.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
deploy=0 runs=2 baseline="" base_dir="" baseline_lab="" top=15 out="" floor=1 status=0 monoff=0
while [ $# -gt 0 ]; do
  case $1 in
    --deploy) deploy=1; shift ;;
    --runs) runs=$2; shift 2 ;;
    --baseline) baseline=$2; shift 2 ;;
    --base) base_dir=$(cd "$2" && pwd); shift 2 ;;
    --status) status=1; shift ;;
    --baseline-lab) baseline_lab=$2; shift 2 ;;
    --no-floor) floor=0; shift ;;
    --monitoring-off) monoff=1; shift ;;
    --top) top=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) sed -n '2,30p' "$0" >&2; exit 2 ;;
  esac
done
name=${SPARKLAB_NAME:-sfl}
labdirs() {  # NAME: prints "STATE_DIR INVENTORY" of that lab
  if [ "$1" = sfl ]; then echo "/var/tmp/sparklab/lab $repo/inventories/lab"
  else echo "/var/tmp/sparklab/lab-$1 /var/tmp/sparklab/lab-$1/inventory"; fi
}
for n in "$name" ${baseline_lab:+"$baseline_lab"}; do
  read -r st _ < <(labdirs "$n")
  [ -f "$st/nhosts" ] || { echo "lab $n is not up: SPARKLAB_NAME=$n lab/labctl up" >&2; exit 1; }
done
out=${out:-$(mktemp -d /var/tmp/noop-rerun.XXXXXX)}
mkdir -p "$out/status"
log() { printf '[noop_rerun] %s\n' "$*" >&2; }

trees=("current=$repo=$name")
if [ -n "$baseline" ]; then
  rev=$(git -C "$repo" rev-parse --short "$baseline")
  wt=/var/tmp/noop-rerun-base-$rev
  [ -d "$wt" ] || git -C "$repo" worktree add --detach "$wt" "$rev" >/dev/null
  trees=("baseline-$rev=$wt=${baseline_lab:-$name}" "${trees[@]}")
fi
if [ "$monoff" = 1 ]; then  # the same tree and lab, monitoring off: the first column, the ratios' reference
  trees=("monitoring-off=$repo=$name=off" "${trees[@]}")
fi
if [ -n "$base_dir" ]; then
  [ -z "$baseline" ] || { echo "--baseline and --base: one of them" >&2; exit 2; }
  trees=("base-$(git -C "$base_dir" rev-parse --short HEAD)=$base_dir=${baseline_lab:-$name}" "${trees[@]}")
fi

cold() {  # LAB: close the ssh masters an earlier run left (the lab inventory keeps them in $state/cp for 120 s)
  local h state inv
  read -r state inv < <(labdirs "$1")
  for h in $(seq 1 "$(cat "$state/nhosts")"); do
    SPARKLAB_NAME=$1 "$repo/lab/labctl" ctl -- ssh -F "$state/ssh/config" -o ControlPath="$state/cp/%C" -O exit \
      "spark-$h" >/dev/null 2>&1 || true
  done
}

play() {  # play TREE_DIR LAB LOGFILE [JSON [PLAYBOOK [off]]]: site.yml (or PLAYBOOK) with TREE_DIR's settings and its
  #         .venv when it has one, against LAB (with `sparkfleet_monitoring: false` when off); prints rc
  local tree=$1 lab=$2 logf=$3 json=${4:-} book=${5:-site.yml} off=${6:-} state inv venv=$repo/.venv
  local extra=()
  [ "$off" = off ] && extra=(-e '{"sparkfleet_monitoring": false}')
  read -r state inv < <(labdirs "$lab")
  [ -x "$tree/.venv/bin/ansible-playbook" ] && venv=$tree/.venv
  cold "$lab"
  set +e
  (cd "$tree" && SPARKLAB_NAME=$lab "$repo/lab/labctl" ctl -- env ANSIBLE_CONFIG="$tree/ansible.cfg" \
     ANSIBLE_CALLBACK_PLUGINS="$here/callback_plugins" ANSIBLE_CALLBACKS_ENABLED=sparkfleet.vllm.progress,timetable \
     SPARKFLEET_TIMETABLE="$json" "$venv/bin/ansible-playbook" -i "$inv" "${extra[@]}" "$book" >"$logf" 2>&1)
  local rc=$?
  set -e
  echo "$rc"
}

if [ "$deploy" = 1 ]; then
  log "staging the lab and deploying (not timed)"
  for t in "${trees[@]}"; do  # each tree stages and deploys its own lab (one lab: the last tree's deploy counts)
    IFS='=' read -r label dir lab off <<<"$t"
    SPARKLAB_NAME=$lab "$dir/lab/stage.sh" >&2
    rc=$(play "$dir" "$lab" "$out/deploy-$label.log" "" site.yml "$off")
    [ "$rc" = 0 ] || { log "deploy failed (rc $rc): $out/deploy-$label.log"; tail -30 "$out/deploy-$label.log" >&2
                       exit 1; }
  done
fi

"$repo/.venv/bin/python" -c 'import sys; sys.path.insert(0, sys.argv[1]); import model_sync as b; print("machine: " + b.machine())' "$here"
for i in $(seq 1 "$runs"); do
  for t in "${trees[@]}"; do
    IFS='=' read -r label dir lab off <<<"$t"
    rc=$(play "$dir" "$lab" "$out/$label-$i.log" "$out/$label-$i.json" site.yml "$off")
    log "$label run $i: rc $rc ($out/$label-$i.log)"
    [ "$rc" = 0 ] || { tail -30 "$out/$label-$i.log" >&2; exit 1; }
    [ "$status" = 1 ] || continue
    rc=$(play "$dir" "$lab" "$out/status/$label-$i.log" "$out/status/$label-$i.json" playbooks/status.yml "$off")
    log "$label status.yml run $i: rc $rc ($out/status/$label-$i.log)"
    [ "$rc" = 0 ] || { tail -30 "$out/status/$label-$i.log" >&2; exit 1; }
  done
  [ "$floor" = 1 ] || continue
  for kind in empty ping; do  # this tree's floors, in the same round as the runs they stand beside
    [ -f "$out/floor-$kind.yml" ] || "$repo/.venv/bin/python" "$here/noop_floor.py" "$out/current-1.json" "$kind" \
      >"$out/floor-$kind.yml"
    rc=$(play "$repo" "$name" "$out/floor-$kind-$i.log" "$out/floor-$kind-$i.json" "$out/floor-$kind.yml")
    log "floor-$kind run $i: rc $rc ($out/floor-$kind-$i.log)"
    [ "$rc" = 0 ] || { tail -30 "$out/floor-$kind-$i.log" >&2; exit 1; }
  done
done

args=()
rev_of() {  # DIR: its commit, "+changes" when its tracked files differ from it
  local r
  r=$(git -C "$1" rev-parse --short=12 HEAD)
  git -C "$1" diff --quiet HEAD -- 2>/dev/null || r="$r+changes"
  echo "$r"
}
for t in "${trees[@]}"; do
  IFS='=' read -r label dir lab off <<<"$t"
  args+=("$label=$out/$label-*.json" --commit "$label=$(rev_of "$dir")" --lab "$label=$lab")
done
[ "$floor" = 0 ] || args+=(--floor "empty=$out/floor-empty-*.json" --floor "ping=$out/floor-ping-*.json")
"$repo/.venv/bin/python" "$here/timetable_report.py" --top "$top" "${args[@]}"
if [ "$status" = 1 ]; then
  sargs=()
  for t in "${trees[@]}"; do
    IFS='=' read -r label dir lab off <<<"$t"
    sargs+=("$label=$out/status/$label-*.json" --commit "$label=$(rev_of "$dir")" --lab "$label=$lab")
  done
  printf '\n== status.yml ==\n'
  "$repo/.venv/bin/python" "$here/timetable_report.py" --bench B3-status --top "$top" "${sargs[@]}"
fi
log "logs and JSON: $out"
