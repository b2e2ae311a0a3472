#!/usr/bin/env bash
# Install what the controller needs on a fresh Debian machine: apt packages and the .venv.
# Idempotent and quick when nothing changed. Root required (apt, and the lab needs namespaces).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
log() { printf '[bootstrap] %s\n' "$*" >&2; }
[ "$(id -u)" = 0 ] || { log "run as root"; exit 1; }

# Controller packages; the lab adds its own list.
pkgs=(git rsync openssh-client python3-venv iproute2 util-linux shellcheck)
if [ -f lab/requirements-apt.txt ]; then
  while read -r p; do [ -n "$p" ] && [ "${p#\#}" = "$p" ] && pkgs+=("$p"); done < lab/requirements-apt.txt
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "apt: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Controller venv, rebuilt when requirements.txt changes.
stamp=.venv/.requirements.sha256
want=$(sha256sum requirements.txt | cut -d' ' -f1)
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log "venv: installing requirements.txt into .venv"
  python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check -r requirements.txt
  echo "$want" > "$stamp"
fi
# The `sparkfleet` command (pyproject.toml), editable so it follows the checkout; its deps are in requirements.txt.
if [ ! -x .venv/bin/sparkfleet ]; then
  log "venv: installing the sparkfleet command (pip install -e .)"
  .venv/bin/pip install -q --disable-pip-version-check --no-deps -e .
fi
log "ready: $(.venv/bin/ansible --version | sed -n 1p)"
