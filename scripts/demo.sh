#!/usr/bin/env bash
# The main job on the local lab: build (or reuse) the lab and its images, bring it up, stage it like a user's
# Sparks (image present, model downloaded on the head), then run site.yml from the lab's control namespace,
# which has no route out of the machine. Ends with a real completion from the served API.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/bootstrap.sh
lab/prepare.sh
lab/stage.sh
exec lab/labctl ctl -- .venv/bin/ansible-playbook site.yml -i inventories/lab "$@"
