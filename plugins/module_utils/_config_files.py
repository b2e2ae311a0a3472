# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Writing a node's small configuration files and directories, each only when it differs (config_files and
packaged_services; private to the collection)."""

from __future__ import annotations

import os
import re
import tempfile

from ansible.module_utils.common.text.converters import to_bytes, to_text

# The suboptions of one entry (config_files' `files`, packaged_services' `files`).
ENTRY_OPTIONS = dict(
    path=dict(type="path", required=True),
    state=dict(type="str", choices=["file", "directory", "line"], default="file"),
    content=dict(type="str", no_log=True),
    line=dict(type="str"),
    regexp=dict(type="str"),
    mode=dict(type="str", required=True),
    owner=dict(type="str"),
    group=dict(type="str"),
    diff=dict(type="bool", default=True),
)
ENTRY_HINT = ("every entry needs an absolute path and a mode such as \"0644\"; a file needs content, a directory none, "
              "a line entry a line")


def problem(entry):
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


def secrets(entries):
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


def apply(module, entries, diff):
    """Makes every entry so, in order; returns one dict per entry (path, state, changed). ``diff`` collects the
    before/after text of what changed ({"before": {}, "after": {}})."""
    done = []
    for entry in entries:
        step = {"directory": _directory, "line": _line}.get(entry["state"], _file)
        done.append(dict(path=entry["path"], state=entry["state"], changed=bool(step(module, entry, diff))))
    return done


def diff_list(diff, changed_paths):
    """The module's ``diff`` output: one before/after per changed path that has one."""
    return [dict(before_header=path, after_header=path, before=diff["before"].get(path, ""),
                 after=diff["after"].get(path, "")) for path in changed_paths
            if path in diff["before"] or path in diff["after"]]
