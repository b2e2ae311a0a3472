# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The prepare role's variables: what each may be.

Every option of roles/prepare/meta/argument_specs.yml has its check here (CHECKS: variable -> check);
tests/unit/plugins/plugin_utils/test_validate_specs.py holds the two together. prepare runs with the sudo password
before any site.yml, so it checks its settings itself (roles/sparkfleet/tasks/validate.yml) before it writes a
sudoers file; the floor settings it reads are checked with the floor's (validate.yml checks both). Private to the collection, pure
functions, no I/O.
"""

from __future__ import annotations

import re

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._validate_values import (
    check_bool,
    check_string,
    is_string,
)

# sudo reads a file of /etc/sudoers.d/ only when its name holds no '.' and does not end in '~' (sudoers(5),
# #includedir): a name like sparkfleet.conf would be written, checked by visudo and then silently never read.
_SUDOERS_RE = re.compile(r"^/etc/sudoers\.d/[A-Za-z0-9_-]{1,64}\Z")
# a Docker tag (docker's reference grammar)
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}\Z")


def check_sudoers_file(value):
    if not is_string(value) or not _SUDOERS_RE.match(value):
        return None, ("must be a file directly under /etc/sudoers.d/ whose name has only letters, digits, '_' and '-'"
                      " (sudo never reads a name with a '.' or ending in '~'), e.g. /etc/sudoers.d/sparkfleet")
    return value, None


def check_controller_file(value):
    """A file on the controller, or '' (the step is off): a plain path, no newline or control character."""
    if value is None or value == "":
        return "", None
    problem = check_string(value)[1]
    if problem:
        return None, problem
    if value != value.strip() or any(ord(c) < 32 or c == "\x7f" for c in value):
        return None, "must be a path on the controller without blanks around it or control characters, or ''"
    return value, None


def check_tag(value):
    if not is_string(value) or not _TAG_RE.match(value):
        return None, "must be a Docker tag (letters, digits, '_', '.', '-'; at most 128), e.g. latest"
    return value, None


CHECKS = {
    "prepare_passwordless_sudo": check_bool,
    "prepare_sudoers_file": check_sudoers_file,
    "prepare_controller_key": check_controller_file,
    "prepare_api_key_vault_file": check_controller_file,
    "prepare_image_vars_file": check_controller_file,
    "prepare_image_tag": check_tag,
}
