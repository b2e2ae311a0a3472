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
# A named lab (SPARKLAB_NAME) has its inventory in its state dir (lab/README.md); the shared one in inventories/lab.
case ${SPARKLAB_NAME:-sfl} in sfl) inventory=inventories/lab ;; *) inventory=/var/tmp/sparklab/lab-$SPARKLAB_NAME/inventory ;; esac
exec lab/labctl ctl -- .venv/bin/ansible-playbook site.yml -i "$inventory" "$@"
