#!/usr/bin/env bash
# The main job on the local lab: build and start the lab, then run site.yml against it from the lab's
# control namespace (which has no route out of the machine).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/bootstrap.sh
lab/labctl up
exec lab/labctl ctl -- .venv/bin/ansible-playbook site.yml -i inventories/lab "$@"
