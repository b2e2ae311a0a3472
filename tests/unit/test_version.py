"""Issue 41.8: the version follows the changelog. 0.2.0 was released, 47 fragments followed, and every build still
said 0.2.0. scripts/version.py holds the rule; `bump` is the one step that moves the version (docs/RELEASING.md)."""

from __future__ import annotations

import importlib.util
import os
import shutil

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _load(root):
    spec = importlib.util.spec_from_file_location("version_%d" % id(root), os.path.join(root, "scripts", "version.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.ROOT = root
    return module


def test_the_version_follows_the_changelog():
    version = _load(ROOT)
    assert version.problems() == []


def _copy(tmp_path):
    for name in ("galaxy.yml", "pyproject.toml", "scripts/version.py", "cli/sparkfleet_cli/__init__.py",
                 "changelogs/changelog.yaml"):
        os.makedirs(os.path.dirname(str(tmp_path / name)), exist_ok=True)
        shutil.copy(os.path.join(ROOT, name), str(tmp_path / name))
    (tmp_path / "changelogs" / "fragments").mkdir()
    return _load(str(tmp_path))


def test_pending_fragments_need_a_version_above_the_last_release(tmp_path):
    version = _copy(tmp_path)
    last = version.released()[-1]
    version.bump(last)
    assert version.problems() == []                       # right after a release: nothing waits
    (tmp_path / "changelogs" / "fragments" / "x.yml").write_text("bugfixes:\n  - x\n")
    assert "not above the last release %s" % last in version.problems()[0]
    major, minor, _patch = version.key(last)
    version.bump("%d.%d.0" % (major, minor + 1))
    assert version.problems() == []
    assert set(version.versions().values()) == {"%d.%d.0" % (major, minor + 1)}
    (tmp_path / "pyproject.toml").write_text((tmp_path / "pyproject.toml").read_text().replace(
        'version = "%d.%d.0"' % (major, minor + 1), 'version = "9.9.9"'))
    assert "the files disagree" in version.problems()[0]
    with pytest.raises(ValueError):
        version.bump("v1")
