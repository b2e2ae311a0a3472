"""The collection as a user gets it: the Galaxy tarball, installed into an empty collections path, run from
outside the repo (no ansible.cfg, no ./collections); the execution environment; the released changelog.

Offline. One build and one install per run (module-scoped fixtures), all in a temp dir.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
GALAXY = yaml.safe_load(open(os.path.join(ROOT, "galaxy.yml"), encoding="utf-8"))
FQ = "%s.%s" % (GALAXY["namespace"], GALAXY["name"])
TARBALL = "%s-%s-%s.tar.gz" % (GALAXY["namespace"], GALAXY["name"], GALAXY["version"])
VLLM_LOG = os.path.join(ROOT, "tests", "unit", "plugins", "modules", "fixtures", "vllm_wait", "ok_v1_010_ray.log.gz")

# What a user runs, and the metadata ansible-galaxy adds. Anything else at the top of the tarball is a leak.
SHIPPED_TOP = {"MANIFEST.json", "FILES.json", "README.md", "LICENSE", "CHANGELOG.rst",
               "meta", "plugins", "roles", "playbooks", "docs", "changelogs", "extensions", "inventories"}
# Source trees that must ship whole (every tracked file in them).
SHIPPED_TREES = ("plugins/", "roles/", "playbooks/", "meta/", "extensions/", "inventories/sample/")


def _tool(name):
    path = os.path.join(BIN, name)
    assert os.path.exists(path), "%s is not installed next to %s: pip install -r requirements.txt" % (
        name, sys.executable)
    return path


def _run(argv, cwd, env, timeout=120):
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, "%s failed (rc=%d):\n%s\n%s" % (
        " ".join(argv), proc.returncode, proc.stdout[-4000:], proc.stderr[-4000:])
    return proc


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("packaging")


@pytest.fixture(scope="module")
def user_env(work):
    """An environment that knows nothing of the repo: empty config file, collections only from the install."""
    home = work / "home"
    home.mkdir()
    cfg = work / "ansible.cfg"
    cfg.write_text("[defaults]\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "PYTHONPATH"))}
    env.update({
        "HOME": str(home),
        "PATH": BIN + os.pathsep + env.get("PATH", "/usr/bin:/bin"),
        "ANSIBLE_CONFIG": str(cfg),
        "ANSIBLE_HOME": str(home / ".ansible"),
        "ANSIBLE_LOCAL_TEMP": str(home / "tmp"),
        "ANSIBLE_COLLECTIONS_PATH": str(work / "collections"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "NO_COLOR": "1",
    })
    return env


@pytest.fixture(scope="module")
def tarball(work, user_env):
    dist = work / "dist"
    _run([_tool("ansible-galaxy"), "collection", "build", ROOT, "--output-path", str(dist)], str(work), user_env)
    path = dist / TARBALL
    assert path.exists(), sorted(os.listdir(dist))
    return path


@pytest.fixture(scope="module")
def members(tarball):
    with tarfile.open(tarball) as tar:
        return [m.name for m in tar.getmembers()]


@pytest.fixture(scope="module")
def installed(work, tarball, user_env):
    _run([_tool("ansible-galaxy"), "collection", "install", "--offline", "-p", str(work / "collections"),
          str(tarball)], str(work), user_env)
    path = work / "collections" / "ansible_collections" / GALAXY["namespace"] / GALAXY["name"]
    assert (path / "MANIFEST.json").exists()
    return path


@pytest.fixture(scope="module")
def userdir(work):
    """Where the user's playbook and inventory live: no ansible.cfg, no collections/ next to them."""
    path = work / "user"
    path.mkdir()
    (path / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {
        "spark": {"hosts": {"spark-a": {}, "spark-b": {}}},
        "spark_head": {"hosts": {"spark-a": {}}},
    }}}), encoding="utf-8")
    return path


