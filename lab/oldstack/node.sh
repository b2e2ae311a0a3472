#!/bin/bash
# vllm_node of the old stack (the container the community two-Spark launchers name so): a Ray head and the API on the
# head node, a Ray worker joined to that head on the others; the GPU held open for as long as it runs.
#   node.sh head NODE_IP API_PORT MODEL | node.sh worker NODE_IP HEAD_IP
set -eu
export RAY_USAGE_STATS_ENABLED=0
exec 3</dev/nvidia0  # inherited by Ray / the API: the container holds the GPU while it lives
common=(--node-ip-address "$2" --num-gpus 1 --object-store-memory 78643200 --disable-usage-stats)
case $1 in
  head)
    ray start --head --port 6379 --include-dashboard=false "${common[@]}"
    exec python3 /opt/oldstack/oldstack.py api "$3" "$4" ;;
  worker)
    exec ray start --address "$3:6379" --block "${common[@]}" ;;
  *) echo "usage: node.sh head NODE_IP API_PORT MODEL | worker NODE_IP HEAD_IP" >&2; exit 2 ;;
esac
