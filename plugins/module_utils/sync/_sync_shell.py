# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The sync key's forced command: what model_sync may run on a worker, and nothing else.

model_sync builds every command it sends to a destination with remote_commands() and rsync; on a worker, the
sync key's authorized_keys entry forces `python3 <this file> DEST ALLOWED.json` (model_sync role; the JSON list
holds model_sync's fixed commands for DEST, written by the role from the same builders), which lets through only
  - one of those commands, compared byte for byte (run with sh -c);
  - `rsync --server` receiving into DEST (not --sender) with exactly the options model_sync's client sends: no
    symlink (-l), dirlink (-K) or copy-links (-L) handling, no other path, no log file, no rsync-path;
  - a relay: `rsync` pushing DEST/ to another node's DEST/ over ssh with exactly model_sync's relay options, which
    follow no symlink (a link planted in DEST is skipped, never followed out of it).
Anything else is refused with a line on stderr and exit status 126: no shell, no sudo, no other path.
Standard library only: the model_sync role copies this file to the workers and runs it there.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import sys

TEMP_DIR_NAME = ".sparkfleet-sync"
MARKER_NAME = ".sparkfleet-model"

# rsync --server's first argument as model_sync's client sends it (captured from rsync 3.2.7 and 3.5.0 with every
# module option): the option letters, then `e.` and the protocol's capability letters. Always -W -t -p -r; maybe -n
# (dry run), -c (checksum), -I (ignore times), -R (relative, from --files-from). Never -l, -L, -K, -k, -o, -g, -D.
_SERVER_CLUSTER = re.compile(r"^-([A-Za-z]+)e\.([A-Za-z]*)$")
_SERVER_REQUIRED = frozenset("Wtpr")
_SERVER_LETTERS = frozenset("WtprncIR")
_CAPABILITIES = frozenset("iLsfxCIvu")
# Long options of rsync --server, each at most once (--temp-dir takes its value as the next argument).
_SERVER_OPTS = re.compile(r"^--(log-format=%i|timeout=\d{1,6}|bwlimit=\d{1,9}|delete|ignore-existing|existing"
                          r"|mkpath)$")
# rsync client options of a relay (model_sync's relay_argv), each at most once; --copy-links is not one of them.
_CLIENT_OPTS = re.compile(
    r"^--(recursive|perms|times|whole-file|mkpath|out-format=SFL\|%i\|%l\|%n|exclude=/\.sparkfleet-sync/"
    r"|exclude=/\.sparkfleet-model|temp-dir=\.sparkfleet-sync|ignore-times|from0|files-from=-|timeout=\d{1,6}"
    r"|bwlimit=\d{1,9}|checksum|delete|dry-run)$")
_SSH_OPTION_KEYS = ("BatchMode", "Compression", "StrictHostKeyChecking", "ConnectTimeout", "UserKnownHostsFile",
                    "IdentitiesOnly")
_HOST = re.compile(r"^(?:[A-Za-z0-9_][A-Za-z0-9_.-]*@)?(?:[A-Za-z0-9_][A-Za-z0-9_.-]*|\[[0-9A-Fa-f:.]+\])$")
_CIPHERS = re.compile(r"^[A-Za-z0-9@.,_-]+$")
# ssh user names (POSIX portable user names) and host names / IP literals model_sync accepts.
_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}$")
_HOSTNAME = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,252})$")
_IPV6 = re.compile(r"^(?:\[[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*(?:%[A-Za-z0-9_.-]+)?\]"
                   r"|[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*(?:%[A-Za-z0-9_.-]+)?)$")

# bytes of the allowed-commands file (a few commands)
JSON_MAX = 1 << 20


