#!/usr/bin/env bash
# Build (or reuse cached) lab images and the shared Ray/runtime artefacts, then bring the lab up.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
"$here/labctl" guard
"$here/labctl" image
[ -x "$here/build-rayvenv.sh" ] && "$here/build-rayvenv.sh"
[ -x "$here/runtime/build.sh" ] && "$here/runtime/build.sh"
"$here/labctl" up "$@"
