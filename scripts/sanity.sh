#!/usr/bin/env bash
# Run `ansible-test sanity` on the collection as it ships: the files `ansible-galaxy collection build` would
# pack (tracked files minus galaxy.yml's build_ignore: the lab, benchmarks, scripts and tests are not part of
# the collection), plus tests/unit, which ansible-test checks as the collection's own tests although it does
# not ship; laid out at ansible_collections/sparkfleet/vllm.
# Usage: scripts/sanity.sh [extra ansible-test args]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=${SANITY_WORKDIR:-/var/tmp/sparkfleet-sanity}
dest=$work/ansible_collections/sparkfleet/vllm
rm -rf "$dest"
mkdir -p "$dest"
(cd "$root" && git ls-files -co --exclude-standard -z) | "$root/.venv/bin/python" -c '
import fnmatch, os, sys, yaml
ignore = yaml.safe_load(open("galaxy.yml")).get("build_ignore", [])
for path in sys.stdin.read().split("\0"):
    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    if path and (path.startswith("tests/unit/") or not any(fnmatch.fnmatch(p, pat) for p in prefixes for pat in ignore)):
        sys.stdout.write(path + "\0")
' | (cd "$root" && xargs -0 cp --parents -t "$dest")
# ansible-test downloads a pip bootstrap script from a host we cannot reach: give it an offline one.
pipver=$(sed -n "s/^ *pip='\([0-9.]*\)',\$/\1/p" \
  "$root"/.venv/lib/python3*/site-packages/ansible_test/_internal/python_requirements.py | head -1)
mkdir -p ~/.ansible/test/cache
cp "$root/scripts/ansible_test_get_pip.py" ~/.ansible/test/cache/"get_pip_${pipver//./_}.py"
cd "$dest"
git init -q && git add -A && git -c user.email=ci@localhost -c user.name=ci commit -qm sanity
exec "$root/.venv/bin/ansible-test" sanity --python 3.11 --color no "$@"
