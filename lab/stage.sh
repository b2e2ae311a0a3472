#!/usr/bin/env bash
# Put the running lab where the operators' Sparks are before they run site.yml (DOMAIN 10):
# - the runtime image on the head only (as if pulled there: the workers have no route to any registry, so the
#   collection must move it over the fabric) and the model on the head (as if downloaded; the lab has no network);
# - the operators' OLDER deployment on every host, started and enabled at boot (lab/oldstack/): units vllm-cluster,
#   vllm-embeddings, vllm-reranker, vllm-proxy; containers vllm_node (head: a real Ray head on 6379 and an API on
#   8000; workers: a real Ray worker joined to that head), vllm_embeddings (8001, a foreground unit with
#   Restart=always), reranker (8002, started by a oneshot unit, outlives it) with restart policies, all holding
#   /dev/nvidia0; a proxy on 4000. Their image is the runtime image plus one layer, built on each host and tagged
#   like an older release ($OLD_IMAGE), so its content differs from the image the collection deploys.
# Idempotent: what is already there is left alone; the runtime image is removed from the workers so every deployment
# proves the transfer. A host that runs our deployment (sparkfleet-ray active) is past the old stack: it is left as it
# is (a second demo run re-deploys without it).
#   lab/stage.sh [--clean] [--shards N] [--shard-mb M] [--keep-workers] [--release V]
# --clean stages clean hosts instead (the state before this change): an old stack staged earlier is removed
# (units, containers, image; our deployment untouched). --keep-workers leaves an image already on a worker in place;
# --release V also imports the same image as <tag>-vllm<V>, whose stand-in plays vLLM V (e.g. 0.10.2: too old for
# the lab's Qwen3.5 model).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
share=/var/tmp/sparklab/share
shards=8 shard_mb=32 keep_workers=0 release= clean=0
while [ $# -gt 0 ]; do
  case $1 in
    --clean) clean=1; shift ;;
    --shards) shards=$2; shift 2 ;;
    --shard-mb) shard_mb=$2; shift 2 ;;
    --keep-workers) keep_workers=1; shift ;;
    --release) release=$2; shift 2 ;;
    *) echo "usage: $0 [--clean] [--shards N] [--shard-mb M] [--keep-workers] [--release V]" >&2; exit 2 ;;
  esac
