"""Every package requirements.txt pins has a user: code that imports it, a script or test that runs its
command, or another pinned package that needs it. A pin nobody uses is a download and a CVE feed for nothing."""

from __future__ import annotations

import os
import re
from importlib import metadata

import pytest

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
_SKIP_DIRS = {".git", ".venv", "collections", "node_modules", ".hypothesis", "output"}


def _pins():
    pins = []
    with open(os.path.join(ROOT, "requirements.txt"), encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^([A-Za-z0-9_.-]+)==\S+", line.strip())
            if m:
                pins.append(m.group(1))
    return pins


def _sources():
    """The text of every Python file, shell script and CI/tox-like script of the checkout."""
    texts = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS]
        for name in filenames:
            path = os.path.join(dirpath, name)
            if name.endswith((".py", ".sh")) or os.path.basename(dirpath) in ("scripts", ".ci"):
                try:
                    with open(path, encoding="utf-8") as f:
                        texts.append(f.read())
                except (OSError, UnicodeDecodeError):
                    continue
    return "\n".join(texts)


def _norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def _import_names(dist):
    top = dist.read_text("top_level.txt")
    if top:
        return [n for n in top.split() if n and not n.startswith("_")]
    names = set()
    for f in dist.files or []:
        first = f.parts[0]
        if first.endswith((".dist-info", ".data")) or first.startswith("_") or first == "..":
            continue
        names.add(first[:-3] if first.endswith(".py") else first)
    return sorted(names)


def _required_by_other_pins(name, pins):
    for other in pins:
        if _norm(other) == _norm(name):
            continue
        try:
            requires = metadata.requires(other) or []
        except metadata.PackageNotFoundError:
            continue
        for req in requires:
            if "extra ==" in req:
                continue
            if _norm(re.split(r"[\s;<>=!~\[(]", req, 1)[0]) == _norm(name):
                return other
    return None


@pytest.fixture(scope="module")
def sources():
    return _sources()


@pytest.mark.parametrize("name", _pins())
def test_every_pinned_package_has_a_user(name, sources):
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        pytest.skip("%s is not installed here: pip install -r requirements.txt" % name)
    why = []
    for mod in _import_names(dist):
        # import statements, also inside program text run elsewhere ("import json, sys, ansible_runner"),
        # pytest.importorskip, and safetensors' framework="numpy" (which imports numpy itself).
        m = re.escape(mod)
        pattern = (r"(?:^|[\s\"';])(?:import|from)\s+(?:[\w.]+\s*,\s*)*%s\b|importorskip\(\s*[\"']%s\b|"
                   r"framework=[\"']%s[\"']" % (m, m, m))
        if re.search(pattern, sources, re.M):
            why.append("imports %s" % mod)
    for ep in dist.entry_points:
        if ep.group == "console_scripts" and re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(ep.name), sources):
            why.append("runs %s" % ep.name)
    needer = _required_by_other_pins(name, _pins())
    if needer:
        why.append("needed by %s" % needer)
    assert why, ("%s is pinned in requirements.txt but nothing imports it, runs its command or needs it: "
                 "use it or drop the pin" % name)
