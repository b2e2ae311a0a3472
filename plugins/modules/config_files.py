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

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sparkfleet.vllm.plugins.module_utils._config_files import (
    ENTRY_HINT, ENTRY_OPTIONS, apply, diff_list, problem, secrets)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            files=dict(type="list", elements="dict", required=True, no_log=True, options=dict(ENTRY_OPTIONS)),
        ),
        supports_check_mode=True,
    )
    entries = module.params["files"]
    # `files` is no_log, so the syslog record of the invocation on the node reads files=NOT_LOGGING_PARAMETER and holds
    # no file's text: ansible-core 2.19 logs a suboption marked no_log (content) in clear (seen in the lab's journal:
    # vllm.env with the API key). The output hides only what diff=false marks secret: paths, modes and every other
    # file's text are shown and may be diffed (--check --diff predicts changes).
    hidden = secrets(entries)
    module.no_log_values.clear()
    module.no_log_values.update(hidden)
    problems = [p for p in (problem(e) for e in entries) if p]
    if problems:
        module.fail_json(msg="; ".join(problems), hint=ENTRY_HINT)
    diff = {"before": {}, "after": {}}
    done = apply(module, entries, diff)
    changed_paths = [r["path"] for r in done if r["changed"]]
    # not "results": callbacks read a result's "results" as the items of a loop
    out = dict(changed=bool(changed_paths), changed_paths=changed_paths, files=done)
    if module._diff and changed_paths:
        out["diff"] = diff_list(diff, changed_paths)
    module.exit_json(**out)


if __name__ == "__main__":
    main()
