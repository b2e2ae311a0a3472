#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: config_files
short_description: Write a node's small configuration files and directories in one call, each only when it differs
version_added: 0.2.0
description:
  - Makes every entry of O(files) - a directory, or a file with the given text - exist with its owner, group and mode,
    in the order given, and changes only what differs. One module run on the node replaces a C(file), C(copy) or
    C(template) task per path, each of which costs one or two round trips even when nothing changes (a re-run).
  - A file is written to a temporary file in its own directory, given its owner, group and mode, and renamed over
    the old one (atomic; a reader never sees half a file, and a secret is never readable by others). Its parent
    directory must exist; list the directory first to create it.
  - Reports which paths changed (RV(changed_paths)), so one task can notify a handler for the whole set.
author:
  - sparkfleet.vllm contributors (@sparkfleet)
options:
  files:
    description:
      - The paths to make so, in order.
    type: list
    elements: dict
    required: true
    suboptions:
      path:
        description:
          - Absolute path.
        type: path
        required: true
      state:
        description:
          - V(file), a regular file holding O(files[].content); V(directory), a directory (parents created as needed,
            with the default mode; only the last one gets O(files[].mode)); V(line), a file that holds O(files[].line)
            among its other lines, as M(ansible.builtin.lineinfile) with C(create=true) keeps one - the last line that
            matches O(files[].regexp) is replaced by it, or it is added at the end when none matches and it is not
            there yet. A missing file is created, and a missing parent directory with mode C(0700) and the entry's
            owner and group (an C(.ssh) directory).
        type: str
        choices: [file, directory, line]
        default: file
      line:
        description:
          - The line (without its newline) for V(line). Required for V(line); not allowed otherwise.
        type: str
      regexp:
        description:
          - For V(line), a Python regular expression searched in every line; the last line it finds is replaced.
        type: str
      content:
        description:
          - The whole text of the file (UTF-8). Required for V(file); not allowed for V(directory).
          - Hidden in the module's output and in a diff when O(files[].diff=false), also where the same text (or one of
            its lines, or a V(KEY=VALUE) line's value) appears in another entry. With O(files[].diff=true) (the
            default) the text is shown in the diff of C(--diff) and in the result's C(invocation); the syslog record
            the module leaves on the node never holds any file's content.
        type: str
      mode:
        description:
          - Permissions, as an octal string (V("0644")).
        type: str
        required: true
      owner:
        description:
          - Owner (name or uid). Unset, a new path gets the connection user's and an existing one keeps its owner.
        type: str
      group:
        description:
          - Group (name or gid). Unset, as for O(files[].owner).
        type: str
      diff:
        description:
          - Whether a changed file's old and new text may appear in the diff (C(--diff)); V(false) for secrets.
        type: bool
        default: true
notes:
  - Check mode reports what would change and changes nothing; diff mode shows the text of changed files with
    O(files[].diff=true) and the state of changed directories.
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Write Ray's files (one round trip for all of them)
  sparkfleet.vllm.config_files:
    files:
      - {path: /etc/sparkfleet, state: directory, owner: root, group: root, mode: "0750"}
      - path: /etc/sparkfleet/ray.env
        content: "{{ ray_env_lines }}"
        owner: root
        group: root
        mode: "0600"
        diff: false
      - path: /etc/systemd/system/sparkfleet-ray.service
        content: "{{ lookup('ansible.builtin.template', 'sparkfleet-ray.service.j2') }}"
        owner: root
        group: root
        mode: "0644"
  no_log: true  # ray.env holds the Ray token
  notify: Restart ray
"""

RETURN = r"""
changed_paths:
  description: The paths that were (in check mode, would be) created or changed, in the order given.
  returned: always
  type: list
  elements: str
  sample: [/etc/sparkfleet/ray.env]
files:
  description: One entry per path, in the order given.
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: The path.
      type: str
    state:
      description: V(file) or V(directory).
      type: str
    changed:
      description: Whether it was (would be) created, rewritten, or had its owner, group or mode changed.
      type: bool
  sample: [{path: /etc/sparkfleet/ray.env, state: file, changed: true}]
