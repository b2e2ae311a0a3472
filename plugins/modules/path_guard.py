#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: path_guard
short_description: Refuse, before anything changes, a path the roles would write that resolves into the system
version_added: 0.3.0
description:
  - Preflight runs it once on every node with every path the roles will create, chown, chmod or overwrite there
    (configuration, Ray and cache directories, the model directory, keys, the model state file ...).
  - Each path is judged as written and, when a symbolic link lies on the way, as the path it leads to. Refused are
    the kernel's and the system's trees (C(/proc), C(/sys), C(/dev), C(/boot), C(/usr/bin), C(/var/lib/docker),
    C(/root) ...), world-writable trees (C(/tmp), C(/var/tmp), C(/dev/shm)), anything under C(/etc), C(/usr),
    C(/var) or C(/run) outside a directory of the collection's own (named C(sparkfleet...)), every home directory
    of this node's users itself and its dot-directories (C(~/.ssh), C(~/.docker) ...).
  - What already exists must be what the role writes there. A directory must not be a file. A file must be a plain
    file, not a symbolic link. The model state file must hold a model state. A model directory that holds entries
    must hold a model.
  - Fails with one sentence per refused path, naming the variable, the path and why; reads only, changes nothing.
  - Also measures the free space of every filesystem those paths lie on (the nearest existing directory of each) and
    warns, naming the variables and the filesystem, when one has less than O(min_free_mb) left. The watchdogs,
    journald and docker write there while the cluster serves, and a full disk on the head once switched self-healing
    off. A model directory is left out (model_sync checks its own room against the model's size).
author:
  - sparkfleet.vllm contributors (@sparkfleet)
options:
  paths:
    description:
      - The paths the roles write on this node.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: The variable that holds the path (named in every problem).
        type: str
        required: true
      path:
        description: The path as the role will use it; C(~/) is the home of O(paths[].user).
        type: str
        required: true
      kind:
        description:
          - What the role writes there. V(key file) also checks its C(.pub), V(state file) its C(.served) copy;
            V(ssh file) is a file of ours in a user's C(~/.ssh), such as a known-hosts file (never one ssh reads
            itself, never through a link).
        type: str
        choices: [directory, model directory, file, key file, state file, ssh file]
        default: directory
      user:
        description: The user whose home a C(~/) path is in; the connecting user when not set.
        type: str
  min_free_mb:
    description:
      - The floor of free space (MiB) on each filesystem a path lies on below which the module warns (RV(low_space));
        V(0) measures without warning. Never a failure.
    type: int
    default: 1024
