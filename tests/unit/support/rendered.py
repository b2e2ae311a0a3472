"""What a node gets from the collection's templates and the files its tasks write (units, env files, YAML, the sudoers
line preflight prints), rendered with chosen values, and parsed the way systemd, docker, a shell or YAML reads them
(issue 40.5).

A template's variables are traced to what the user (or the node) sets: a derived variable of a role's vars/main.yml
(`_monitoring_allow`, `_vllm_serve_memory_args`, the floor's `sparkfleet_api_url`) is followed through its Jinja
source to the variables it is made of, and computed by ansible-core's own templating from them, so a hostile value is
set where the user sets it and reaches the template the way it would on a node.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shlex
import shutil
import subprocess
import tempfile

import jinja2
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import filter_loader
from ansible.template import Templar, trust_as_template
from jinja2 import nodes

from ansible_collections.sparkfleet.vllm.tests.unit.support.units import REPO, render

ROLES = REPO / "roles"
_ENV = jinja2.Environment()
# Set from the inventory, never derived here (the floor computes them from groups and hostvars: the inputs are the host
# names and the fabric addresses preflight's inventory check judges).
INVENTORY_DERIVED = frozenset(("sparkfleet_head_host", "sparkfleet_head_fabric_ip", "sparkfleet_cluster_nodes",
                               "sparkfleet_hosts", "sparkfleet_cluster_gpus"))
FLOOR_VIEW_RE = re.compile(r"^_sparkfleet_(ray_cluster|gpu_cleanup|runtime_image|vllm_serve|model_sync)\Z")


def _yaml(path):
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def _sources(value):
    """Every Jinja source in a YAML value (strings holding {{ or {%)."""
    if isinstance(value, dict):
        for item in value.values():
            yield from _sources(item)
    elif isinstance(value, list):
        for item in value:
            yield from _sources(item)
    elif isinstance(value, str) and ("{{" in value or "{%" in value):
        yield value


def _short_filters(value):
    """The collection's filters by their short names (the plugin directory is added to ansible-core's filter loader
    below: the collection loader is not installed in the unit tests)."""
    if isinstance(value, str):
        return value.replace("sparkfleet.vllm.", "")
    if isinstance(value, list):
        return [_short_filters(v) for v in value]
    if isinstance(value, dict):
        return {k: _short_filters(v) for k, v in value.items()}
    return value


filter_loader.add_directory(str(REPO / "plugins" / "filter"))


@functools.lru_cache(maxsize=None)
def derived():
    """name -> value (with its Jinja) of every variable a role's vars/main.yml derives, the floor's own inventory
    reads and views left out."""
    out = {}
    for path in sorted(ROLES.glob("*/vars/main.yml")):
        for name, value in _yaml(path).items():
            if name not in INVENTORY_DERIVED and not FLOOR_VIEW_RE.match(name):
                out[name] = _short_filters(value)
    return out


def reads(source):
    """The variables a Jinja source reads: loaded names (its own assignments and loop variables left out), a floor
    view's attributes as the variables they are (`_sparkfleet_ray_cluster.ray_cluster_firewall_nft`), and the keys
    read off hostvars[...] (another node's facts)."""
    tree = _ENV.parse(source)
    stored = {n.name for n in tree.find_all(nodes.Name) if n.ctx in ("store", "param")}
    found = {n.name for n in tree.find_all(nodes.Name) if n.ctx == "load"} - stored
    for node in tree.find_all(nodes.Getattr):
        if isinstance(node.node, nodes.Name) and FLOOR_VIEW_RE.match(node.node.name):
            found.add(node.attr)
    for node in tree.find_all((nodes.Getattr, nodes.Getitem)):
        base = node.node.node if isinstance(node.node, nodes.Getitem) else node.node
        if isinstance(base, nodes.Name) and base.name == "hostvars" and isinstance(node, nodes.Getattr):
            found.add(node.attr)
    ignored = ("hostvars", "groups", "lookup", "query", "role_path", "namespace", "none")
    return {n for n in found if not FLOOR_VIEW_RE.match(n) and n not in ignored}


def inputs(source):
    """The variables a source is made of, derived ones followed to what they read in turn: {input: [path]}."""
    out = {}
    todo = [(name, (name,)) for name in sorted(reads(source))]
    while todo:
        name, path = todo.pop()
        if name in derived():
            for src in _sources(derived()[name]):
                todo.extend((n, path + (n,)) for n in sorted(reads(src)) if n not in path)
        else:
            out.setdefault(name, list(path))
    return out


@functools.lru_cache(maxsize=None)
def _defaults():
    out = {}
    for path in sorted(ROLES.glob("*/defaults/main.yml")):
        out.update(_yaml(path))
    return out


def _trusted(value):
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, list):
        return [_trusted(v) for v in value]
    if isinstance(value, dict):
        return {k: _trusted(v) for k, v in value.items()}
    return value


# A node of the lab's shape, every value plain: what each hostile value is set in.
PLAIN = dict(
    ansible_managed="Ansible managed", inventory_hostname="spark-1", sparkfleet_head_host="spark-1",
    sparkfleet_fabric_ip="192.168.200.12", sparkfleet_head_fabric_ip="192.168.200.12",
    sparkfleet_fabric_subnet="192.168.200.0/24", sparkfleet_mgmt_ip="10.1.230.180", _monitoring_mgmt_net="10.1.230.0/24",
    sparkfleet_cluster_nodes=[{"host": "spark-1", "ip": "192.168.200.12", "head": True},
                              {"host": "spark-2", "ip": "192.168.200.13", "head": False}],
    sparkfleet_model_dir="/models/qwen3-coder", sparkfleet_image="vllm:0.17.1", sparkfleet_model_id="Qwen/Qwen3-Coder",
    sparkfleet_fabric={"rdma_char_devices": [], "env": {}},
    _ray_cluster_node={"systemd_version": 252, "docker_live_restore": False},
    _vllm_serve_model_state={"systemd_version": 252, "docker_live_restore": False},
    _gpu_cleanup_record={"units": ["vllm-cluster.service"], "containers": ["vllm-old"]},
    sparkfleet_image_check={"image_id": "sha256:" + "b" * 64, "recipe_args": []},
    sparkfleet_runtime_image_ref="sha256:" + "a" * 64, sparkfleet_runtime_image_present="vllm:0.17.1",
    ansible_user="spark",
)


_LOADER = DataLoader()


@functools.lru_cache(maxsize=None)
def _base():
    base = dict(_defaults())
    base.update(PLAIN)
    for role in ("ray_cluster", "vllm_serve", "gpu_cleanup", "runtime_image", "model_sync"):
        keys = _yaml(ROLES / role / "defaults" / "main.yml")
        base["_sparkfleet_" + role] = {k: "{{ %s }}" % k for k in keys}
    return _trusted(base), _trusted(derived())


def variables(**over):
    """Every variable a role reads on one node (the head): the roles' defaults, the inputs above, `over` (the hostile
    value, set where the user sets it: never templated, as an inventory value marked unsafe would not be), and every
    derived variable computed from them by ansible-core's templating."""
    base, made = _base()
    merged = dict(base)
    merged.update(over)
    merged.update(made)
    return Templar(loader=_LOADER, variables=merged)


def value_of(templar, name):
    return templar.template(trust_as_template("{{ %s }}" % name))


_COMPILED = {}


@contextlib.contextmanager
def _compiled_once():
    """Jinja compiles each source once while we render (ansible-core compiles every expression again for every new
    Templar, which made these tests minutes long): the same source, name and lexer settings give the same code."""
    real = jinja2.Environment.compile

    def compile_(self, source, name=None, filename=None, raw=False, defer_init=False):
        if raw or not isinstance(source, str):
            return real(self, source, name, filename, raw, defer_init)
        key = (type(self), self.block_start_string, self.variable_start_string, self.comment_start_string,
               self.trim_blocks, self.lstrip_blocks, self.keep_trailing_newline, self.newline_sequence,
               source, name, filename, defer_init)
        if key not in _COMPILED:
            _COMPILED[key] = real(self, source, name, filename, raw, defer_init)
        return _COMPILED[key]
    jinja2.Environment.compile = compile_
    try:
        yield
    finally:
        jinja2.Environment.compile = real


def render_template(path, templar):
    """A role's template as the template lookup writes it (trim_blocks), its variables read through templar."""
    role, name = path.parts[-3], path.name
    with _compiled_once():
        needed = {n: value_of(templar, n) for n in reads(path.read_text(encoding="utf-8"))}
    return render(role, name, **needed)


# ---------------------------------------------------------------- parsers: what the reader of each file sees

SYSTEMD_REWRITES = (("%", "a specifier"), ("$", "an environment variable"), ("\\", "an escape"))


def unit_shape(text):
    """A unit as systemd reads it: [(section, key, what)], `what` being an Exec line's (number of words, its option
    words) or another directive's number of words (a Description's text is free). Fails on a line systemd would read
    otherwise: a NUL or CR, a line that is no directive, a '%' it would expand, a '$' or '\\' it would rewrite in a
    command line."""
    shape, section = [], None
    for number, line in enumerate(text.split("\n"), 1):
        assert "\0" not in line and "\r" not in line, "line %d holds a NUL or CR: %r" % (number, line)
        if not line.strip() or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            shape.append((section,))
            continue
        key, sep, value = line.partition("=")
        assert sep and re.fullmatch(r"[A-Za-z]+", key), "line %d is no directive: %r" % (number, line)
        assert "%" not in value, "line %d: a '%%' systemd would expand as a specifier: %r" % (number, line)
        if key.startswith("Exec"):
            for bad, what in SYSTEMD_REWRITES[1:]:
                assert bad not in value, "line %d: %s systemd would rewrite: %r" % (number, what, line)
            words = shlex.split(value.lstrip("-+!@:"))
            shape.append((section, key, len(words), [w.split("=")[0] for w in words
                                                     if re.match(r"--?[A-Za-z]", w)]))
        elif key in ("Description", "OnCalendar"):
            shape.append((section, key))     # free text, and a calendar expression (systemd-analyze verify reads it)
        else:
            shape.append((section, key, len(value.split())))
    return shape


_ENV_LINE_RE = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="([^"\\$`\n]*)"\Z')


def default_file_shape(text):
    """A Debian /etc/default file the package's unit reads (EnvironmentFile=, then `$ARGS` unquoted in ExecStart:
    split at blanks): [(name, number of words, option names)]."""
    shape = []
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip() or line.startswith("#"):
            continue
        m = _ENV_LINE_RE.match(line)
        assert m, "line %d is not NAME=\"value\" without quotes, escapes or '$' inside: %r" % (number, line)
        words = m.group(2).split()
        shape.append((m.group(1), len(words), [w.split("=")[0] for w in words]))
    return shape


def docker_env_file(text):
    """docker run --env-file's reading: a line per variable, NAME=value, the value as written to the line's end."""
    env = {}
    for line in text.split("\n"):
        line = line.lstrip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        assert sep and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name), "not NAME=value: %r" % line
        assert name not in env, "%s set twice" % name
        env[name] = value
    return env


def skeleton(doc):
    """A YAML document's structure: mappings' keys and lists' lengths, each leaf by its type."""
    if isinstance(doc, dict):
        return {k: skeleton(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [skeleton(v) for v in doc]
    return type(doc).__name__


def leaves(doc, path=()):
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from leaves(v, path + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from leaves(v, path + (i,))
    else:
        yield path, doc


# ---------------------------------------------------------------- systemd-analyze verify

SYSTEMD_ANALYZE = shutil.which("systemd-analyze") or "/usr/bin/systemd-analyze"
# What verify says about the node rather than the unit: our binaries and docker are not installed here, and the units
# we order after (docker.service, our own) are not loaded here.
_NOT_ABOUT_THE_UNIT = (re.compile(r"Command \S+ is not executable: No such file or directory"),
                       re.compile(r"Failed to create \S+/start: Unit \S+ not found\."),
                       re.compile(r"Unit \S+ not found\."))


def verify(units):
    """systemd-analyze verify on {file name: text}: its complaints, those about this machine (above) left out.
    None where it cannot run here."""
    if not os.access(SYSTEMD_ANALYZE, os.X_OK):
        return None
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in units.items():
            with open(os.path.join(tmp, name), "w", encoding="utf-8") as handle:
                handle.write(text)
        proc = subprocess.run([SYSTEMD_ANALYZE, "verify", "--man=no", "--recursive-errors=no"]
                              + [os.path.join(tmp, n) for n in units], capture_output=True, text=True, timeout=60,
                              check=False, env=dict(os.environ, SYSTEMD_LOG_COLOR="0", SYSTEMD_PAGER=""), cwd=tmp)
        if "unrecognized option" in proc.stderr:
            proc = subprocess.run([SYSTEMD_ANALYZE, "verify", "--man=no"] + [os.path.join(tmp, n) for n in units],
                                  capture_output=True, text=True, timeout=60, check=False, cwd=tmp)
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    return [line for line in lines if not any(p.search(line) for p in _NOT_ABOUT_THE_UNIT)]