def _tracked(prefixes):
    out = subprocess.run(["git", "-C", ROOT, "ls-files", "-z", "--"] + list(prefixes),
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        pytest.skip("not a git checkout: cannot list tracked files")
    return [p for p in out.stdout.split("\0") if p]


# --- the artifact -------------------------------------------------------------------------------------------

def test_tarball_ships_only_what_a_user_runs(members):
    top = {m.split("/", 1)[0] for m in members}
    assert top <= SHIPPED_TOP, "unexpected in the tarball: %s" % sorted(top - SHIPPED_TOP)
    leaks = [m for m in members
             if any(part.startswith(".") for part in m.split("/"))     # .ansible/ (a 2nd copy), .git, caches
             or m.split("/", 1)[0] in ("tests", "lab", "collections", "ansible.cfg", "site.yml",
                                       "cli", "pyproject.toml", "sparkfleet-reports", "sparkfleet-logs", "dist")
             or m.startswith(("inventories/lab", "inventories/sparks"))
             or "__pycache__" in m]
    assert not leaks, leaks[:20]
    # The tarball had 2,090 entries (1,773 sysfs fixture files); the collection itself is ~410 (5 Dec: the
    # module_utils subpackages, the waits' action plugins, prepare, the validator's role modules).
    assert len(members) < 500, len(members)


def test_what_runs_leave_in_the_working_tree_stays_out_of_git_and_the_artifact(work, user_env):
    """Issue 19.3: reports, fetched journals (sparkfleet-logs/ after a failed deploy) and built tarballs (dist/) in the
    working tree are ignored by git and left out of the next build."""
    seeded = ("sparkfleet-logs/20261201T000000Z-ray_oom_killed/spark-2/vllm.journal",
              "sparkfleet-reports/20261201T000000Z-site/report.json", "sparkfleet-reports/runs/x-deploy/events.jsonl",
              "dist/sparkfleet-vllm-0.0.1.tar.gz")
    out = subprocess.run(["git", "-C", ROOT, "check-ignore", "--no-index"] + list(seeded), capture_output=True,
                         text=True, check=False)
    if out.returncode == 128:
        pytest.skip("not a git checkout")
    assert out.stdout.split() == list(seeded), "not ignored by git: %s" % sorted(set(seeded) - set(out.stdout.split()))
    src = work / "seeded-src"
    for path in _tracked(["."]):
        if os.path.isfile(os.path.join(ROOT, path)) and not path.startswith("tests/"):
            os.makedirs(src / os.path.dirname(path), exist_ok=True)
            shutil.copy2(os.path.join(ROOT, path), src / path)
    for path in seeded:
        os.makedirs(src / os.path.dirname(path), exist_ok=True)
        (src / path).write_text("seeded\n", encoding="utf-8")
    dist = work / "seeded-dist"
    _run([_tool("ansible-galaxy"), "collection", "build", str(src), "--output-path", str(dist)], str(work), user_env)
    with tarfile.open(dist / TARBALL) as tar:
        names = tar.getnames()
    assert not [n for n in names if n.split("/", 1)[0] in ("sparkfleet-logs", "sparkfleet-reports", "dist")], names
    assert "inventories/sample/hosts.yml" in names


def test_the_sample_inventory_ships_with_documentation_addresses_only(members, tarball):
    """Issue 19.3: an example inventory under the collection (kubespray's inventory/sample convention) with the three
    groups, that passes the inventory check, and names no real address."""
    import ipaddress
    sample = [m for m in members if m.startswith("inventories/sample/") and m.endswith(".yml")]
    assert "inventories/sample/hosts.yml" in sample and "inventories/sample/group_vars/spark/main.yml" in sample
    docs = [ipaddress.ip_network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24")]
    with tarfile.open(tarball) as tar:
        for name in sample:
            text = tar.extractfile(name).read().decode("utf-8")
            for found in re.findall(r"\b\d{1,3}(?:\.\d{1,3}){3}(?:/\d{1,2})?\b", text):
                net = ipaddress.ip_network(found, strict=False)
                assert any(net.subnet_of(d) for d in docs), "%s: %s is not a documentation address" % (name, found)
    from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._inventory import inventory_errors
    inv = json.loads(subprocess.run([_tool("ansible-inventory"), "-i", os.path.join(ROOT, "inventories", "sample"),
                                     "--list"], capture_output=True, text=True, check=True).stdout)
    hostvars = inv["_meta"]["hostvars"]

    def members_of(group):
        children = inv.get(group, {}).get("children", [])
        return sorted(set(inv.get(group, {}).get("hosts", [])) | {h for c in children for h in inv.get(c, {}).get("hosts", [])})
    groups = {g: members_of(g) for g in ("spark", "spark_head", "spark_workers")}
    assert groups == {"spark": ["spark-1", "spark-2"], "spark_head": ["spark-1"], "spark_workers": ["spark-2"]}
    assert inventory_errors(hostvars, groups) == []


def _slug(heading):
    """The anchor GitHub and Galaxy give a markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_readme_in_the_artifact_has_no_dead_link(tarball, members):
    """Issue 19.4: what Galaxy shows. A relative link or image must be a file of the artifact, an anchor a heading of
    the README; files that stay in the source repository are linked there (galaxy.yml's repository)."""
    with tarfile.open(tarball) as tar:
        text = tar.extractfile("README.md").read().decode("utf-8")
    body = re.sub(r"```.*?```", "", text, flags=re.S)   # code blocks hold no links
    anchors = {_slug(h) for h in re.findall(r"^#+ (.+)$", body, re.M)}
    links = re.findall(r"!?\[[^\]]*\]\(([^)\s]+)\)", body)
    assert len(links) >= 10, links
    dead = []
    for link in links:
        if link.startswith("#"):
            if link[1:] not in anchors:
                dead.append(link)
        elif re.match(r"^[a-z]+://", link):
            if not link.startswith(("https://github.com/sparkfleet/sparkfleet.vllm", "https://docs.ansible.com")):
                dead.append(link)
        elif link.split("#", 1)[0] not in members:
            dead.append(link)
    assert not dead, "dead links in the artifact's README: %s" % dead
    # It opens with the two commands, then how to use the collection, the Sparks, and troubleshooting.
    order = re.findall(r"^## (.+)$", body, re.M)
    assert order[:5] == ["Contents", "The two commands", "Use the collection", "Running on your Sparks",
                         "Troubleshooting"], order
    contents = body.split("## Contents", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"\]\(#([^)]+)\)", contents))
    assert {_slug(h) for h in order[1:]} <= listed, sorted({_slug(h) for h in order[1:]} - listed)


def test_tarball_holds_every_tracked_file_of_the_collection(members):
    shipped = set(members)
    missing = [p for p in _tracked(SHIPPED_TREES) if p not in shipped and os.path.exists(os.path.join(ROOT, p))]
    assert not missing, "tracked but not shipped (build_ignore too broad?): %s" % missing


def test_tarball_metadata_license_and_changelog(tarball, members):
    for required in ("LICENSE", "README.md", "CHANGELOG.rst", "changelogs/changelog.yaml", "meta/runtime.yml",
                     "meta/execution-environment.yml"):
        assert required in members, required
    with tarfile.open(tarball) as tar:
        manifest = json.load(tar.extractfile("MANIFEST.json"))["collection_info"]
        license_text = tar.extractfile("LICENSE").read().decode("utf-8")
    assert manifest["license"] == ["GPL-3.0-or-later"]
    assert license_text.split()[:5] == ["GNU", "GENERAL", "PUBLIC", "LICENSE", "Version"]
    assert "Version 3, 29 June 2007" in license_text and "END OF TERMS AND CONDITIONS" in license_text
    # The source files say GPL v3 or later; the artifact must carry the same licence.
    with open(os.path.join(ROOT, "plugins", "modules", "vllm_wait.py"), encoding="utf-8") as f:
        assert "GNU General Public License v3.0+" in f.read()
    assert manifest["version"] == GALAXY["version"]


def test_shipped_docs_point_inside_the_collection(tarball, members):
    with tarfile.open(tarball) as tar:
        for name in members:
            if name.startswith("docs/") and name.endswith((".md", ".rst")):
                text = tar.extractfile(name).read().decode("utf-8")
                assert "../" not in text, "%s points outside the collection" % name


# --- using it from the install, outside the repo ------------------------------------------------------------

def test_every_shipped_playbook_syntax_checks_by_fqcn(installed, userdir, user_env):
    playbooks = sorted(f[:-4] for f in os.listdir(installed / "playbooks") if f.endswith(".yml"))
    assert playbooks == sorted(f[:-4] for f in os.listdir(os.path.join(ROOT, "playbooks")) if f.endswith(".yml"))
    # One run checks them all (it stops at the first that fails to load, and names it).
    out = _run([_tool("ansible-playbook"), "--syntax-check", "-i", "hosts.yml"] + ["%s.%s" % (FQ, n) for n in playbooks],
               str(userdir), user_env)
    assert out.stdout.count("playbook: ") == len(playbooks), out.stdout


def _include_role_targets(installed):
    """(role, tasks_from) of every include_role in the shipped playbooks: syntax-check does not load them."""
    found = set()
    for name in os.listdir(installed / "playbooks"):
        with open(installed / "playbooks" / name, encoding="utf-8") as f:
            plays = yaml.safe_load(f) or []
        for play in plays:
            for task in play.get("tasks", []) + play.get("pre_tasks", []) + play.get("post_tasks", []):
                inc = task.get("ansible.builtin.include_role") or task.get("include_role")
                if inc:
                    found.add((inc["name"], inc.get("tasks_from", "main.yml")))
    return found


def test_user_playbook_uses_every_role_and_module_by_fqcn(installed, userdir, user_env):
    roles = sorted(os.listdir(installed / "roles"))
    modules = sorted(f[:-3] for f in os.listdir(installed / "plugins" / "modules") if not f.startswith("_"))
    assert {"preflight", "gpu_cleanup", "model_sync", "ray_cluster", "vllm_serve", "healthcheck"} <= set(roles)
    assert {"rdma_facts", "gpu_holders", "gpu_release", "model_sync", "ray_cluster_check", "vllm_wait"} <= set(modules)
    targets = _include_role_targets(installed)
    assert targets, "the shipped playbooks include role task files (restart, stop, status)"
    # import_role is static: a role or task file that does not resolve from the install fails the syntax check.
    tasks = [{"name": "Role %s" % r, "ansible.builtin.import_role": {"name": "%s.%s" % (FQ, r)}} for r in roles]
    tasks += [{"name": "Role %s tasks %s" % (r, t), "ansible.builtin.import_role": {"name": r, "tasks_from": t}}
              for r, t in sorted(targets)]
    # A module that does not resolve fails task parsing ("couldn't resolve module/action").
    tasks += [{"name": "Module %s" % m, "%s.%s" % (FQ, m): {}} for m in modules]
    play = [{"name": "Everything by FQCN", "hosts": "spark", "gather_facts": False, "tasks": tasks}]
    (userdir / "everything.yml").write_text(yaml.safe_dump(play, sort_keys=False), encoding="utf-8")
    out = _run([_tool("ansible-playbook"), "--syntax-check", "-i", "hosts.yml", "everything.yml"],
               str(userdir), user_env)
    assert "everything.yml" in out.stdout


def test_a_module_and_a_filter_run_on_localhost_from_the_install(installed, userdir, user_env):
    log = userdir / "vllm.log"
    with gzip.open(VLLM_LOG, "rb") as src:
        log.write_bytes(src.read())
    out = _run([_tool("ansible"), "localhost", "-m", "%s.vllm_wait" % FQ, "-a", "log_file=%s timeout=0" % log],
               str(userdir), user_env)
    result = json.loads(out.stdout.split("=>", 1)[1])
    assert result["phase"] == "ready" and result["ready"] is True, result
    # A filter by FQCN, rendered on the controller.
    out = _run([_tool("ansible"), "localhost", "-m", "ansible.builtin.debug", "-a",
                "msg={{ {'NCCL_SOCKET_IFNAME': 'enp1s0f1np1'} | %s.systemd_env_lines }}" % FQ],
               str(userdir), user_env)
    assert "NCCL_SOCKET_IFNAME=enp1s0f1np1" in out.stdout, out.stdout


def test_awx_doc_playbook_and_progress_callback_work_from_the_install(installed, userdir, user_env):
    """docs/awx.md: the one-file project playbook resolves, and the callback loads by the name it gives."""
    doc = (installed / "docs" / "awx.md").read_text(encoding="utf-8")
    block = re.search(r"```yaml\n(.*?)```", doc, re.S).group(1)
    (userdir / "awx-site.yml").write_text(block, encoding="utf-8")
    _run([_tool("ansible-playbook"), "--syntax-check", "-i", "hosts.yml", "awx-site.yml"], str(userdir), user_env)
    assert "ANSIBLE_CALLBACKS_ENABLED=%s.progress" % FQ in doc
    (userdir / "local.yml").write_text(yaml.safe_dump([{
        "name": "Local", "hosts": "localhost", "gather_facts": False,
        "tasks": [{"name": "Say", "ansible.builtin.debug": {"msg": "hi"}}]}]), encoding="utf-8")
    env = dict(user_env, ANSIBLE_CALLBACKS_ENABLED="%s.progress" % FQ)
    out = _run([_tool("ansible-playbook"), "local.yml"], str(userdir), env)
    assert "Skipping callback" not in out.stdout + out.stderr, out.stderr


def test_every_role_has_a_readme_whose_commands_work_from_the_install(installed, userdir, user_env):
    roles = sorted(os.listdir(installed / "roles"))
    for role in roles:
        readme = installed / "roles" / role / "README.md"
        assert readme.is_file(), "role %s ships no README.md" % role
        text = readme.read_text(encoding="utf-8")
        assert "ansible-doc -t role %s.%s" % (FQ, role) in text, role
        block = re.search(r"```yaml\n(.*?)```", text, re.S).group(1)
        (userdir / ("role-%s.yml" % role)).write_text(block, encoding="utf-8")
    # The examples resolve from the install; ansible-doc renders every role's argument specs.
    out = _run([_tool("ansible-playbook"), "--syntax-check", "-i", "hosts.yml"] + ["role-%s.yml" % r for r in roles],
               str(userdir), user_env)
    assert out.stdout.count("playbook: ") == len(roles), out.stdout
    out = _run([_tool("ansible-doc"), "-t", "role"] + ["%s.%s" % (FQ, r) for r in roles], str(userdir), user_env)
    plain = re.sub(r"\x1b\[[0-9;]*m|\*", "", out.stdout)   # bold is ANSI or *name* without colour
    for role in roles:
        assert "ROLE: %s.%s " % (FQ, role) in plain, role


@pytest.mark.slow   # ~16 s on an idle 2-core machine, 75-140 s while the lab runs beside it
def test_ansible_lint_production_is_clean_on_the_installed_collection(installed, user_env):
    out = _run([_tool("ansible-lint"), "--nocolor", "--offline", "--profile", "production"], str(installed),
               user_env, timeout=300)
    text = out.stdout + out.stderr
    assert re.search(r"Passed: 0 failure\(s\), 0 warning\(s\)", text), text[-3000:]


def _shipped_content(installed):
    """{kind: {name: source path}} of what the install holds, kinds named as in the README list."""
    def by_stem(sub, ext):
        d = installed / sub
        return {f[:-len(ext)]: "%s/%s" % (sub, f) for f in os.listdir(d) if f.endswith(ext) and not f.startswith("_")}
    filters = {}
    for f in os.listdir(installed / "plugins" / "filter"):
        if f.endswith(".yml"):   # one documentation sidecar per filter
            with open(installed / "plugins" / "filter" / f, encoding="utf-8") as fh:
                filters[yaml.safe_load(fh)["DOCUMENTATION"]["name"]] = "plugins/filter/" + f
    return {
        "Roles": {r: "roles/%s/meta/main.yml" % r for r in os.listdir(installed / "roles")},
        "Playbooks": by_stem("playbooks", ".yml"),
        "Modules": by_stem("plugins/modules", ".py"),
        "Filters": filters,
        "Callback": by_stem("plugins/callback", ".py"),
    }


def test_readme_lists_the_shipped_content(installed):
    """Every committed role, playbook and plugin is named in README's list; the list names nothing that does
    not ship (work in progress that is not committed yet need not be listed)."""
    text = (installed / "README.md").read_text(encoding="utf-8")
    for heading in ("## Use the collection", "### Requirements", "### Included content", "### Licence"):
        assert heading in text, heading
    section = text.split("### Included content", 1)[1].split("\n#", 1)[0]
    listed = {}
    for item in re.split(r"\n- ", section)[1:]:
        kind, names = item.split(":", 1)
        listed[kind.strip()] = set(re.findall(r"`([a-z0-9_]+)`", names))
    tracked = set(_tracked(["roles", "playbooks", "plugins"]))
    for kind, names in _shipped_content(installed).items():
        said = listed.get(kind, set())
        missing = sorted(n for n, src in names.items() if src in tracked and n not in said)
        assert not missing, "README 'Included content' does not name the %s %s" % (kind.lower(), missing)
        assert said <= set(names), "README 'Included content' names %s %s that do not ship" % (
            kind.lower(), sorted(said - set(names)))
    for need in ("docker", "rsync >= 3.2.3", "systemd", "nvidia-smi", "GPL-3.0-or-later"):
        assert need in text, need


# --- AWX / Tower execution environment ----------------------------------------------------------------------

def _pins():
    pins = {}
    with open(os.path.join(ROOT, "requirements.txt"), encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line.strip())
            if m:
                pins[m.group(1).lower()] = m.group(2)
    return pins


def _ee_context(work, user_env, name, tarballs=()):
    ee_dir = work / name
    (ee_dir / "dist").mkdir(parents=True)
    shutil.copy(os.path.join(ROOT, "execution-environment.yml"), ee_dir)
    for t in tarballs:
        shutil.copy(t, ee_dir / "dist")
    _run([_tool("ansible-builder"), "create", "--file", "execution-environment.yml", "--context", "ctx",
          "--output-filename", "Containerfile"], str(ee_dir), user_env)
    return ee_dir / "ctx"


def test_execution_environment_file_pins_its_base_and_names_no_version():
    """Issue 19.5: the base image by digest; the collection's version comes from galaxy.yml at build time only."""
    with open(os.path.join(ROOT, "execution-environment.yml"), encoding="utf-8") as f:
        text = f.read()
    ee = yaml.safe_load(text)
    assert re.fullmatch(r"[a-z0-9./-]+@sha256:[0-9a-f]{64}", ee["images"]["base_image"]["name"]), \
        ee["images"]["base_image"]["name"]
    code = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
    assert GALAXY["version"] not in code, "execution-environment.yml hard-codes the version"
    assert "tags" not in ee.get("options", {})


def test_execution_environment_build_context(work, tarball, user_env):
    ctx = _ee_context(work, user_env, "ee", [tarball])
    # The collection goes in from the tarball just built, the one named by galaxy.yml's version at build time.
    assert (ctx / "_build" / "collection" / TARBALL).is_file(), os.listdir(ctx / "_build")
    containerfile = (ctx / "Containerfile").read_text(encoding="utf-8")
    assert "ARG SPARKFLEET_VERSION" in containerfile
    assert "ansible-galaxy collection install --offline -p /usr/share/ansible/collections" in containerfile
    # The controller runs what the collection is tested with.
    pins = _pins()
    refs = re.search(r'ANSIBLE_INSTALL_REFS="([^"]*)"', containerfile).group(1).split()
    assert sorted(refs) == sorted(["ansible-core==" + pins["ansible-core"], "ansible-runner==" + pins["ansible-runner"]])
    assert re.search(r'PYCMD="/usr/bin/python3\.1[1-9]"', containerfile)   # ansible-core 2.19 needs >= 3.11
    assert (ctx / "_build" / "requirements.txt").read_text().split() == ["matplotlib==" + pins["matplotlib"]]


def _install_step(ctx, fake_root):
    """The Containerfile's install step as a shell script, its paths moved under fake_root."""
    containerfile = (ctx / "Containerfile").read_text(encoding="utf-8")
    step = next(ln for ln in containerfile.splitlines() if ln.startswith("RUN ") and "SPARKFLEET_VERSION" in ln)
    return step[4:].replace("/tmp/sparkfleet-build", str(fake_root / "build")).replace(
        "/usr/share/ansible/collections", str(fake_root / "collections"))


@pytest.mark.parametrize("given, version, ok", [("tarball", GALAXY["version"], True), ("tarball", "9.9.9", False),
                                                ("none", GALAXY["version"], False), ("tarball", "", False)])
def test_execution_environment_install_step_fails_without_the_tarball(work, tarball, user_env, given, version, ok):
    """The build's install step, run as the container build runs it: it installs galaxy.yml's version or stops naming
    the command that builds the tarball (ansible-builder itself only warns about a missing dist/)."""
    name = "ee-%s-%s" % (given, version or "none")
    ctx = _ee_context(work, user_env, name, [tarball] if given == "tarball" else [])
    fake = work / (name + "-root")
    shutil.copytree(ctx / "_build", fake / "build")
    bindir = fake / "bin"
    bindir.mkdir()
    (bindir / "ansible-galaxy").write_text("#!/bin/sh\necho \"$@\" > %s\n" % (fake / "installed"))
    (bindir / "ansible-galaxy").chmod(0o755)
    env = dict(user_env, SPARKFLEET_VERSION=version, PATH="%s:%s" % (bindir, user_env["PATH"]))
    proc = subprocess.run(["/bin/sh", "-c", _install_step(ctx, fake)], env=env, capture_output=True, text=True,
                          check=False)
    if ok:
        assert proc.returncode == 0, proc.stderr
        assert (fake / "installed").read_text().split()[-1].endswith("/collection/" + TARBALL)
    else:
        assert proc.returncode == 1 and not (fake / "installed").exists()
        assert "run ansible-galaxy collection build --output-path dist" in " ".join(proc.stderr.split())


def test_execution_environment_requirements_of_the_installed_collection(installed, user_env, work):
    """What ansible-builder reads from the collection inside the build: an SSH client, no Python packages."""
    out = _run([_tool("ansible-builder"), "introspect", str(installed.parents[2])], str(work), user_env)
    data = yaml.safe_load(out.stdout.split("# Dependency data for", 1)[1].split("\n", 1)[1]) \
        if "# Dependency data for" in out.stdout else yaml.safe_load(out.stdout)
    system = " ".join(data.get("system", []))
    assert "openssh-client [platform:dpkg]" in system and "openssh-clients [platform:rpm]" in system, out.stdout
    assert not data.get("python"), out.stdout


# --- the changelog --------------------------------------------------------------------------------------------

def _version_added():
    """{plugin name: version_added} of the source's modules, filters and callbacks."""
    found = {}
    for sub, ext in (("modules", ".py"), ("filter", ".yml"), ("callback", ".py")):
        d = os.path.join(ROOT, "plugins", sub)
        for f in os.listdir(d):
            if f.endswith(ext) and not f.startswith("_"):
                with open(os.path.join(d, f), encoding="utf-8") as fh:
                    m = re.search(r"^\s*version_added:\s*['\"]?([0-9.]+)", fh.read(), re.M)
                found[f[:-len(ext)]] = m.group(1) if m else None
    return found


def test_changelog_released_and_generated(work, user_env):
    _run([_tool("antsibull-changelog"), "lint"], ROOT, user_env)
    with open(os.path.join(ROOT, "changelogs", "changelog.yaml"), encoding="utf-8") as f:
        changes = yaml.safe_load(f)
    releases = changes["releases"]
    latest = max(releases, key=lambda v: tuple(int(x) for x in v.split(".")))
    # The version follows the changelog: the last release, or the next one while fragments wait (tests/unit/
    # test_version.py holds the rule, scripts/version.py bump moves it).
    assert tuple(int(x) for x in latest.split(".")) <= tuple(int(x) for x in GALAXY["version"].split(".")), \
        "galaxy.yml says %s, below the latest release %s" % (GALAXY["version"], latest)
    for version, release in releases.items():
        assert release["changes"].get("release_summary"), "release %s has no summary" % version
        # New modules and plugins are listed by antsibull-changelog itself; a fragment must not repeat them.
        names = {p["name"] for p in release.get("modules", [])}
        names |= {p["name"] for kind in release.get("plugins", {}).values() for p in kind}
        for section, entries in release["changes"].items():
            for entry in entries if isinstance(entries, list) else []:
                if " - " in entry:   # the "name - what it does" form of a new-plugin entry
                    head = entry.split(" - ", 1)[0]
                    assert not any(n in re.split(r"[ ,]+", head) for n in names), (version, section, entry)
    # Every plugin a release announces ships, with that release as its version_added.
    added = _version_added()
    for version, release in releases.items():
        announced = [p["name"] for p in release.get("modules", [])]
        announced += [p["name"] for kind in release.get("plugins", {}).values() for p in kind]
        for name in announced:
            assert added.get(name) == version, "release %s announces %s; its version_added is %s" % (
                version, name, added.get(name))
    # CHANGELOG.rst is generated from changelog.yaml, not hand-edited.
    copy = work / "changelog-copy"
    shutil.copytree(os.path.join(ROOT, "changelogs"), copy / "changelogs",
                    ignore=shutil.ignore_patterns("fragments", ".plugin-cache.yaml"))
    (copy / "changelogs" / "fragments").mkdir()
    shutil.copy(os.path.join(ROOT, "galaxy.yml"), copy)
    _run([_tool("antsibull-changelog"), "generate"], str(copy), user_env)
    with open(os.path.join(ROOT, "CHANGELOG.rst"), encoding="utf-8") as f:
        assert f.read() == (copy / "CHANGELOG.rst").read_text(encoding="utf-8"), \
            "CHANGELOG.rst differs from `antsibull-changelog generate`"


# What a user keeps in a clone (issue 41.10): the README's `cp -r .../inventories/sample inventory` with a vault in it,
# their own inventories, keys, logs, reports and run directories at any depth, a patch's leftovers.
PLANTED = (
    "inventory/hosts.yml", "inventory/group_vars/spark/vault.yml", "inventory/group_vars/spark/main.yml",
    "inventories/mine/hosts.yml", "inventories/sparks-home/hosts.yml", "inventories/samples/hosts.yml",
    "inventories/sample2/hosts.yml", "inventories/sample/group_vars/spark/vault.yml",
    "inventories/sample/group_vars/spark/vault.yaml", "inventories/sample/host_vars/spark-1/vault.yml",
    "hosts.yml", "vault-password.txt", "vault_pass.txt",
    "id_ed25519", "id_ed25519.pub", "keys/spark.pem", "keys/spark.key", "inventory/id_rsa",
    "sparkfleet-logs/20261201T000000Z-x/spark-2/vllm.journal", "playbooks/sparkfleet-logs/x/spark-1/ray.journal",
    "roles/vllm_serve/sparkfleet-logs/x/y.journal", "playbooks/sparkfleet-reports/20261201T000000Z-site/report.json",
    "sparkfleet-runs/20261201T000000Z-deploy/events.jsonl", "playbooks/sparkfleet-runs/x/events.jsonl",
    "roles/vllm_serve/tasks/main.yml.orig", "README.md.orig", "plugins/modules/config_files.py.rej",
    "galaxy.yml.bak", "roles/vllm_serve/defaults/main.yml~", "ansible.log", "playbooks/ansible.log", "site.retry",
    "playbooks/artifacts/x/stdout",
)


def test_nothing_a_user_keeps_in_a_clone_reaches_the_artifact(work, user_env):
    src = work / "clone-src"
    for path in _tracked(["."]):
        if os.path.isfile(os.path.join(ROOT, path)) and not path.startswith("tests/"):
            os.makedirs(src / os.path.dirname(path), exist_ok=True)
            shutil.copy2(os.path.join(ROOT, path), src / path)
    for path in PLANTED:
        os.makedirs(src / os.path.dirname(path), exist_ok=True)
        (src / path).write_text("$ANSIBLE_VAULT;1.1;AES256\n6134\n" if "vault" in path else "planted\n",
                                encoding="utf-8")
    dist = work / "clone-dist"
    _run([_tool("ansible-galaxy"), "collection", "build", str(src), "--output-path", str(dist)], str(work), user_env)
    with tarfile.open(dist / TARBALL) as tar:
        names = set(tar.getnames())
        files = json.load(tar.extractfile("FILES.json"))
        planted = [m for m in tar.getmembers() if m.isfile() and tar.extractfile(m).read().startswith(
            (b"planted", b"$ANSIBLE_VAULT"))]
    leaked = sorted(p for p in PLANTED if p in names) + [m.name for m in planted]
    assert not leaked, "a user's file reached the artifact: %s" % leaked
    assert not [f["name"] for f in files["files"] if f["name"] in PLANTED]
    # The collection itself still ships whole.
    for kept in ("inventories/sample/hosts.yml", "inventories/sample/group_vars/spark/main.yml",
                 "plugins/lookup/vaulted_inventory.py", "playbooks/site.yml", "roles/vllm_serve/tasks/main.yml"):
        assert kept in names, kept


def test_the_execution_environment_gets_an_ssh_client(work, tarball, user_env):
    """Issue 41.5: the collection is installed in the final stage only, so the builder stage's introspection (which
    decides the system packages) never read its meta/ee-bindep.txt, and the base ships no ssh client: every AWX job
    would fail to connect. Run that introspection as the generated Containerfile runs it, on the generated context,
    over the builder stage's collections (ours is not among them), and read what it would install."""
    ctx = _ee_context(work, user_env, "ee-ssh", [tarball])
    containerfile = (ctx / "Containerfile").read_text(encoding="utf-8")
    step = next(ln for ln in containerfile.splitlines() if "introspect.py introspect" in ln)
    args = shlex.split(step.split("introspect.py", 1)[1])
    assert args[0] == "introspect"
    builder_collections = work / "ee-ssh-builder-stage"
    (builder_collections / "ansible_collections").mkdir(parents=True)
    out = work / "ee-ssh-out"
    out.mkdir()
    rewritten = []
    for arg in args[1:]:
        name, equals, value = arg.partition("=")
        if name in ("--user-pip", "--user-bindep"):
            value = str(ctx / "_build" / value)     # COPY _build/<file> <file> in the builder stage
        elif name in ("--write-bindep", "--write-pip"):
            value = str(out / os.path.basename(value))
        rewritten.append(name + equals + value if equals else arg)
    _run([sys.executable, str(ctx / "_build" / "scripts" / "introspect.py"), "introspect"] + rewritten
         + [str(builder_collections)],
         str(ctx), user_env)
    wanted = [ln.split("#")[0].strip() for ln in (out / "bindep.txt").read_text().splitlines()]
    assert "openssh-clients [platform:rpm]" in wanted, wanted
    # The lines given to the EE are the collection's own (meta/ee-bindep.txt, which ships in the artifact).
    with tarfile.open(tarball) as tar:
        declared = [ln.strip() for ln in tar.extractfile("meta/ee-bindep.txt").read().decode().splitlines()
                    if ln.strip() and not ln.lstrip().startswith("#")]
    assert sorted(declared) == sorted(w for w in wanted if w), (declared, wanted)
