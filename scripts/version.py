#!/usr/bin/env python3
"""The collection's version, in the one step that moves it (docs/RELEASING.md).

  scripts/version.py            print the version and whether it follows the changelog
  scripts/version.py bump X.Y.Z  set X.Y.Z in galaxy.yml, pyproject.toml and the CLI (cli/sparkfleet_cli/__init__.py)

The rule (tests/unit/test_version.py holds it): the three files say the same version. While changelog fragments are
waiting (changelogs/fragments/*.yml), that version is the next release's, above the last release in
changelogs/changelog.yaml; right after `antsibull-changelog release` (which empties the fragments), it is that release.
"""

from __future__ import annotations

import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = {
    "galaxy.yml": re.compile(r"^(version: )(\S+)$", re.M),
    "pyproject.toml": re.compile(r'^(version = ")([^"]+)"$', re.M),
    os.path.join("cli", "sparkfleet_cli", "__init__.py"): re.compile(r'^(__version__ = ")([^"]+)"$', re.M),
}
SEMVER = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")


def _read(name):
    with open(os.path.join(ROOT, name), encoding="utf-8") as f:
        return f.read()


def versions():
    """{file: the version it says}."""
    return {name: pattern.search(_read(name)).group(2) for name, pattern in FILES.items()}


def key(version):
    m = SEMVER.match(version or "")
    if not m:
        raise ValueError("%r is not a version X.Y.Z" % version)
    return tuple(int(n) for n in m.groups())


def released():
    """The releases in changelogs/changelog.yaml, in order."""
    names = re.findall(r"^  (\d+\.\d+\.\d+):$", _read(os.path.join("changelogs", "changelog.yaml")), re.M)
    return sorted(names, key=key)


def pending():
    return sorted(glob.glob(os.path.join(ROOT, "changelogs", "fragments", "*.yml")))


def problems():
    """What breaks the rule (empty when the version follows the changelog)."""
    found = versions()
    said = sorted(set(found.values()))
    if len(said) != 1:
        return ["the files disagree: %s; run scripts/version.py bump X.Y.Z" % ", ".join(
            "%s says %s" % item for item in sorted(found.items()))]
    version, last = said[0], (released() or [None])[-1]
    if last is None:
        return []
    if pending() and key(version) <= key(last):
        return ["%d changelog fragments wait for a release, yet the version %s is not above the last release %s: "
                "run scripts/version.py bump X.Y.Z (docs/RELEASING.md)" % (len(pending()), version, last)]
    if not pending() and version != last:
        return ["no fragment waits, so the version %s should be the last release %s" % (version, last)]
    return []


def bump(version):
    key(version)
    for name, pattern in FILES.items():
        text = _read(name)
        text, n = pattern.subn(lambda m: m.group(1) + version + ('"' if m.group(0).endswith('"') else ""), text,
                               count=1)
        if n != 1:
            raise SystemExit("%s: no version line found" % name)
        with open(os.path.join(ROOT, name), "w", encoding="utf-8") as f:
            f.write(text)


def main(argv):
    if argv[:1] == ["bump"] and len(argv) == 2:
        try:
            bump(argv[1])
        except ValueError as e:
            sys.stderr.write("version.py: %s\n" % e)
            return 2
    elif argv:
        sys.stderr.write(__doc__)
        return 2
    print(versions()["galaxy.yml"])
    wrong = problems()
    for line in wrong:
        sys.stderr.write("version.py: %s\n" % line)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
