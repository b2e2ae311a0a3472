#!/bin/bash
# The old stack's launcher (installed on the host as /opt/oldstack/launch-cluster.sh, run by vllm-cluster.service):
# (re)creates the vllm_node container, which then outlives the unit and comes back at boot by docker's own policy.
#   launch-cluster.sh head|worker   (the node's addresses come from /opt/oldstack/cluster.env)
set -eu
. /opt/oldstack/cluster.env
docker rm -f vllm_node >/dev/null 2>&1 || true
if [ "$1" = head ]; then
  docker run -d --name vllm_node --restart unless-stopped --network host --ipc host --device /dev/nvidia0 \
    --entrypoint /opt/oldstack/node.sh "$OLDSTACK_IMAGE" head "$NODE_IP" 8000 zai-org/GLM-4.7-Flash
else
  docker run -d --name vllm_node --restart unless-stopped --network host --ipc host --device /dev/nvidia0 \
    --entrypoint /opt/oldstack/node.sh "$OLDSTACK_IMAGE" worker "$NODE_IP" "$HEAD_IP"
fi