"""

import os
import re
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_text


def _problem(entry):
    """What is wrong with one entry, before anything is touched (None when nothing)."""
    path = entry["path"]
    if not os.path.isabs(path):
        return "%s: path must be absolute" % path
    if entry["state"] == "file" and entry["content"] is None:
        return "%s: content is required for a file" % path
    if entry["state"] == "directory" and entry["content"] is not None:
        return "%s: content is not allowed for a directory" % path
    if entry["state"] == "line":
        if entry["line"] is None or entry["content"] is not None:
            return "%s: a line entry needs line and takes no content" % path
        if "\n" in entry["line"]:
            return "%s: line must be one line (it holds a newline)" % path
        if entry["regexp"] is not None:
            try:
                re.compile(entry["regexp"])
            except re.error as exc:
                return "%s: regexp %r does not compile: %s" % (path, entry["regexp"], exc)
    elif entry["line"] is not None or entry["regexp"] is not None:
        return "%s: line and regexp are for state line only" % path
    try:
        if int(entry["mode"], 8) > 0o7777:
            raise ValueError
    except ValueError:
        return "%s: mode %r is not an octal mode such as \"0644\"" % (path, entry["mode"])
    return None


def _attributes(module, entry):
    return module.load_file_common_arguments(dict(path=entry["path"], mode=entry["mode"], owner=entry["owner"],
                                                  group=entry["group"]))


def _directory(module, entry, diff):
    path = entry["path"]
    exists = os.path.lexists(path)
    if exists and not os.path.isdir(path):
        module.fail_json(msg="%s exists and is not a directory; move it away or fix the path" % path, path=path)
    changed = not exists
    if changed:
        diff["before"][path], diff["after"][path] = "absent", "directory"
        if module.check_mode:
            return True
        os.makedirs(path)
    return module.set_fs_attributes_if_different(_attributes(module, entry), changed)


def _file(module, entry, diff):
    path = entry["path"]
    parent = os.path.dirname(path)
    if not os.path.isdir(parent) and not module.check_mode:
        module.fail_json(msg="%s: its directory %s does not exist; list the directory before the file" % (path, parent),
                         path=path)
    exists = os.path.lexists(path)
    if exists and not os.path.isfile(path):
        module.fail_json(msg="%s exists and is not a regular file; move it away or fix the path" % path, path=path)
    want = to_bytes(entry["content"], errors="surrogate_or_strict")
    have = None
    if exists:
        with open(path, "rb") as handle:
            have = handle.read()
    changed = have != want
    if changed and entry["diff"]:
        diff["before"][path] = to_text(have, errors="surrogate_or_replace") if have is not None else "(absent)"
        diff["after"][path] = entry["content"]
    elif changed:
        diff["before"][path], diff["after"][path] = "(content hidden)", "(content hidden, changed)"
    if module.check_mode and not exists:
        return changed
    if changed and not module.check_mode:
        # Owner, group and mode are set on the temporary file (created 0600) before the rename: a secret is never
        # readable by anyone else, not even for an instant.
        fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), dir=parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(want)
                handle.flush()
                os.fsync(handle.fileno())
            attrs = _attributes(module, entry)
            attrs["path"] = tmp
            module.set_fs_attributes_if_different(attrs, True)
            os.rename(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return True
    return module.set_fs_attributes_if_different(_attributes(module, entry), changed)


def with_line(text, line, regexp):
    """``text`` with ``line`` in it: the last line ``regexp`` finds replaced by it, else ``line`` appended unless there."""
    lines = text.splitlines()
    found = [i for i, x in enumerate(lines) if regexp is not None and re.search(regexp, x)]
    if found:
        lines[found[-1]] = line
    elif line not in lines:
        lines.append(line)
    else:
        return text
    return "\n".join(lines) + "\n"


def _line(module, entry, diff):
    path = entry["path"]
    parent = os.path.dirname(path)
    have = ""
    if os.path.isfile(path):
        with open(path, "rb") as handle:
            have = to_text(handle.read(), errors="surrogate_or_strict")
    created = False
    if not os.path.isdir(parent):
        diff["before"][parent], diff["after"][parent] = "absent", "directory"
        if module.check_mode:
            return True
        os.makedirs(parent)
        module.set_fs_attributes_if_different(_attributes(module, dict(entry, path=parent, mode="0700")), True)
        created = True
    want = with_line(have, entry["line"], entry["regexp"])
    return _file(module, dict(entry, content=want), diff) or created


def _secrets(entries):
    """The texts of the diff=false entries, whole, line by line and the value of each KEY=VALUE line: what the
    output must never show."""
    found = set()
    for entry in entries:
        if entry.get("diff") is not False:
            continue
        for text in (entry.get("content"), entry.get("line")):
            if not text or not text.strip():
                continue
            found.add(text)
            for line in text.splitlines():
                line = line.strip()
                if len(line) >= 4:
                    found.add(line)
                value = line.split("=", 1)[1].strip().strip("'\"") if "=" in line else ""
                if len(value) >= 4:
                    found.add(value)
    return found


def main():
    module = AnsibleModule(
        argument_spec=dict(
            files=dict(type="list", elements="dict", required=True, no_log=True, options=dict(
                path=dict(type="path", required=True),
                state=dict(type="str", choices=["file", "directory", "line"], default="file"),
                content=dict(type="str", no_log=True),
                line=dict(type="str"),
                regexp=dict(type="str"),
                mode=dict(type="str", required=True),
                owner=dict(type="str"),
                group=dict(type="str"),
                diff=dict(type="bool", default=True),
            )),
        ),
        supports_check_mode=True,
    )
    entries = module.params["files"]
    # `files` is no_log, so the syslog record of the invocation on the node reads files=NOT_LOGGING_PARAMETER and holds
    # no file's text: ansible-core 2.19 logs a suboption marked no_log (content) in clear (seen in the lab's journal:
    # vllm.env with the API key). The output hides only what diff=false marks secret: paths, modes and every other
    # file's text are shown and may be diffed (--check --diff predicts changes).
    secrets = _secrets(entries)
    module.no_log_values.clear()
    module.no_log_values.update(secrets)
    problems = [p for p in (_problem(e) for e in entries) if p]
    if problems:
        module.fail_json(msg="; ".join(problems),
                         hint="every entry needs an absolute path and a mode such as \"0644\"; a file needs content, "
                              "a directory none, a line entry a line")
    diff = {"before": {}, "after": {}}
    done = []
    for entry in entries:
        step = {"directory": _directory, "line": _line}.get(entry["state"], _file)
        done.append(dict(path=entry["path"], state=entry["state"], changed=bool(step(module, entry, diff))))
    changed_paths = [r["path"] for r in done if r["changed"]]
    # not "results": callbacks read a result's "results" as the items of a loop
    out = dict(changed=bool(changed_paths), changed_paths=changed_paths, files=done)
    if module._diff and changed_paths:
        out["diff"] = [dict(before_header=path, after_header=path, before=diff["before"].get(path, ""),
                            after=diff["after"].get(path, "")) for path in changed_paths
                       if path in diff["before"] or path in diff["after"]]
    module.exit_json(**out)


if __name__ == "__main__":
    main()