notes:
  - The P(sparkfleet.vllm.node_paths#filter) filter builds O(paths) from the roles' variables.
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Refuse a configuration directory under a system directory
  sparkfleet.vllm.path_guard:
    paths:
      - {name: sparkfleet_config_dir, path: /etc/sparkfleet, kind: directory}
      - {name: model_sync_known_hosts, path: ~/.ssh/sparkfleet_known_hosts, kind: file, user: nvidia}
"""

RETURN = r"""
problems:
  description: One sentence per refused path (variable, path, why and what to do); empty when every path is usable.
  returned: always
  type: list
  elements: str
  sample: ["sparkfleet_ray_tmp_dir /srv/ray leads through a symbolic link to /home/nvidia/.ssh, which lies in the dot-directory /home/nvidia/.ssh of a home"]
paths:
  description: Each path as checked, with C(resolved) (the path after symbolic links) and C(exists).
  returned: always
  type: list
  elements: dict
low_space:
  description: Each filesystem below O(min_free_mb), with the variables whose paths lie on it.
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: The nearest existing directory of the first such path, where the free space was measured.
      type: str
    free_mb:
      description: MiB free for writers that are not root (statvfs C(f_bavail)).
      type: int
    names:
      description: The variables whose paths lie on that filesystem.
      type: list
      elements: str
  sample: [{path: /var/lib/sparkfleet, free_mb: 48, names: [sparkfleet_state_dir, sparkfleet_config_dir]}]
"""

import os
import pwd
import stat

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils.sync import _paths

KINDS = ("directory", "model directory", "file", "key file", "state file", "ssh file")
# ~/.ssh files ssh itself reads: never a file of ours.
SSH_OWN = frozenset(("authorized_keys", "authorized_keys2", "config", "rc", "environment"))
# What a model directory holds (a Hugging Face snapshot, our marker); anything else there is someone else's.
MODEL_SUFFIXES = (".safetensors", ".json", ".bin", ".model", ".txt", ".py", ".tiktoken", ".gguf", ".pt", ".pth",
                  ".msgpack", ".md", ".jinja", ".h5", ".npz", ".onnx", ".partial", ".incomplete", ".lock")
MODEL_NAMES = frozenset((".cache", ".gitattributes", ".huggingface", "original", "LICENSE")) | frozenset(
    _paths.MODEL_FILES)
STATE_PREFIX = b"fingerprint="
# What to do, per kind (the variable is named in front of every problem).
FIX = {
    "directory": "set it to a directory of its own that leads nowhere else, e.g. under /var/lib/sparkfleet or /srv",
    "model directory": "set it to the model's own directory, e.g. /models/<name>",
    "file": "set it to a file of its own, e.g. under /etc/sparkfleet",
    "key file": "set it to a file of its own, e.g. under /etc/sparkfleet",
    "state file": "set it to a file of its own, e.g. /etc/sparkfleet/model.state",
    "ssh file": "set it to a file of its own in the user's ~/.ssh, e.g. ~/.ssh/sparkfleet_known_hosts",
}


def node_homes():
    """The home directories of this node's users."""
    try:
        return sorted(set(p.pw_dir for p in pwd.getpwall() if p.pw_dir and p.pw_dir.startswith("/")))
    except (KeyError, OSError):
        return []


def expand(path, user):
    """~/x as the given user's (or the connecting user's) home; None when that user does not exist here."""
    if not path.startswith("~/") and path != "~":
        return path
    try:
        home = pwd.getpwnam(user).pw_dir if user else pwd.getpwuid(os.getuid()).pw_dir
    except (KeyError, ValueError):  # ValueError: a name with a NUL byte (no such user either)
        return None
    return home.rstrip("/") + path[1:]


def _lstat(path):
    try:
        return os.lstat(path)
    except OSError:
        return None


def _model_problem(path):
    try:
        names = os.listdir(path)
    except OSError:
        return None
    foreign = [n for n in names if n not in MODEL_NAMES and not n.endswith(MODEL_SUFFIXES)]
    if names and len(foreign) == len(names):
        return ("is a directory that holds %d entries and none of a model (%s): a sync into it, its chown or a"
                " delete would touch someone else's files; use the model's own directory"
                % (len(names), ", ".join(sorted(foreign)[:4])))
    return None


def _state_problem(path):
    try:
        with open(path, "rb") as handle:
            head = handle.read(64)
    except OSError:
        return None
    if head and not head.startswith(STATE_PREFIX):
        return ("is a file that holds no model state (it does not start with 'fingerprint='): model_sync and"
                " vllm_serve would overwrite it; use a file of the collection's own, e.g. /etc/sparkfleet/model.state")
    return None


def judge(name, path, kind, homes, user=None):
    """(problems, record) for one path on this node."""
    shown = "%s %s" % (name, path)
    full = expand(path, user)
    if full is None:
        return ["%s: the user %s (its home holds this path) does not exist on this node; create the user or set the"
                " variable that names it" % (shown, user)], {}
    base = "file" if kind in ("file", "key file", "state file", "ssh file") else kind
    if kind == "ssh file":
        # A file of ours in the user's ~/.ssh (the one dot-directory the roles write in): the rule is its own.
        ssh_dir, leaf = os.path.split(_paths.normal_path(full))
        if os.path.basename(ssh_dir) != ".ssh" or leaf in SSH_OWN or leaf.startswith("id_") or leaf.endswith(".pub"):
            return ["%s must be a file of its own in the user's ~/.ssh (e.g. ~/.ssh/sparkfleet_known_hosts), never"
                    " one ssh reads (%s) or a key" % (shown, ", ".join(sorted(SSH_OWN)))], {}
        if os.path.realpath(ssh_dir) != ssh_dir:
            return ["%s: %s is a symbolic link (to %s); the user's ~/.ssh must be a directory of its own"
                    % (shown, ssh_dir, os.path.realpath(ssh_dir))], {}
        problem = _paths.path_chars_problem(full)
    else:
        problem = _paths.written_path_problem(full, base, homes)
    if problem:
        return ["%s %s" % (shown, problem)], dict(name=name, path=full)
    problems = []
    targets = [full] + ([full + ".pub"] if kind == "key file" else []) + ([full + ".served"] if kind == "state file" else [])
    record = dict(name=name, path=full, resolved=os.path.realpath(full), exists=os.path.lexists(full))
    for target in targets:
        real = os.path.realpath(target)
        if real != _paths.normal_path(target) and kind != "ssh file":
            problem = _paths.written_path_problem(real, base, homes)
            if problem:
                problems.append("%s leads through a symbolic link to %s, which %s" % (shown, real, problem))
                continue
        st = _lstat(target)
        if st is None:
            continue
        if base == "file":
            if stat.S_ISLNK(st.st_mode):
                problems.append("%s: %s is a symbolic link (to %s); a file the roles write must be a plain file or"
                                " absent" % (shown, target, real))
            elif not stat.S_ISREG(st.st_mode):
                problems.append("%s: %s exists and is not a plain file (a directory, device or socket)"
                                % (shown, target))
            elif kind == "state file":
                problem = _state_problem(target)
                if problem:
                    problems.append("%s: %s %s" % (shown, target, problem))
            continue
        if not os.path.isdir(target):
            problems.append("%s exists and is not a directory" % shown)
        elif kind == "model directory":
            problem = _model_problem(target)
            if problem:
                problems.append("%s %s" % (shown, problem))
    return problems, record


def _existing(path):
    """The nearest existing directory of path (itself when it is one)."""
    path = os.path.abspath(path)
    while not os.path.isdir(path) and path != os.path.dirname(path):
        path = os.path.dirname(path)
    return path


def low_space(entries, floor_mb):
    """[{path, free_mb, names}] of every filesystem (by device) the entries' paths lie on that has less than floor_mb
    MiB free; entries: (name, path, kind) with ~ already expanded. Model directories are left out."""
    seen = {}
    for name, path, kind in entries:
        if kind == "model directory" or not path.startswith("/"):
            continue
        where = _existing(path)
        try:
            st = os.statvfs(where)
            dev = os.stat(where).st_dev
        except OSError:
            continue
        fs = seen.setdefault(dev, {"path": where, "free_mb": st.f_bavail * st.f_frsize // (1 << 20), "names": []})
        if name not in fs["names"]:
            fs["names"].append(name)
    return [fs for fs in seen.values() if fs["free_mb"] < floor_mb]


def main():
    module = AnsibleModule(
        argument_spec=dict(
            paths=dict(type="list", elements="dict", required=True, options=dict(
                name=dict(type="str", required=True),
                path=dict(type="str", required=True),
                kind=dict(type="str", default="directory", choices=list(KINDS)),
                user=dict(type="str"),
            )),
            min_free_mb=dict(type="int", default=1024),
        ),
        supports_check_mode=True,
    )
    if module.params["min_free_mb"] < 0:
        module.fail_json(msg="min_free_mb must be 0 or more (MiB), got %d" % module.params["min_free_mb"])
    homes = node_homes()
    problems, records = [], []
    for entry in module.params["paths"]:
        found, record = judge(entry["name"], entry["path"], entry["kind"], homes, entry["user"])
        problems += [p if "does not exist on this node" in p else "%s; %s" % (p, FIX[entry["kind"]]) for p in found]
        records.append(record)
    low = low_space([(e["name"], r.get("resolved") or r.get("path") or e["path"], e["kind"])
                     for e, r in zip(module.params["paths"], records)], module.params["min_free_mb"])
    for fs in low:
        module.warn("%d MiB free on the filesystem of %s (%s), under the %d MiB floor: the watchdogs, journald and docker"
                    " write there while the cluster serves; free space there (journalctl --vacuum-size, docker system"
                    " prune, old models)" % (fs["free_mb"], fs["path"], ", ".join(fs["names"]),
                                             module.params["min_free_mb"]))
    if problems:
        module.fail_json(msg="%d path(s) the roles would write are refused: %s" % (len(problems), "; ".join(problems)),
                         problems=problems, paths=records, low_space=low)
    module.exit_json(changed=False, problems=[], paths=records, low_space=low)


if __name__ == "__main__":
    main()