def read_json_file(path, limit=JSON_MAX):
    """The JSON document in path when it is a regular file of at most limit bytes; OSError or ValueError otherwise.

    Standard library only, so a local copy of module_utils/_json.py's read: opened without blocking (a FIFO's open
    waits for a writer), checked by fstat on the open file, bounded in bytes, and nesting deeper than the parser
    follows is a ValueError, never a RecursionError."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("%s is not a regular file" % path)
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        raise ValueError("%s is more than %d bytes" % (path, limit))
    try:
        return json.loads(b"".join(chunks).decode("utf-8", "replace"))
    except RecursionError:
        raise ValueError("%s nests JSON deeper than the parser follows" % path)


def ssh_host_problem(host, what="destination"):
    """Why ``host`` cannot be an ssh destination (an option such as -oProxyCommand=..., a user@, spaces), or None."""
    if not isinstance(host, str) or not host.strip():
        return "the %s is empty" % what
    if host.startswith("-"):
        return "the %s %r starts with '-': ssh would read it as an option" % (what, host)
    if _IPV6.fullmatch(host) or _HOSTNAME.fullmatch(host):
        return None
    return "the %s %r is not a host name or an IP address (letters, digits, '.', '-', ':' only)" % (what, host)


def ssh_user_problem(user, what="ssh_user"):
    """Why ``user`` cannot be an ssh login name, or None (None and '' mean the ssh client's default)."""
    if user is None or user == "":
        return None
    if not isinstance(user, str) or user.startswith("-") or not _USER.fullmatch(user):
        return ("%s %r is not a user name (letters, digits, '_', '.', '-'; not starting with '-')" % (what, user))
    return None


def _write_state(marker):
    """Shell that writes stdin to the marker file, never through a symlink planted in its place."""
    new = shlex.quote(marker + ".new")
    return "rm -f -- %s && (set -C; cat > %s) && mv -f -- %s %s" % (new, new, new, shlex.quote(marker))


def remote_commands(dest, hash_script=None, cache=None):
    """{name: shell command} of every fixed command model_sync runs on a destination for ``dest``."""
    q = shlex.quote(dest)
    staging = shlex.quote(os.path.join(dest, TEMP_DIR_NAME))
    marker = os.path.join(dest, MARKER_NAME)
    cmds = {
        # Staging emptied (rsync's fallback), and the copy marked incomplete before its first byte (the state on stdin).
        "prepare": "mkdir -p -- %s && find %s -mindepth 1 -delete && %s" % (staging, staging, _write_state(marker)),
        # The state of the copy (stdin) into the marker; an empty staging directory goes.
        "state": "rmdir -- %s 2>/dev/null; %s" % (staging, _write_state(marker)),
        "list": "cd %s && find . -path ./%s -prune -o -type f -printf '%%s %%P\\0'" % (q, TEMP_DIR_NAME),
        # dd with count=0: fdatasync then fadvise(DONTNEED) over each named file (names on stdin); no symlink followed.
        "drop_cache": ("cd %s && xargs -0 -r -n 1 sh -c 'dd of=\"$1\" oflag=nocache,nofollow conv=notrunc,fdatasync "
                       "count=0 status=none' sh" % q),
    }
    if hash_script is not None:
        cmds["hash"] = "python3 -c %s %s \"%s\"" % (shlex.quote(hash_script), q, cache)
    return cmds


def _is_dest(path, dest):
    return path in (dest, dest.rstrip("/") + "/")


def _check_rsh(value):
    try:
        argv = shlex.split(value)
    except ValueError:
        return "the relay's --rsh does not parse"
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
        elif opt == "-c" and i + 1 < len(argv) and _CIPHERS.fullmatch(argv[i + 1]):
            i += 2
        else:
            return "ssh argument %r is not allowed" % opt
    return None


def _check_server(argv, dest):
    """rsync --server receiving into dest with model_sync's options only: (verdict, argv or reason)."""
    if "--sender" in argv:
        return "refuse", "the sync key only receives (no --sender)"
    if len(argv) < 5 or argv[1] != "--server" or argv[-2] != ".":
        return "refuse", "unexpected rsync --server arguments"
    m = _SERVER_CLUSTER.fullmatch(argv[2])
    if not m:
        return "refuse", "rsync option %s is not allowed" % argv[2]
    letters, caps = m.groups()
    bad = sorted(set(letters) - _SERVER_LETTERS) + sorted(set(caps) - _CAPABILITIES)
    if bad or len(set(letters)) != len(letters) or not _SERVER_REQUIRED <= set(letters):
        return "refuse", ("rsync option %s is not allowed%s" % (argv[2], " (-%s)" % "".join(bad) if bad else ""))
    seen = set()
    opts, i = argv[3:-2], 0
    while i < len(opts):
        opt = opts[i]
        if opt == "--temp-dir" and i + 1 < len(opts) and opts[i + 1] == TEMP_DIR_NAME:
            name, i = opt, i + 2
        elif _SERVER_OPTS.fullmatch(opt):
            name, i = opt.split("=", 1)[0], i + 1
        else:
            return "refuse", "rsync option %s is not allowed" % opt
        if name in seen:
            return "refuse", "rsync option %s is given twice" % name
        seen.add(name)
    if not _is_dest(argv[-1], dest):
        return "refuse", "rsync may only write into %s, not %s" % (dest, argv[-1])
    return "exec", argv


def _check_relay(argv, dest):
    """A relay: this node pushes its copy of dest to the next node's dest, following no symlink."""
    positional = [a for a in argv[1:] if not a.startswith("-")]
    seen = set()
    for opt in (a for a in argv[1:] if a.startswith("-")):
        if opt.startswith("--rsh="):
            why = _check_rsh(opt[len("--rsh="):])
            if why:
                return "refuse", why
            name = "--rsh"
        elif _CLIENT_OPTS.fullmatch(opt):
            name = opt.split("=", 1)[0] if not opt.startswith("--exclude=") else opt
        else:
            return "refuse", "rsync option %s is not allowed in a relay" % opt
        if name in seen:
            return "refuse", "rsync option %s is given twice" % name
        seen.add(name)
    if len(positional) != 2 or not _is_dest(positional[0], dest.rstrip("/") + "/"):
        return "refuse", "a relay may only send %s/" % dest.rstrip("/")
    host, sep, path = positional[1].rpartition(":")
    if host.startswith("[") and not sep:
        host = ""
    if not sep or not _HOST.fullmatch(host) or not _is_dest(path, dest.rstrip("/") + "/"):
        return "refuse", "a relay may only send to another node's %s/" % dest.rstrip("/")
    return "exec", argv


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
        return _check_server(argv, dest)
    return _check_relay(argv, dest)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        sys.stderr.write("usage: sync_shell DEST ALLOWED_COMMANDS_JSON\n")
        return 2
    dest, allowed_file = argv
    try:
        fixed = set(str(c) for c in read_json_file(allowed_file))
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
