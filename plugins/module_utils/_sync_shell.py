# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The sync key's forced command: what model_sync may run on a worker, and nothing else.

model_sync builds every command it sends to a destination with remote_commands() and rsync; on a worker, the
sync key's authorized_keys entry forces `python3 <this file> DEST ALLOWED.json` (model_sync role; the JSON list
holds model_sync's fixed commands for DEST, written by the role from the same builders), which lets through only
  - one of those commands, compared byte for byte (run with sh -c);
  - `rsync --server` receiving into DEST (not --sender), with the options model_sync uses;
  - a relay: `rsync` pushing DEST/ to another node's DEST/ over ssh, with the options model_sync uses.
Anything else is refused with a line on stderr and exit status 126: no shell, no sudo, no other path.
Standard library only: the model_sync role copies this file to the workers and runs it there.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys

TEMP_DIR_NAME = ".sparkfleet-sync"
MARKER_NAME = ".sparkfleet-model"

# rsync --server options model_sync's client sends (captured from rsync 3.2.7 with every module option).
_SERVER_FLAGS = re.compile(r"^-[A-Za-z.]+$")
_SERVER_OPTS = re.compile(r"^--(log-format=%i|timeout=\d+|bwlimit=\d+|delete|ignore-existing|existing|mkpath)$")
# rsync client options of a relay (model_sync's rsync_argv).
_CLIENT_OPTS = re.compile(
    r"^--(recursive|copy-links|perms|times|whole-file|mkpath|out-format=SFL\|%i\|%l\|%n|exclude=/\.sparkfleet-sync/"
    r"|exclude=/\.sparkfleet-model|temp-dir=\.sparkfleet-sync|ignore-times|from0|files-from=-|timeout=\d+"
    r"|bwlimit=\d+|checksum|delete|dry-run)$")
_SSH_OPTION_KEYS = ("BatchMode", "Compression", "StrictHostKeyChecking", "ConnectTimeout", "UserKnownHostsFile",
                    "IdentitiesOnly")
_HOST = re.compile(r"^(?:[A-Za-z0-9_][A-Za-z0-9_.-]*@)?(?:[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+\])$")
_CIPHERS = re.compile(r"^[A-Za-z0-9@.,_-]+$")


def remote_commands(dest, hash_script=None, cache=None):
    """{name: shell command} of every fixed command model_sync runs on a destination for ``dest``."""
    q = shlex.quote(dest)
    staging = shlex.quote(os.path.join(dest, TEMP_DIR_NAME))
    cmds = {
        "prepare": "mkdir -p %s && find %s -mindepth 1 -delete" % (staging, staging),
        "finish": "rmdir %s 2>/dev/null; touch %s; true" % (staging, shlex.quote(os.path.join(dest, MARKER_NAME))),
        "list": "cd %s && find . -path ./%s -prune -o -type f -printf '%%s %%P\\0'" % (q, TEMP_DIR_NAME),
        # dd with count=0: fdatasync then fadvise(DONTNEED) over each named file (names on stdin).
        "drop_cache": ("cd %s && xargs -0 -r -n 1 sh -c 'dd of=\"$1\" oflag=nocache conv=notrunc,fdatasync count=0 "
                       "status=none' sh" % q),
    }
    if hash_script is not None:
        cmds["hash"] = "python3 -c %s %s \"%s\"" % (shlex.quote(hash_script), q, cache)
    return cmds


def _within(path, dest):
    norm = os.path.normpath(path)
    return norm == os.path.normpath(dest)


def _check_rsh(value):
    argv = shlex.split(value)
    if not argv or argv[0] != "ssh":
        return "the relay's --rsh is not ssh"
    i = 1
    while i < len(argv):
        opt = argv[i]
        if opt == "-o" and i + 1 < len(argv):
            key = argv[i + 1].split("=", 1)[0]
            if key not in _SSH_OPTION_KEYS:
                return "ssh option %s is not allowed" % key
            i += 2
        elif opt == "-c" and i + 1 < len(argv) and _CIPHERS.match(argv[i + 1]):
            i += 2
        else:
            return "ssh argument %r is not allowed" % opt
    return None


def check(command, dest, fixed):
    """('shell', command) | ('exec', argv) | ('refuse', reason) for one SSH_ORIGINAL_COMMAND."""
    if not command:
        return "refuse", "an interactive login is not allowed with the sync key"
    if command in fixed:
        return "shell", command
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        return "refuse", "unparsable command: %s" % exc
    if not argv or argv[0] != "rsync":
        return "refuse", "only model_sync's own commands may run with the sync key"
    if "--server" in argv:
        if "--sender" in argv:
            return "refuse", "the sync key only receives (no --sender)"
        rest = argv[2:] if argv[1] == "--server" else None
        if rest is None or len(rest) < 2 or rest[-2] != ".":
            return "refuse", "unexpected rsync --server arguments"
        i = 0
        opts = rest[:-2]
        while i < len(opts):
            opt = opts[i]
            if opt == "--temp-dir" and i + 1 < len(opts) and opts[i + 1] == TEMP_DIR_NAME:
                i += 2
                continue
            if not (_SERVER_FLAGS.match(opt) or _SERVER_OPTS.match(opt)):
                return "refuse", "rsync option %s is not allowed" % opt
            i += 1
        if not _within(rest[-1], dest):
            return "refuse", "rsync may only write into %s, not %s" % (dest, rest[-1])
        return "exec", argv
    # A relay: this node pushes its copy to the next one.
    positional = [a for a in argv[1:] if not a.startswith("-")]
    for opt in (a for a in argv[1:] if a.startswith("-")):
        if opt.startswith("--rsh="):
            why = _check_rsh(opt[len("--rsh="):])
            if why:
                return "refuse", why
        elif not _CLIENT_OPTS.match(opt):
            return "refuse", "rsync option %s is not allowed in a relay" % opt
    if len(positional) != 2 or not _within(positional[0], dest):
        return "refuse", "a relay may only send %s/" % dest
    host, sep, path = positional[1].rpartition(":")
    if not sep or not _HOST.match(host) or not _within(path, dest):
        return "refuse", "a relay may only send to another node's %s/" % dest
    return "exec", argv


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        sys.stderr.write("usage: sync_shell DEST ALLOWED_COMMANDS_JSON\n")
        return 2
    dest, allowed_file = argv
    try:
        with open(allowed_file) as handle:
            fixed = set(str(c) for c in json.load(handle))
    except (OSError, ValueError, TypeError) as exc:
        sys.stderr.write("sparkfleet sync key: cannot read %s: %s\n" % (allowed_file, exc))
        return 126
    verdict, what = check(os.environ.get("SSH_ORIGINAL_COMMAND", ""), dest, fixed)
    if verdict == "refuse":
        sys.stderr.write("sparkfleet sync key: refused: %s\n" % what)
        return 126
    if verdict == "shell":
        os.execv("/bin/sh", ["sh", "-c", what])
    os.execvp(what[0], what)
    return 126


if __name__ == "__main__":
    raise SystemExit(main())
