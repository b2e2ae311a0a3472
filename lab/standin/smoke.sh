#!/usr/bin/env bash
# Smoke-test the vLLM stand-in on this machine, without the lab: a network namespace with only `lo`
# (no route anywhere), a private PID + mount namespace, and a chroot into the runtime image's venv layer.
# Starts a one-node Ray head (--num-gpus 1) on 127.0.0.1, runs `vllm serve` (TP=1), queries the API, and
# tears everything down (the PID namespace dies with its init; the netns is deleted).
#
#   lab/standin/smoke.sh [SCENARIO]      SCENARIO = serve (default) | fault:<SPARKLAB_FAULT> | pgmismatch
# Logs: /var/tmp/sparklab/standin-smoke/{vllm.log,result.txt}
set -euo pipefail
SCEN=${1:-serve}
HERE=$(cd "$(dirname "$0")" && pwd)
SL=/var/tmp/sparklab
NS=sfl-standin-test
VROOT=$(find "$SL/cache/runtime" -maxdepth 1 -name 'venv-*.done' -printf '%T@ %p\n' 2>/dev/null | sort -n | tail -1 | cut -d' ' -f2)
VROOT=${VROOT%.done}
[ -n "$VROOT" ] || { echo "build the runtime first: lab/runtime/build.sh" >&2; exit 1; }
W=$SL/standin-smoke
[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 1; }

cleanup() {
  ip netns del "$NS" 2>/dev/null || true
  umount -l "$W/merged" 2>/dev/null || true
}
trap cleanup EXIT
rm -rf "$W"; mkdir -p "$W"/{upper,work,merged,out}
ip netns add "$NS"
ip -n "$NS" link set lo up

[ -d "$W/model" ] || python3 "$HERE/make_model.py" --out "$W/out/model" --shards "${SMOKE_SHARDS:-6}" \
  --shard-mb "${SMOKE_SHARD_MB:-16}" >/dev/null

ip netns exec "$NS" unshare --mount --pid --fork --propagation private bash -s "$VROOT" "$W" "$HERE" "$SCEN" <<'OUTER'
set -euo pipefail
VROOT=$1 W=$2 STANDIN=$3 SCEN=$4
M=$W/merged
mount -t overlay overlay -o "lowerdir=$VROOT,upperdir=$W/upper,workdir=$W/work" "$M"
mount -t proc proc "$M/proc"
mount -t tmpfs -o size=2g tmpfs "$M/dev/shm" 2>/dev/null || { mkdir -p "$M/dev/shm"; mount -t tmpfs -o size=2g tmpfs "$M/dev/shm"; }
[ -e "$M/dev/null" ] || mknod -m 666 "$M/dev/null" c 1 3
[ -e "$M/dev/urandom" ] || mknod -m 666 "$M/dev/urandom" c 1 9
rm -f "$M/dev/nvidia0"; mknod -m 666 "$M/dev/nvidia0" c 1 3   # GPU stand-in: an openable char device
mkdir -p "$M/opt/standin" "$M/models" "$M/out"
mount --bind "$STANDIN" "$M/opt/standin"
mount --bind "$W/out" "$M/out"
cat >"$M/out/run.sh" <<'INNER'
set -u
SCEN=$1
command -v vllm >/dev/null || vllm() { python3 -m sparklab_vllm "$@"; }   # venv layer: no wrapper yet
export RAY_USAGE_STATS_ENABLED=0 VLLM_HOST_IP=127.0.0.1 SPARKLAB_SECONDS_PER_SHARD=${SPARKLAB_SECONDS_PER_SHARD:-0.3}
t0=$(date +%s.%N)
ray start --head --node-ip-address 127.0.0.1 --port 6379 --num-gpus ${SMOKE_TP:-1} --num-cpus 2 --include-dashboard=false \
  --disable-usage-stats >/out/ray-start.log 2>&1 || { cat /out/ray-start.log; exit 1; }
t1=$(date +%s.%N)
echo "ray head up in $(python3 -c "print(round($t1-$t0,1))") s"
case "$SCEN" in
  fault:*) export SPARKLAB_FAULT=${SCEN#fault:} ;;
  pgmismatch) export VLLM_HOST_IP=127.0.0.2 SPARKLAB_PG_TIMEOUT_S=25 ;;
esac
BACKEND=(--distributed-executor-backend "${SMOKE_BACKEND:-ray}")
[ "${SMOKE_BACKEND:-ray}" = none ] && BACKEND=()
vllm serve /out/model --served-model-name tiny --tensor-parallel-size ${SMOKE_TP:-1} "${BACKEND[@]}" \
  --host 127.0.0.1 --port 8000 --api-key sekret --max-model-len 4096 >/out/vllm.log 2>&1 &
