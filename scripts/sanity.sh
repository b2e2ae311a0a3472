#!/usr/bin/env bash
# Run `ansible-test sanity` on a copy of the checkout laid out at ansible_collections/sparkfleet/vllm.
# Usage: scripts/sanity.sh [extra ansible-test args]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=${SANITY_WORKDIR:-/var/tmp/sparkfleet-sanity}
dest=$work/ansible_collections/sparkfleet/vllm
rm -rf "$dest"
mkdir -p "$dest"
# Only what git tracks or would track (a clean clone's content), without the collections/ self-link.
(cd "$root" && git ls-files -co --exclude-standard -z | grep -zv '^collections/') |
  (cd "$root" && xargs -0 cp --parents -t "$dest")
# ansible-test downloads a pip bootstrap script from a host we cannot reach: give it an offline one.
pipver=$(sed -n "s/^ *pip='\([0-9.]*\)',\$/\1/p" \
  "$root"/.venv/lib/python3*/site-packages/ansible_test/_internal/python_requirements.py | head -1)
mkdir -p ~/.ansible/test/cache
cp "$root/scripts/ansible_test_get_pip.py" ~/.ansible/test/cache/get_pip_${pipver//./_}.py
cd "$dest"
git init -q && git add -A && git -c user.email=ci@localhost -c user.name=ci commit -qm sanity
exec "$root/.venv/bin/ansible-test" sanity --python 3.11 --color no "$@"
