#!/usr/bin/env bash
# Build the shared, read-only Ray venv that lab hosts mount at the same path.
# Ray's version is the lab's one variable, lab/ray-version (the Sparks' image's Ray; SPARKLAB_RAY_VERSION overrides
# it), and the venv's path carries it: /var/tmp/sparklab/share/rayvenv-<version>. A venv of another version is never
# reused as this one (checkouts on other versions keep theirs).
# Idempotent: a finished venv carries .complete and the version it holds is checked; a half-built one is rebuilt.
# Usage: lab/build-rayvenv.sh [DEST]   (default /var/tmp/sparklab/share/rayvenv-<version>)
#        lab/build-rayvenv.sh --print  (the path this checkout uses, builds nothing)
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
RAY_VERSION=${SPARKLAB_RAY_VERSION:-$(tr -d '[:space:]' <"$HERE/ray-version")}
[[ $RAY_VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "rayvenv: bad Ray version '$RAY_VERSION' (lab/ray-version)" >&2; exit 2; }
if [[ ${1:-} == --print ]]; then echo "/var/tmp/sparklab/share/rayvenv-$RAY_VERSION"; exit 0; fi
DEST="${1:-/var/tmp/sparklab/share/rayvenv-$RAY_VERSION}"
RAY_SPEC="ray[default]==$RAY_VERSION"
PY=/usr/bin/python3   # Debian's python3: lab hosts have the same interpreter at the same path

if [[ -f "$DEST/.complete" ]] &&
   [[ $("$DEST/bin/python" -c 'import ray; print(ray.__version__)' 2>/dev/null) == "$RAY_VERSION" ]]; then
    echo "rayvenv: $DEST already complete (ray $RAY_VERSION)"
    exit 0
fi

if ! "$PY" -c 'import ensurepip' 2>/dev/null; then
    # Debian splits venv/ensurepip into python3-venv.
    apt-get install -y python3-venv
fi

rm -rf "$DEST"
mkdir -p "$(dirname "$DEST")"
"$PY" -m venv "$DEST"
"$DEST/bin/pip" install --disable-pip-version-check --no-input --upgrade pip
"$DEST/bin/pip" install --disable-pip-version-check --no-input "$RAY_SPEC"
"$DEST/bin/python" -c 'import sys, ray, ray.util.state; print("ray", ray.__version__); sys.exit(ray.__version__ != sys.argv[1])' "$RAY_VERSION"
chmod -R a+rX "$DEST"
date -u +%Y-%m-%dT%H:%M:%SZ > "$DEST/.complete"
echo "rayvenv: built $DEST"
