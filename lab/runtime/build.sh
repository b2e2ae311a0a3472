#!/usr/bin/env bash
# Build the lab's vLLM runtime image without a registry (idempotent; cached under /var/tmp/sparklab/).
#
#   lab/runtime/build.sh            build (or reuse) and print the image tag
#   lab/runtime/build.sh --print    print the tag this checkout would build, build nothing
#
# Layers, each cached by the hash of what it is made from:
#   base  debootstrap bookworm minbase + python3, python3-venv, iproute2, procps, ca-certificates, tini
#   venv  /opt/venv made by the image's /usr/bin/python3 (Debian 3.11.2, same as this machine's) holding
#         ray[default], torch (CPU wheel from /opt/wheels only), numpy
#   final the stand-in (lab/standin/sparklab_vllm) as the `vllm` command and the `vllm` Python package (the few
#         APIs the image check asks: lab/standin/vllm), tarred to
#         /var/tmp/sparklab/share/sparklab-vllm-runtime-<hash>.tar
# The tag sparklab/vllm-runtime:<hash> goes to /var/tmp/sparklab/share/runtime-image.txt (runtime-image-<name>.txt
# when SPARKLAB_NAME names a separate lab instance, so parallel checkouts keep their own stand-in). Lab hosts load it with
#   docker import --change 'ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
#     --change 'ENTRYPOINT ["vllm", "serve"]' /var/tmp/sparklab/share/sparklab-vllm-runtime-<hash>.tar \
#     sparklab/vllm-runtime:<hash>
# (the entrypoint of vllm/vllm-openai: a container started without --entrypoint runs `vllm serve ...`).
# lab/stage.sh does that on the head only; --release 0.10.2 adds a "too old" tag (SPARKLAB_VLLM_RELEASE).
# Network: debootstrap talks to the Debian mirror, pip (in the chroot) to PyPI; nothing else.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
STANDIN=$REPO/lab/standin
SL=${SPARKLAB_DIR:-/var/tmp/sparklab}
CACHE=$SL/cache/runtime
SHARE=$SL/share
# The tag this checkout built, per lab instance (SPARKLAB_NAME): labs of other checkouts keep their own image.
case ${SPARKLAB_NAME:-sfl} in sfl) TAG_FILE=$SHARE/runtime-image.txt ;; *) TAG_FILE=$SHARE/runtime-image-$SPARKLAB_NAME.txt ;; esac
MIRROR=${SPARKLAB_MIRROR:-http://deb.debian.org/debian}
TORCH_WHEEL=${SPARKLAB_TORCH_WHEEL:-$(find /opt/wheels -maxdepth 1 -name 'torch-2.13.0+cpu-cp311-*.whl' 2>/dev/null | sort | head -1)}
BASE_PKGS=python3,python3-venv,iproute2,procps,ca-certificates,tini
# Ray: the lab's one Ray variable (lab/ray-version, the Sparks' image's Ray; SPARKLAB_RAY_VERSION overrides it). The
# venv layer's hash carries it, so an image of another Ray is never reused as this one.
RAY_VERSION=${SPARKLAB_RAY_VERSION:-$(tr -d '[:space:]' <"$REPO/lab/ray-version")}
[[ $RAY_VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "build.sh: bad Ray version '$RAY_VERSION' (lab/ray-version)" >&2; exit 2; }
PIP_PKGS=("ray[default]==$RAY_VERSION" "numpy==2.4.6")

log() { printf '%s build.sh: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
h() { sha256sum | cut -c1-12; }
# a recipe section, without comment lines (editing a comment must not rebuild a layer)
recipe() { sed -n "/^# $1-RECIPE/,/^# END-$1-RECIPE/p" "$0" | grep -v '^[[:space:]]*#'; }

[ -f "$TORCH_WHEEL" ] || die "no CPU torch wheel at /opt/wheels/torch-2.13.0+cpu-cp311-*.whl (set SPARKLAB_TORCH_WHEEL)"
BASE_HASH=$(printf 'bookworm minbase %s %s\n' "$BASE_PKGS" "$(recipe BASE)" | h)
VENV_HASH=$(printf '%s %s %s %s\n' "$BASE_HASH" "${PIP_PKGS[*]}" "$(basename "$TORCH_WHEEL")" "$(recipe VENV)" | h)
FINAL_HASH=$( { echo "$VENV_HASH"; recipe FINAL;
  cd "$STANDIN" && find sparklab_vllm vllm make_model.py -name '*.py' -print0 | sort -z | xargs -0 sha256sum; } | h)
TAG=sparklab/vllm-runtime:$FINAL_HASH
TAR=$SHARE/sparklab-vllm-runtime-$FINAL_HASH.tar
if [ "${1:-}" = "--print" ]; then echo "$TAG"; exit 0; fi
[ "$(id -u)" = 0 ] || die "run as root (debootstrap, chroot)"

mkdir -p "$CACHE" "$SHARE"
exec 9>"$CACHE/.lock"; flock 9
T0=$(date +%s)

if [ -f "$TAR" ] && [ -f "$TAR.done" ]; then
  echo "$TAG" >"$TAG_FILE.tmp" && mv "$TAG_FILE.tmp" "$TAG_FILE"
  log "up to date: $TAR ($(du -m "$TAR" | cut -f1) MB)"; echo "$TAG"; exit 0
fi

MOUNTED=()
cleanup() {
  local m
  for m in "${MOUNTED[@]:-}"; do
    if [ -n "$m" ]; then umount -l "$m" 2>/dev/null || true; fi
  done
}
trap cleanup EXIT

# BASE-RECIPE
BASE=$CACHE/base-$BASE_HASH
if [ ! -f "$BASE.done" ]; then
  command -v debootstrap >/dev/null || die "apt-get install debootstrap"
  rm -rf "$BASE"
  log "debootstrap bookworm minbase -> $BASE"
  debootstrap --variant=minbase --include="$BASE_PKGS" bookworm "$BASE" "$MIRROR" >"$BASE.log" 2>&1 \
    || { tail -20 "$BASE.log" >&2; die "debootstrap failed (log $BASE.log)"; }
  chroot "$BASE" apt-get clean
  rm -rf "$BASE"/var/lib/apt/lists/* "$BASE"/var/cache/apt/*.bin "$BASE"/usr/share/doc/* "$BASE"/usr/share/man/* \
    "$BASE"/usr/share/info/* "$BASE"/var/log/*.log
  find "$BASE"/usr/share/locale -mindepth 1 -maxdepth 1 ! -name 'locale.alias' -exec rm -rf {} +
  touch "$BASE.done"
fi
# END-BASE-RECIPE

# VENV-RECIPE
VROOT=$CACHE/venv-$VENV_HASH
if [ ! -f "$VROOT.done" ]; then
  rm -rf "$VROOT"
  log "copying base -> $VROOT"
  cp -a "$BASE" "$VROOT"
  cp /etc/resolv.conf "$VROOT/etc/resolv.conf"
  mkdir -p "$VROOT/tmp/wheels" && cp "$TORCH_WHEEL" "$VROOT/tmp/wheels/"
  mount -t proc proc "$VROOT/proc" && MOUNTED+=("$VROOT/proc")
  log "venv: /opt/venv with the image's python3 $(chroot "$VROOT" /usr/bin/python3 -V 2>&1)"
  # this machine's TLS interception CA is needed for PyPI during the build only; it is removed below
  cp /etc/ssl/certs/ca-certificates.crt "$VROOT/tmp/build-ca.crt"
  CH=(chroot "$VROOT" env -i PATH=/opt/venv/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8
      PIP_CERT=/tmp/build-ca.crt PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_DEFAULT_TIMEOUT=180)
  "${CH[@]}" /usr/bin/python3 -m venv /opt/venv
  # torch only from the local CPU wheel: install it first by path, then pin it so nothing can swap in a CUDA build.
  "${CH[@]}" /opt/venv/bin/pip install -q "/tmp/wheels/$(basename "$TORCH_WHEEL")"
  "${CH[@]}" /bin/sh -c "/opt/venv/bin/pip freeze | grep -i '^torch' > /tmp/constraints.txt"
  "${CH[@]}" /opt/venv/bin/pip install -q -c /tmp/constraints.txt "${PIP_PKGS[@]}"
  if "${CH[@]}" /opt/venv/bin/pip list 2>/dev/null | grep -qiE '^(nvidia-|triton)'; then
    die "a CUDA package slipped into the venv: $("${CH[@]}" /opt/venv/bin/pip list | grep -iE '^(nvidia-|triton)' | tr '\n' ' ')"
  fi
  "${CH[@]}" /opt/venv/bin/python -c 'import torch, ray, numpy; assert torch.__version__.endswith("+cpu"), torch.__version__'
  "${CH[@]}" /opt/venv/bin/python -c 'import sys, ray; sys.exit(ray.__version__ != sys.argv[1] and "ray " + ray.__version__)' \
    "$RAY_VERSION"
  umount "$VROOT/proc"; MOUNTED=()
  # Trim what a CPU runtime never reads: C++ headers and tests of torch, pip caches. Bytecode stays: every
  # `docker run --rm` starts from the image, and recompiling ray+torch on each start costs seconds.
  SP=$VROOT/opt/venv/lib/python3.11/site-packages
  rm -rf "$SP"/torch/include "$SP"/torch/test "$SP"/torch/testing/_internal/generated "$SP"/caffe2 \
    "$VROOT"/tmp/wheels "$VROOT"/tmp/constraints.txt "$VROOT"/tmp/build-ca.crt "$VROOT"/root/.cache
  find "$SP" -depth -type d \( -name tests -o -name test \) -path '*/site-packages/*/*' \
    ! -path '*/torch/*' -exec rm -rf {} + 2>/dev/null || true
  : >"$VROOT/etc/resolv.conf"
  touch "$VROOT.done"
fi
# END-VENV-RECIPE

# FINAL-RECIPE
STAGE=$CACHE/final-$FINAL_HASH
rm -rf "$STAGE"
cp -al "$VROOT" "$STAGE"          # hard links: the venv layer stays untouched, we only add new files
SPD=$STAGE/opt/venv/lib/python3.11/site-packages
mkdir -p "$SPD/sparklab_vllm"
(cd "$STANDIN/sparklab_vllm" && find . -name '*.py' -exec install -D -m 0644 {} "$SPD/sparklab_vllm/{}" \;)
(cd "$STANDIN/vllm" && find . -name '*.py' -exec install -D -m 0644 {} "$SPD/vllm/{}" \;)
install -m 0644 "$STANDIN/make_model.py" "$SPD/sparklab_vllm/make_model.py"   # for the `hf download` stand-in
cat >"$STAGE/opt/venv/bin/vllm" <<'EOF'
#!/opt/venv/bin/python3
# sparklab stand-in for the `vllm` command (lab only; see sparklab_vllm/__init__.py)
import sys
from sparklab_vllm.cli import main
if __name__ == "__main__":  # multiprocessing's spawn re-imports this script in the EngineCore process
    sys.exit(main())
EOF
chmod 0755 "$STAGE/opt/venv/bin/vllm"
cat >"$STAGE/opt/venv/bin/hf" <<'EOF'
#!/opt/venv/bin/python3
# sparklab stand-in for huggingface_hub's `hf` (download writes the lab's generated model; no network)
import sys
from sparklab_vllm.hf import main
sys.exit(main())
EOF
chmod 0755 "$STAGE/opt/venv/bin/hf"
chroot "$STAGE" /opt/venv/bin/python3 -m compileall -q /opt/venv/lib/python3.11/site-packages/sparklab_vllm \
  /opt/venv/lib/python3.11/site-packages/vllm >/dev/null
echo "$TAG" >"$STAGE/etc/sparklab-runtime-image"
log "tar -> $TAR"
tar -C "$STAGE" --numeric-owner -cf "$TAR.partial" .
mv "$TAR.partial" "$TAR"
touch "$TAR.done"
rm -rf "$STAGE"
# END-FINAL-RECIPE
echo "$TAG" >"$TAG_FILE.tmp" && mv "$TAG_FILE.tmp" "$TAG_FILE"
# Keep the three newest image tars and every tar a lab instance's tag file names (a playbook that read its tag file
# a minute ago can still import its tag).
find "$SHARE" -maxdepth 1 -name 'sparklab-vllm-runtime-*.tar' -printf '%T@ %p\n' | sort -rn | tail -n +4 |
  cut -d' ' -f2 | while read -r old; do
    grep -qsx "sparklab/vllm-runtime:$(basename "$old" .tar | sed 's/^sparklab-vllm-runtime-//')" "$SHARE"/runtime-image*.txt ||
      rm -f "$old" "$old.done"
  done
log "built $TAG: $(du -m "$TAR" | cut -f1) MB in $(( $(date +%s) - T0 )) s"
echo "$TAG"