done
log() { printf '[stage] %s\n' "$*" >&2; }
case ${SPARKLAB_NAME:-sfl} in sfl) tagfile=$share/runtime-image.txt ;; *) tagfile=$share/runtime-image-$SPARKLAB_NAME.txt ;; esac
[ -f "$tagfile" ] || tagfile=$share/runtime-image.txt
tag=$(cat "$tagfile")
tar=$share/sparklab-vllm-runtime-${tag##*:}.tar
[ -f "$tar.done" ] || { log "no runtime image: run lab/runtime/build.sh"; exit 1; }
model=$(sed -n 's/^sparkfleet_model_dir: *//p' "$here/../inventories/lab/group_vars/spark/model.yml" | tr -d '"')
# The old deployment's image (an older release's tag; content: the runtime image plus lab/oldstack's layer).
OLD_IMAGE=sparklab/vllm-node:glm47-flash-2025.11
OLD_UNITS="vllm-cluster vllm-embeddings vllm-reranker vllm-proxy"
OLD_CONTAINERS="vllm_node vllm_embeddings reranker"

hosts=$("$here/labctl" status | sed -n 's/^\(spark-[0-9]*\): running.*/\1/p')
[ -n "$hosts" ] || { log "the lab is not up: lab/labctl up"; exit 1; }
head_host=spark-1
x() { "$here/labctl" exec "$@"; }
fabric_ip() { echo "10.99.1.$((10 + ${1#spark-}))"; }

import_runtime() {  # HOST: the runtime image from the shared tar, as the head has it after a pull
  local t0
  t0=$(date +%s)
  # vllm/vllm-openai's entrypoint: a container started without --entrypoint runs `vllm serve <its arguments>`.
  x "$1" docker import \
    --change 'ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENTRYPOINT ["vllm", "serve"]' "$tar" "$tag" >/dev/null
  log "$1: imported $tag in $(( $(date +%s) - t0 )) s"
}

if x "$head_host" docker image inspect "$tag" >/dev/null 2>&1; then
  log "$head_host: image $tag present"
else
  import_runtime "$head_host"
fi
if [ -n "$release" ]; then  # one ENV layer on top (an offline docker build: no registry involved)
  printf 'FROM %s\nENV SPARKLAB_VLLM_RELEASE=%s\n' "$tag" "$release" |
    x "$head_host" docker build -q -t "$tag-vllm$release" - >/dev/null
  log "$head_host: $tag-vllm$release plays vLLM $release"
fi

# ------------------------------------------------------------------------------------------------ the old stack
ours_running() {
  local h
  for h in $hosts; do x "$h" systemctl is-active --quiet sparkfleet-ray && return 0; done
  return 1
}

old_image() {  # HOST: build the old image from the runtime image on the host (importing that first where absent)
  local h=$1
  x "$h" docker image inspect "$OLD_IMAGE" >/dev/null 2>&1 && return 0
  x "$h" docker image inspect "$tag" >/dev/null 2>&1 || import_runtime "$h"
  tar -C "$here/oldstack" -cf - Dockerfile node.sh oldstack.py |
    x "$h" docker build -q --build-arg "BASE=$tag" -t "$OLD_IMAGE" - >/dev/null
  log "$h: built $OLD_IMAGE (the old deployment's image: $tag plus one layer)"
}

install_old() {  # HOST ROLE: the old stack's files and units, enabled at boot and started
  local h=$1 role=$2 u units
  units="vllm-cluster"
  [ "$role" = head ] && units="vllm-cluster vllm-embeddings vllm-reranker vllm-proxy"
  x "$h" mkdir -p /opt/oldstack
  for f in launch-cluster.sh oldstack.py; do
    x "$h" sh -c "cat > /opt/oldstack/$f && chmod 755 /opt/oldstack/$f" < "$here/oldstack/$f"
  done
  printf 'OLDSTACK_IMAGE=%s\nNODE_IP=%s\nHEAD_IP=%s\n' "$OLD_IMAGE" "$(fabric_ip "$h")" "$(fabric_ip "$head_host")" |
    x "$h" sh -c 'cat > /opt/oldstack/cluster.env'
  for u in $units; do
    sed -e "s|@ROLE@|$role|g" -e "s|@IMAGE@|$OLD_IMAGE|g" "$here/oldstack/$u.service" |
      x "$h" sh -c "cat > /etc/systemd/system/$u.service"
  done
  x "$h" systemctl daemon-reload
  for u in $units; do
    x "$h" systemctl enable --quiet "$u.service"
    # a container the collection stopped kept --restart=no: the unit creates it again with its policy
    x "$h" systemctl is-active --quiet "$u.service" || x "$h" systemctl start "$u.service"
  done
}

wait_for() {  # HOST WHAT SECONDS CMD...: until CMD succeeds on HOST
  local h=$1 what=$2 limit=$3 t0
  shift 3
  t0=$(date +%s)
  until x "$h" "$@" >/dev/null 2>&1; do
    if [ $(( $(date +%s) - t0 )) -ge "$limit" ]; then log "$h: $what not ready after $limit s"; return 1; fi
    sleep 2
  done
}

remove_old() {  # HOST: every trace of the old stack (--clean)
  local h=$1 u c
  for u in $OLD_UNITS; do
    x "$h" test -e "/etc/systemd/system/$u.service" || continue
    x "$h" systemctl disable --now --quiet "$u.service" 2>/dev/null || true
    x "$h" rm -f "/etc/systemd/system/$u.service"
  done
  for c in $OLD_CONTAINERS; do x "$h" docker rm -f "$c" >/dev/null 2>&1 || true; done
  x "$h" systemctl daemon-reload
  x "$h" rm -rf /opt/oldstack
  x "$h" docker image rm "$OLD_IMAGE" >/dev/null 2>&1 || true
}

if [ "$clean" = 1 ]; then
  for h in $hosts; do
    if x "$h" sh -c "test -d /opt/oldstack || docker image inspect $OLD_IMAGE >/dev/null 2>&1"; then
      remove_old "$h"
      log "$h: old stack removed (clean host)"
    fi
  done
elif ours_running; then
  log "our deployment runs (sparkfleet-ray active): the old stack is left as it is (lab/stage.sh --clean removes it)"
else
  t0=$(date +%s)
  for h in $hosts; do old_image "$h" & done
  wait
  install_old "$head_host" head
  hip=$(fabric_ip "$head_host")
  # a real Ray head on 6379 and the APIs (8000-8002) and the proxy (4000) on the head
  for p in 6379 8000 8001 8002 4000; do
    wait_for "$head_host" "port $p" 180 bash -c "exec 3<>/dev/tcp/127.0.0.1/$p"
  done
  for h in $hosts; do [ "$h" = "$head_host" ] || install_old "$h" worker; done
  n=$(echo "$hosts" | wc -w)
  # every worker's Ray joined the OLD head (what a new worker would also join, were it not checked)
  wait_for "$head_host" "$n Ray nodes in the old cluster" 240 docker exec vllm_node sh -c \
    "test \$(ray status --address $hip:6379 2>/dev/null | grep -c ' node_') -ge $n"
  log "old stack up on $(echo "$hosts" | tr '\n' ' ')in $(( $(date +%s) - t0 )) s: Ray head $hip:6379 with $n nodes," \
      "APIs :8000-8002, proxy :4000, units enabled, containers with restart policies holding /dev/nvidia0"
fi

for h in $hosts; do
  [ "$h" = "$head_host" ] && continue
  if [ "$keep_workers" = 0 ] && x "$h" docker image inspect "$tag" >/dev/null 2>&1; then
    # a worker's copy would hide a missing transfer; containers using it (a deployed Ray) keep running, and the old
    # image built on it keeps its layers (untagged: the collection still moves the image by its name)
    if x "$h" docker image rm "$tag" >/dev/null 2>&1; then
      log "$h: removed $tag (the collection moves it from the head)"
    else
      log "$h: $tag in use by a container, kept"
    fi
  fi
done

if x "$head_host" test -f "$model/model.safetensors.index.json"; then
  log "$head_host: model present at $model"
else
  x "$head_host" install -d -o spark -g spark "$(dirname "$model")"
  x "$head_host" runuser -u spark -- python3 - --out "$model.partial" --shards "$shards" \
    --shard-mb "$shard_mb" --name "$(basename "$model")" < "$here/standin/make_model.py" >/dev/null
  x "$head_host" mv "$model.partial" "$model"
  log "$head_host: generated a $shards x $shard_mb MiB model at $model"
fi