VPID=$!
echo "vllm pid $VPID"
ok=0
for i in $(seq 1 240); do
  if grep -q "Application startup complete" /out/vllm.log; then ok=1; break; fi
  if ! kill -0 $VPID 2>/dev/null; then break; fi
  if [ "$SCEN" = fault:hang ] && [ $i -ge 40 ]; then break; fi
  sleep 0.5
done
t2=$(date +%s.%N)
echo "serve ready=$ok after $(python3 -c "print(round($t2-$t1,1))") s; vllm alive=$(kill -0 $VPID 2>/dev/null && echo yes || echo no)"
if [ $ok = 1 ] && [ "$SCEN" = killworker ]; then
  W=$(ps -eo pid,args | awk '/ray::RayWorkerWrapper/ && !/awk/ {print $1}' | tail -1)
  echo "killing rank worker pid $W"; kill -9 "$W"; sleep 1
  python3 - <<'PY'
import json, time, urllib.request, urllib.error
B = "http://127.0.0.1:8000"
def req(path, body=None):
    r = urllib.request.Request(B + path, data=json.dumps(body).encode() if body is not None else None,
                               headers={"Content-Type": "application/json", "Authorization": "Bearer sekret"})
    try:
        with urllib.request.urlopen(r, timeout=90) as resp:
            return resp.status, resp.read().decode()[:200]
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()[:200]
    except OSError as e:
        return "conn", str(e)
print("/health before request", req("/health"))
t = time.time()
print("/v1/completions", req("/v1/completions", {"model": "tiny", "prompt": "hi", "max_tokens": 3}), "%.1fs" % (time.time() - t))
print("/health after", req("/health"))
time.sleep(4)
print("/health 4s later", req("/health"))
PY
  sleep 1; echo "vllm alive after engine death: $(kill -0 $VPID 2>/dev/null && echo yes || echo no)"
elif [ $ok = 1 ]; then
python3 - <<'PY'
import json, urllib.request, urllib.error
B = "http://127.0.0.1:8000"
def req(path, body=None, key=None):
    r = urllib.request.Request(B + path, data=json.dumps(body).encode() if body is not None else None,
                               headers={"Content-Type": "application/json"})
    if key:
        r.add_header("Authorization", "Bearer " + key)
    try:
        with urllib.request.urlopen(r, timeout=60) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
for p in ("/health", "/ping", "/version"):
    print(p, req(p))
print("/v1/models nokey", req("/v1/models"))
print("/v1/models badkey", req("/v1/models", key="nope"))
print("/v1/models", req("/v1/models", key="sekret")[0])
print("/v1/completions", req("/v1/completions", {"model": "tiny", "prompt": "Hello sparks", "max_tokens": 7}, "sekret"))
print("/v1/chat/completions", req("/v1/chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}, "sekret"))
print("/v1/completions wrong model", req("/v1/completions", {"model": "x", "prompt": "a"}, "sekret"))
m = req("/metrics")[1]
print("/metrics", [l for l in m.splitlines() if l.startswith(("vllm:prompt_tokens_total", "vllm:generation_tokens_total"))])
PY
fi
kill -TERM $VPID 2>/dev/null; sleep 3; kill -0 $VPID 2>/dev/null && echo "vllm still alive after SIGTERM"
ray stop >/dev/null 2>&1 || true   # private PID namespace: only this test's Ray
exit 0
INNER
chroot "$M" env -i PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
  LANG=C.UTF-8 PYTHONPATH=/opt/standin SMOKE_TP=${SMOKE_TP:-1} SMOKE_BACKEND=${SMOKE_BACKEND:-ray} ${SPARKLAB_SECONDS_PER_SHARD:+SPARKLAB_SECONDS_PER_SHARD=$SPARKLAB_SECONDS_PER_SHARD} \
  bash /out/run.sh "$SCEN" | tee "$M/out/result.txt"
OUTER
mkdir -p "$SL/standin-smoke-logs"
cp "$W/out/vllm.log" "$SL/standin-smoke-logs/${SCEN//[:\/]/_}-tp${SMOKE_TP:-1}.log" 2>/dev/null || true
cp "$W/out/result.txt" "$SL/standin-smoke-logs/${SCEN//[:\/]/_}-tp${SMOKE_TP:-1}.result" 2>/dev/null || true
