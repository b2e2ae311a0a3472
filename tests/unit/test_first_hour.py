"""Issue 19: a new user's first hour, as one script: a fresh venv on the controller (Python and ansible-core checked),
the built artifact installed from a requirements.yml, the sample inventory copied and read, every entry playbook
syntax-checked by FQCN, an inventory without the groups refused, the CLI's help, and the AWX import dry run.

It follows README "Use the collection" step by step, from outside the repository (no ansible.cfg, no ./collections).
Network: only pip's configured package index, for ansible-core, ansible-runner, rich and awxkit (pip's cache makes a
re-run quick). Nothing is contacted: the sample inventory's addresses are documentation addresses.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GALAXY = yaml.safe_load(open(os.path.join(ROOT, "galaxy.yml"), encoding="utf-8"))
TARBALL = "%s-%s-%s.tar.gz" % (GALAXY["namespace"], GALAXY["name"], GALAXY["version"])


def _pin(name):
    with open(os.path.join(ROOT, "requirements.txt"), encoding="utf-8") as f:
        return next(ln.strip() for ln in f if ln.lower().startswith(name + "=="))


@pytest.mark.slow   # a fresh venv and pip installs: ~1-3 min on a loaded machine
def test_a_new_users_first_hour(tmp_path):
    user = tmp_path / "me"
    user.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANSIBLE_", "PYTHONPATH", "VIRTUAL_ENV", "SPARKFLEET_"))}
    env.update(HOME=str(user), ANSIBLE_NOCOLOR="1", NO_COLOR="1")
    venv = user / "venv"
    bin_ = venv / "bin"

    def sh(*argv, ok=True, cwd=user, extra=None, timeout=600):
        e = dict(env, PATH="%s:%s" % (bin_, env.get("PATH", "/usr/bin:/bin")), **(extra or {}))
        p = subprocess.run([str(a) for a in argv], cwd=str(cwd), env=e, capture_output=True, text=True,
                           timeout=timeout, check=False)
        if ok:
            said = (" ".join(map(str, argv)), p.returncode, p.stdout[-3000:], p.stderr[-3000:])
            assert p.returncode == 0, "%s (rc=%d)\n%s\n%s" % said
        return p

    # 1. A fresh venv on a Python that ansible-core 2.19 supports (README: the Python/ansible-core check).
    sh(sys.executable, "-m", "venv", venv)
    check = sh(bin_ / "python", "-c", "import sys; assert sys.version_info >= (3, 11), sys.version; print('ok')")
    assert check.stdout.strip() == "ok"
    sh(bin_ / "pip", "install", "-q", _pin("ansible-core"), timeout=900)
    assert "core 2.19" in sh(bin_ / "ansible", "--version").stdout

    # 2. The artifact (what Galaxy or a release gives), installed from a requirements.yml.
    dist = tmp_path / "dist"
    sh(bin_ / "ansible-galaxy", "collection", "build", ROOT, "--output-path", dist)
    (user / "requirements.yml").write_text(yaml.safe_dump({"collections": [
        {"name": str(dist / TARBALL), "type": "file"}]}))
    sh(bin_ / "ansible-galaxy", "collection", "install", "-r", "requirements.yml")
    installed = user / ".ansible" / "collections" / "ansible_collections" / "sparkfleet" / "vllm"
    assert (installed / "MANIFEST.json").is_file()

    # 3. The sample inventory, copied out of the install and read.
    shutil.copytree(installed / "inventories" / "sample", user / "inventory")
    graph = sh(bin_ / "ansible-inventory", "-i", "inventory", "--graph").stdout
    assert "  |--@spark:\n  |  |--@spark_head:\n  |  |  |--spark-1\n  |  |--@spark_workers:\n  |  |  |--spark-2" in graph, graph

    # 4. Every entry playbook by FQCN, syntax only (nothing is contacted).
    playbooks = ["sparkfleet.vllm.%s" % n for n in ("site", "status", "restart", "stop")]
    out = sh(bin_ / "ansible-playbook", "-i", "inventory", "--syntax-check", *playbooks).stdout
    assert out.count("playbook: ") == len(playbooks), out

    # 5. A mistyped inventory stops at once, non-zero, naming what is missing.
    p = sh(bin_ / "ansible-playbook", "-i", "inventroy", "sparkfleet.vllm.site", ok=False)
    assert p.returncode != 0 and "inventory: group 'spark' is missing" in " ".join(p.stdout.split()), p.stdout[-2000:]

    # 6. The CLI (from the source repository) and its help, per subcommand. pip builds a source directory in place
    # (build/, *.egg-info): it builds a copy, so that the checkout other tests read at the same time stays as it is.
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(os.path.join(ROOT, name), src / name)
    shutil.copytree(os.path.join(ROOT, "cli"), src / "cli", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    sh(bin_ / "pip", "install", "-q", src, timeout=900)
    top = sh(bin_ / "sparkfleet", "--help").stdout
    for action in ("deploy", "status", "restart", "stop"):
        assert re.search(r"^\s+%s\s" % action, top, re.M), top
        assert sh(bin_ / "sparkfleet", action, "--help").stdout.startswith("usage: sparkfleet %s " % action)
    p = sh(bin_ / "sparkfleet", "deploy", "-i", "inventroy", "--reports", user / "reports", ok=False)
    assert p.returncode == 5 and "inventory: group 'spark' is missing" in p.stderr, p.stderr[-2000:]

    # 7. The AWX import, dry run: the two values set, the export checked with awxkit's rules against the project.
    sh(bin_ / "pip", "install", "-q", _pin("awxkit"), timeout=900)
    values = {"SPARKFLEET_SCM_URL": "https://git.example.com/me/sparkfleet.vllm.git",
              "SPARKFLEET_EE_IMAGE": "registry.example.com/sparkfleet-vllm-ee:%s" % GALAXY["version"]}
    dry = sh(bin_ / "python", installed / "extensions" / "awx" / "sparkfleet_awx.py", "--check", ROOT, extra=values)
    assert "dry run ok (awxkit's rules)" in dry.stdout, dry.stdout
    assert "job_template: sparkfleet deploy" in dry.stdout
