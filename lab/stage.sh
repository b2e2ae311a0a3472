#!/usr/bin/env bash
# Put the running lab where a user's Sparks are before they run site.yml: the runtime image on the head only (as
# if pulled there: the workers have no route to any registry, so the collection must move it over the fabric)
# and the model on the head (as if downloaded; the lab has no network). Idempotent: what is already there is left
# alone; the image is removed from the workers so every deployment proves the transfer.
#   lab/stage.sh [--shards N] [--shard-mb M] [--keep-workers] [--release V]
# --keep-workers leaves an image already on a worker in place; --release V also imports the same image as
# <tag>-vllm<V>, whose stand-in plays vLLM V (e.g. 0.10.2: too old for the lab's Qwen3.5 model).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
share=/var/tmp/sparklab/share
shards=8 shard_mb=32 keep_workers=0 release=
while [ $# -gt 0 ]; do
  case $1 in
    --shards) shards=$2; shift 2 ;;
    --shard-mb) shard_mb=$2; shift 2 ;;
    --keep-workers) keep_workers=1; shift ;;
    --release) release=$2; shift 2 ;;
    *) echo "usage: $0 [--shards N] [--shard-mb M] [--keep-workers] [--release V]" >&2; exit 2 ;;
  esac
done
log() { printf '[stage] %s\n' "$*" >&2; }
case ${SPARKLAB_NAME:-sfl} in sfl) tagfile=$share/runtime-image.txt ;; *) tagfile=$share/runtime-image-$SPARKLAB_NAME.txt ;; esac
[ -f "$tagfile" ] || tagfile=$share/runtime-image.txt
tag=$(cat "$tagfile")
tar=$share/sparklab-vllm-runtime-${tag##*:}.tar
[ -f "$tar.done" ] || { log "no runtime image: run lab/runtime/build.sh"; exit 1; }
model=$(sed -n 's/^sparkfleet_model_dir: *//p' "$here/../inventories/lab/group_vars/spark/model.yml" | tr -d '"')

hosts=$("$here/labctl" status | sed -n 's/^\(spark-[0-9]*\): running.*/\1/p')
[ -n "$hosts" ] || { log "the lab is not up: lab/labctl up"; exit 1; }
# vllm/vllm-openai's entrypoint: a container started without --entrypoint runs `vllm serve <its arguments>`.
if "$here/labctl" exec spark-1 docker image inspect "$tag" >/dev/null 2>&1; then
  log "spark-1: image $tag present"
else
  t0=$(date +%s)
  "$here/labctl" exec spark-1 docker import \
    --change 'ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENTRYPOINT ["vllm", "serve"]' "$tar" "$tag" >/dev/null
  log "spark-1: imported $tag in $(( $(date +%s) - t0 )) s"
fi
if [ -n "$release" ]; then  # one ENV layer on top (an offline docker build: no registry involved)
  printf 'FROM %s\nENV SPARKLAB_VLLM_RELEASE=%s\n' "$tag" "$release" |
    "$here/labctl" exec spark-1 docker build -q -t "$tag-vllm$release" - >/dev/null
  log "spark-1: $tag-vllm$release plays vLLM $release"
fi
for h in $hosts; do
  [ "$h" = spark-1 ] && continue
  if [ "$keep_workers" = 0 ] && "$here/labctl" exec "$h" docker image inspect "$tag" >/dev/null 2>&1; then
    # a worker's old copy would hide a missing transfer; containers using it (a deployed Ray) keep running
    if "$here/labctl" exec "$h" docker image rm "$tag" >/dev/null 2>&1; then
      log "$h: removed $tag (the collection moves it from the head)"
    else
      log "$h: $tag in use by a container, kept"
    fi
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
