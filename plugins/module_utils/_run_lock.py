# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The deployment lock on the head: who holds it, whether that holder is gone, what to tell the next run.

Pure functions; the run_lock action plugin reads and writes the lock file on the head with them.
"""

from __future__ import annotations

import json
import shlex


def path_problem(path):
    """Why ``path`` cannot be the lock file (empty, relative, a directory's spelling), or None."""
    if not isinstance(path, str) or not path.strip():
        return "path is empty; give the lock file's absolute path, e.g. /run/sparkfleet/deploy.lock"
    if not path.startswith("/"):
        return "path %r is not absolute" % path
    if path.endswith("/") or path.endswith("/.") or path.endswith("/.."):
        return "path %r names a directory; give the lock file's path, e.g. /run/sparkfleet/deploy.lock" % path
    if any(c in path for c in "\n\r\0"):
        return "path %r holds a newline or NUL" % path
    return None


def lock_record(controller, pid, token, now, playbook=None):
    return {"controller": str(controller), "pid": int(pid), "token": str(token), "started": float(now),
            "playbook": playbook or ""}


def parse_lock(text):
    """The holder's record, or None when the text is not one (an empty or torn file counts as free)."""
    try:
        data = json.loads(text or "")
    except ValueError:
        return None
    if not isinstance(data, dict) or not data.get("token"):
        return None
    return data


def decide(holder, me, now, timeout, pid_alive):
    """('take' | 'refuse', reason) for a run ``me`` that finds ``holder`` in the lock.

    A holder from this controller whose process is gone left the lock behind (a failed or killed run):
    take it. A holder from another controller cannot be checked from here: it is stale only after
    ``timeout`` seconds. ``pid_alive(pid)`` says whether a process of this controller still runs.
    """
    if holder is None:
        return "take", "free"
    if holder.get("token") == me["token"]:
        return "take", "ours"
    age = now - float(holder.get("started") or 0)
    if holder.get("controller") == me["controller"]:
        if not pid_alive(int(holder.get("pid") or 0)):
            return "take", "the run that held it (pid %s on %s) has ended" % (holder.get("pid"), me["controller"])
        return "refuse", "held by a running ansible-playbook on this controller"
    if age > timeout:
        return "take", "held by %s for %d s, longer than %d s" % (holder.get("controller"), age, timeout)
    return "refuse", "held by another controller"


def refusal_message(host, path, holder, now, timeout):
    age = int(now - float(holder.get("started") or 0))
    return ("%s: another deployment is running: %s holds %s (pid %s, %s, started %d s ago). Wait for it to end; "
            "if it is dead, run again from that controller, wait until the lock is %d s old, or remove %s on %s."
            % (host, holder.get("controller"), path, holder.get("pid"), holder.get("playbook") or "playbook unknown",
               age, timeout, path, host))


NOT_A_FILE = "NOT_A_FILE"


def _not_a_file(q):
    """Shell that prints NOT_A_FILE when the lock path is a link, a directory or anything but a plain file."""
    return "if [ -L %s ] || { [ -e %s ] && [ ! -f %s ]; }; then echo %s; else " % (q, q, q, NOT_A_FILE)


def acquire_script(path, record_json):
    """Create the lock only if absent (noclobber), else print the holder. Exit 0 either way."""
    q = shlex.quote(path)
    return ("umask 077; %smkdir -p \"$(dirname %s)\" && if (set -C; printf '%%s' %s > %s) 2>/dev/null; "
            "then echo ACQUIRED; else echo HELD; cat %s 2>/dev/null; fi; fi"
            % (_not_a_file(q), q, shlex.quote(record_json), q, q))


def takeover_script(path, old_text, record_json):
    """Replace the lock only if it still holds what we judged stale (a compare-and-swap by content)."""
    q = shlex.quote(path)
    return ("umask 077; %sif [ \"$(cat %s 2>/dev/null)\" = %s ]; then printf '%%s' %s > %s.$$ && mv -fT %s.$$ %s "
            "&& echo ACQUIRED; else echo HELD; cat %s 2>/dev/null; fi; fi"
            % (_not_a_file(q), q, shlex.quote(old_text), shlex.quote(record_json), q, q, q, q))


def release_script(path, token):
    """Remove the lock only when it is ours."""
    q = shlex.quote(path)
    return ("if grep -qF %s %s 2>/dev/null; then rm -f %s && echo RELEASED; else echo NOT_OURS; fi"
            % (shlex.quote('"token": "%s"' % token), q, q))
