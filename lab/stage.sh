#!/usr/bin/env bash
# Put the running lab where a user's Sparks are before they run site.yml: the runtime image present on every
# node (as if pulled from a registry; the lab has none) and the model on the head (as if downloaded; the lab
# has no network). Idempotent: what is already there is left alone.
#   lab/stage.sh [--shards N] [--shard-mb M]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
share=/var/tmp/sparklab/share
shards=8 shard_mb=32
while [ $# -gt 0 ]; do
  case $1 in
    --shards) shards=$2; shift 2 ;;
    --shard-mb) shard_mb=$2; shift 2 ;;
    *) echo "usage: $0 [--shards N] [--shard-mb M]" >&2; exit 2 ;;
  esac
done
log() { printf '[stage] %s\n' "$*" >&2; }
tag=$(cat "$share/runtime-image.txt")
tar=$share/sparklab-vllm-runtime-${tag##*:}.tar
[ -f "$tar.done" ] || { log "no runtime image: run lab/runtime/build.sh"; exit 1; }
model=$(sed -n 's/^sparkfleet_model_dir: *//p' "$here/../inventories/lab/group_vars/spark/model.yml" | tr -d '"')

hosts=$("$here/labctl" status | sed -n 's/^\(spark-[0-9]*\): running.*/\1/p')
[ -n "$hosts" ] || { log "the lab is not up: lab/labctl up"; exit 1; }
for h in $hosts; do
  if "$here/labctl" exec "$h" docker image inspect "$tag" >/dev/null 2>&1; then
    log "$h: image $tag present"
  else
    t0=$(date +%s)
    "$here/labctl" exec "$h" docker import \
      --change 'ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'ENTRYPOINT []' "$tar" "$tag" >/dev/null
    log "$h: imported $tag in $(( $(date +%s) - t0 )) s"
  fi
done

if "$here/labctl" exec spark-1 test -f "$model/model.safetensors.index.json"; then
  log "spark-1: model present at $model"
else
  "$here/labctl" exec spark-1 install -d -o spark -g spark "$(dirname "$model")"
  "$here/labctl" exec spark-1 runuser -u spark -- python3 - --out "$model.partial" --shards "$shards" \
    --shard-mb "$shard_mb" --name "$(basename "$model")" < "$here/standin/make_model.py" >/dev/null
  "$here/labctl" exec spark-1 mv "$model.partial" "$model"
  log "spark-1: generated a $shards x $shard_mb MiB model at $model"
fi
