#!/usr/bin/env bash
# Build the shared, read-only Ray venv that lab hosts mount at the same path.
# Idempotent: a finished venv carries .complete and is left alone; a half-built one is rebuilt.
# Usage: lab/build-rayvenv.sh [DEST]   (default /var/tmp/sparklab/share/rayvenv)
set -euo pipefail

DEST="${1:-/var/tmp/sparklab/share/rayvenv}"
RAY_SPEC="${RAY_SPEC:-ray[default]==2.60.0}"
PY=/usr/bin/python3   # Debian's python3: lab hosts have the same interpreter at the same path

if [[ -f "$DEST/.complete" ]] && "$DEST/bin/python" -c 'import ray' 2>/dev/null; then
    echo "rayvenv: $DEST already complete ($("$DEST/bin/python" -c 'import ray; print(ray.__version__)'))"
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
"$DEST/bin/python" -c 'import ray, ray.util.state; print("ray", ray.__version__)'
chmod -R a+rX "$DEST"
date -u +%Y-%m-%dT%H:%M:%SZ > "$DEST/.complete"
echo "rayvenv: built $DEST"
