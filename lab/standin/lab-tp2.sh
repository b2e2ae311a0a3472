#!/usr/bin/env bash
# Try the runtime image on the lab the way the collection runs it on Sparks: one container per host
# (`docker run --network host --ipc host --device /dev/nvidia0 IMAGE ray start ... --block`), then
# `docker exec HEAD vllm serve ... --tensor-parallel-size 2 --distributed-executor-backend ray`, then the API.
#
#   lab/standin/lab-tp2.sh [up|serve|query|kill-worker|down]   (default: up serve query)
# Needs the lab up (lab/labctl up) and lab/runtime/build.sh done. Everything runs inside lab hosts.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
LAB=$HERE/../labctl
SHARE=/var/tmp/sparklab/share
case ${SPARKLAB_NAME:-sfl} in sfl) TAGFILE=$SHARE/runtime-image.txt ;; *) TAGFILE=$SHARE/runtime-image-$SPARKLAB_NAME.txt ;; esac
[ -f "$TAGFILE" ] || TAGFILE=$SHARE/runtime-image.txt
TAG=$(cat "$TAGFILE")
TAR=$SHARE/sparklab-vllm-runtime-${TAG#*:}.tar
C=sfl-standin-ray
MODEL=/models/sfl-standin-tiny
IF=enp1s0f1np1
ip_of() { echo "10.99.1.$((10 + ${1#spark-}))"; }
x() { "$LAB" exec "$@"; }
log() { printf '%s lab-tp2: %s\n' "$(date -u +%H:%M:%S)" "$*"; }

up() {
  for h in spark-1 spark-2; do
    if ! x "$h" docker image inspect "$TAG" >/dev/null 2>&1; then
      log "$h: docker import $TAG"
      x "$h" docker import --change 'ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENTRYPOINT ["vllm", "serve"]' "$TAR" "$TAG" >/dev/null
    fi
    x "$h" python3 - --out "$MODEL" --shards "${SHARDS:-8}" --shard-mb "${SHARD_MB:-32}" <"$HERE/make_model.py"
    x "$h" docker rm -f "$C" >/dev/null 2>&1 || true
  done
  local head_ip; head_ip=$(ip_of spark-1)
  for h in spark-1 spark-2; do
    local ip role; ip=$(ip_of "$h")
    if [ "$h" = spark-1 ]; then role=(--head --port 6379); else role=(--address "$head_ip:6379"); fi
    log "$h: ray start ${role[*]} --node-ip-address $ip --num-gpus 1"
    x "$h" docker run -d --name "$C" --pull=never --entrypoint ray --network host --ipc host --device /dev/nvidia0 \
      -v /models:/models -e RAY_USAGE_STATS_ENABLED=0 -e VLLM_HOST_IP="$ip" -e GLOO_SOCKET_IFNAME="$IF" \
      -e NCCL_SOCKET_IFNAME="$IF" -e SPARKLAB_SECONDS_PER_SHARD="${SECONDS_PER_SHARD:-1}" ${FAULT:+-e SPARKLAB_FAULT=$FAULT} \
      "$TAG" start "${role[@]}" --node-ip-address "$ip" --num-gpus 1 --include-dashboard=false \
      --disable-usage-stats --block >/dev/null
    [ "$h" = spark-1 ] && sleep 6
  done
  for _try in $(seq 1 60); do
    n=$(x spark-1 docker exec "$C" python3 -c 'import ray; ray.init(address="auto", logging_level="ERROR"); print(sum(1 for n in ray.nodes() if n["Alive"]))' 2>/dev/null || echo 0)
    [ "$n" = 2 ] && break
    sleep 2
  done
  log "ray nodes alive: $n"
}

serve() {
  local t0; t0=$(date +%s)
  x spark-1 docker exec -d "$C" sh -c "exec vllm serve $MODEL --served-model-name tiny --tensor-parallel-size 2 \
    --distributed-executor-backend ray --host $(ip_of spark-1) --port 8000 --api-key sekret >/tmp/vllm.log 2>&1"
  for _try in $(seq 1 300); do
    if x spark-1 docker exec "$C" grep -q "Application startup complete" /tmp/vllm.log 2>/dev/null; then
      log "serving after $(( $(date +%s) - t0 )) s"; return 0
    fi
    if x spark-1 docker exec "$C" grep -q "Engine core initialization failed\|Traceback" /tmp/vllm.log 2>/dev/null; then
      log "serve failed after $(( $(date +%s) - t0 )) s"; x spark-1 docker exec "$C" tail -40 /tmp/vllm.log; return 1
    fi
    sleep 1
  done
  log "not serving after 300 s"; return 1
}

query() {
  x spark-1 python3 - "$(ip_of spark-1)" <<'PY'
import json, sys, urllib.request, urllib.error
B = "http://%s:8000" % sys.argv[1]
def req(path, body=None, key="sekret"):
    r = urllib.request.Request(B + path, data=json.dumps(body).encode() if body is not None else None,
                               headers={"Content-Type": "application/json", "Authorization": "Bearer " + key})
    try:
        with urllib.request.urlopen(r, timeout=60) as resp:
            return resp.status, resp.read().decode()[:300]
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()[:300]
    except OSError as e:
        return "conn", str(e)
print("/health", req("/health"))
print("/v1/models badkey", req("/v1/models", key="x"))
print("/v1/completions", req("/v1/completions", {"model": "tiny", "prompt": "Hello sparks", "max_tokens": 6}))
PY
  for h in spark-1 spark-2; do log "$h nvidia-smi:"; x "$h" nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv || true; done
}

kill_worker() {
  log "killing the Ray container on spark-2"
  x spark-2 docker rm -f "$C" >/dev/null
  sleep 2
  query
}

down() {
  for h in spark-1 spark-2; do x "$h" docker rm -f "$C" >/dev/null 2>&1 || true; x "$h" rm -rf "$MODEL"; done
}

[ $# -gt 0 ] || set -- up serve query
for step in "$@"; do
  case $step in
    up) up ;; serve) serve ;; query) query ;; kill-worker) kill_worker ;; down) down ;; log) x spark-1 docker exec "$C" cat /tmp/vllm.log ;;
    *) echo "unknown step $step" >&2; exit 2 ;;
  esac
done
