"""`pip install .` gives the `sparkfleet` command; the collection tarball does not carry it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile

import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def test_pyproject_declares_the_console_script_and_its_deps():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    assert project["scripts"] == {"sparkfleet": "sparkfleet_cli.cli:run"}
    deps = " ".join(project["dependencies"])
    assert "ansible-runner" in deps and "rich" in deps and "ansible-core" in deps
    # The versions of the command and the collection move together.
    with open(os.path.join(ROOT, "galaxy.yml"), encoding="utf-8") as f:
        assert project["version"] == yaml.safe_load(f)["version"]


def test_the_collection_build_leaves_the_cli_out():
    with open(os.path.join(ROOT, "galaxy.yml"), encoding="utf-8") as f:
        ignore = yaml.safe_load(f)["build_ignore"]
    assert {"cli", "pyproject.toml", "sparkfleet-reports"} <= set(ignore)


@pytest.mark.slow
def test_wheel_puts_sparkfleet_on_path(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(os.path.join(ROOT, name), src / name)
    shutil.copytree(os.path.join(ROOT, "cli"), src / "cli", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(src), "-w", str(tmp_path / "w")],
                       capture_output=True, text=True, timeout=300, check=False)
    if p.returncode != 0 and "No matching distribution found for setuptools" in p.stderr:
        pytest.skip("no package index for the build backend")
    assert p.returncode == 0, p.stderr[-2000:]
    [wheel] = os.listdir(tmp_path / "w")
    with zipfile.ZipFile(tmp_path / "w" / wheel) as z:
        names = z.namelist()
        entry = next(n for n in names if n.endswith("entry_points.txt"))
        assert "sparkfleet = sparkfleet_cli.cli:run" in z.read(entry).decode()
    assert {"sparkfleet_cli/cli.py", "sparkfleet_cli/view.py"} <= set(names)
