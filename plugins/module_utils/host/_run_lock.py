# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The deployment lock on the head: who holds it, whether that holder is gone, what to tell the next run.

Pure functions; the run_lock action plugin reads and writes the lock file on the head with them.
"""

from __future__ import annotations

import shlex
import time

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _json

# How often the holder refreshes the lock, as a share of the TTL it states: a few missed beats (a slow ssh, a busy
# head) never make a live run look dead.
BEATS_PER_TTL = 6
MIN_BEAT = 5


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


def lock_record(controller, pid, token, now, playbook=None, ttl=None):
    """The holder's record. ``ttl``: the seconds without a heartbeat after which the holder counts as dead (a record
    without one, from before heartbeats, is judged by its age against the taker's timeout)."""
    record = {"controller": str(controller), "pid": int(pid), "token": str(token), "started": float(now),
              "playbook": playbook or ""}
    if ttl:
        record["ttl"] = int(ttl)
    return record


def beat_interval(ttl):
    """Seconds between two heartbeats of a holder that states ``ttl``."""
    return max(MIN_BEAT, int(ttl) // BEATS_PER_TTL)


def _clock(ts):
    try:
        return time.strftime("%H:%M UTC", time.gmtime(float(ts)))
    except (TypeError, ValueError, OverflowError):
        return "an unknown time"


def holder_text(holder):
    """Who holds a lock, for a person: controller, process, playbook and since when."""
    return "%s (pid %s, %s, since %s)" % (holder.get("controller") or "an unknown controller", holder.get("pid"),
                                          holder.get("playbook") or "playbook unknown", _clock(holder.get("started")))


def parse_lock(text):
    """The holder's record, or None when the text is not one (an empty or torn file counts as free)."""
    try:
        data = _json.loads(text or "", "the lock file")
    except ValueError:
        return None
    if not isinstance(data, dict) or not data.get("token"):
        return None
    return data


def _number(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def decide(holder, me, now, timeout, pid_alive, beat_age=None):
    """('take' | 'refuse', reason) for a run ``me`` that finds ``holder`` in the lock.

    A holder from this controller whose process is gone left the lock behind (a failed or killed run): take it.
    A holder from another controller cannot be checked from here; its run refreshes the lock (its heartbeat) while
    its ansible-playbook lives, so it is dead once ``beat_age`` (seconds since the last heartbeat, measured on the
    head) passes the TTL the record states. A record with no TTL (a run from before heartbeats) is stale only after
    ``timeout`` seconds. ``pid_alive(pid)`` says whether a process of this controller still runs. The reason says why
    taking it is safe, for the takeover message.
    """
    if holder is None:
        return "take", "free"
    if holder.get("token") == me["token"]:
        return "take", "ours"
    age = now - (_number(holder.get("started")) or 0)
    if holder.get("controller") == me["controller"]:
        if not pid_alive(int(_number(holder.get("pid")) or 0)):
            return "take", ("the run that held it (pid %s on %s) has ended: its ansible-playbook process is gone"
                            % (holder.get("pid"), me["controller"]))
        return "refuse", "held by a running ansible-playbook on this controller"
    ttl = _number(holder.get("ttl"))
    if ttl and ttl > 0 and beat_age is not None:
        if beat_age > ttl:
            return "take", ("no heartbeat from %s for %d s, longer than the %d s its run promised: that run (or its "
                            "controller) is dead" % (holder.get("controller"), beat_age, ttl))
        return "refuse", "held by another controller, whose run refreshed it %d s ago" % max(beat_age, 0)
    if age > timeout:
        return "take", "held by %s for %d s, longer than %d s" % (holder.get("controller"), age, timeout)
    return "refuse", "held by another controller"


def takeover_message(host, path, holder, why):
    """The warning of a run that took the lock over from a dead one: who held it, since when, why that is safe."""
    return ("%s: took over the deployment lock %s from %s: %s. Nothing of that run can change the cluster any more, "
            "so this run goes on." % (host, path, holder_text(holder), why))


def refusal_message(host, path, holder, now, timeout, beat_age=None):
    age = int(now - (_number(holder.get("started")) or 0))
    ttl = _number(holder.get("ttl"))
    if ttl and beat_age is not None:
        alive = "its run refreshed the lock %d s ago" % max(beat_age, 0)
        dead = "a run that dies stops refreshing it, and the next run takes it over %d s after its last refresh" % ttl
    else:
        alive = "a run from before lock heartbeats"
        dead = "if it is dead, run again from that controller, wait until the lock is %d s old" % timeout
    return ("%s: another deployment is running: %s holds %s (pid %s, %s, started %d s ago; %s). Wait for it to end; "
            "%s, or remove %s on %s." % (host, holder.get("controller"), path, holder.get("pid"),
                                         holder.get("playbook") or "playbook unknown", age, alive, dead, path, host))


NOT_A_FILE = "NOT_A_FILE"


def _guarded(q, body):
    """``body`` under an flock of ``<lock>.guard`` where flock exists (util-linux): taking, taking over, refreshing
    and releasing never interleave, so a takeover judged on a stale heartbeat cannot cross a heartbeat."""
    return ("mkdir -p \"$(dirname %s)\" && { if command -v flock >/dev/null 2>&1; then exec 9>>%s.guard && "
            "flock -w 20 9; fi; %s; }" % (q, q, body))


def _beat_age(q):
    """Shell printing the seconds since the lock file last changed (its last heartbeat), on the head's own clock."""
    return "echo $(( $(date +%%s) - $(stat -c %%Y %s 2>/dev/null || date +%%s) ))" % q


def parse_held(text):
    """(seconds since the holder's last heartbeat or None, the lock's text) from what follows HELD."""
    age, _nl, rest = (text or "").partition("\n")
    try:
        return int(age.strip()), rest
    except ValueError:
        return None, text or ""


def _not_a_file(q):
    """Shell that prints NOT_A_FILE when the lock path is a link, a directory or anything but a plain file."""
    return "if [ -L %s ] || { [ -e %s ] && [ ! -f %s ]; }; then echo %s; else " % (q, q, q, NOT_A_FILE)


def acquire_script(path, record_json):
    """Create the lock only if absent (noclobber), else print HELD, the age of its last heartbeat and the holder.
    Exit 0 either way."""
    q = shlex.quote(path)
    body = ("if (set -C; printf '%%s' %s > %s) 2>/dev/null; then echo ACQUIRED; else echo HELD; %s; cat %s "
            "2>/dev/null; fi" % (shlex.quote(record_json), q, _beat_age(q), q))
    return "umask 077; %s%s; fi" % (_not_a_file(q), _guarded(q, body))


def takeover_script(path, old_text, record_json, min_beat_age=None):
    """Replace the lock only if it still holds what we judged stale (a compare-and-swap by content) and, when the
    verdict rested on a stale heartbeat, only if no heartbeat came since (its age still over ``min_beat_age``)."""
    q = shlex.quote(path)
    still_stale = ""
    if min_beat_age is not None:
        still_stale = " && [ \"$(%s)\" -gt %d ]" % (_beat_age(q), int(min_beat_age))
    body = ("if [ \"$(cat %s 2>/dev/null)\" = %s ]%s; then printf '%%s' %s > %s.$$ && mv -fT %s.$$ %s "
            "&& echo ACQUIRED; else echo HELD; %s; cat %s 2>/dev/null; fi"
            % (q, shlex.quote(old_text), still_stale, shlex.quote(record_json), q, q, q, _beat_age(q), q))
    return "umask 077; %s%s; fi" % (_not_a_file(q), _guarded(q, body))


def _ours(q, token):
    return "grep -qF %s %s 2>/dev/null" % (shlex.quote('"token": "%s"' % token), q)


def release_script(path, token):
    """Remove the lock only when it is ours."""
    q = shlex.quote(path)
    return _guarded(q, "if %s; then rm -f %s && echo RELEASED; else echo NOT_OURS; fi" % (_ours(q, token), q))


def heartbeat_script(path, token):
    """Refresh the lock's time (its heartbeat) only while it is ours: BEAT, else GONE (released or taken over)."""
    q = shlex.quote(path)
    return _guarded(q, "if %s; then touch -c %s && echo BEAT; else echo GONE; fi" % (_ours(q, token), q))


def heartbeat_loop(beat, run_alive, release, interval, sleep=time.sleep, clock=time.monotonic, poll=1.0):
    """Keep a held lock alive while its run lives, and release it when the run ends without releasing it.

    ``beat()`` refreshes the lock and returns BEAT, or GONE once the lock is not ours (the run released it at its
    end, or another controller took it over); ``run_alive()`` says whether the run's ansible-playbook still runs;
    ``release()`` removes the lock if it is still ours. A beat that fails (the head did not answer) is tried again at
    the next interval: the TTL spans several beats. Returns why it stopped: ``released`` (the run ended, failed or
    killed, with the lock still held: removed) or ``gone``.
    """
    next_beat = clock() + interval
    while True:
        if not run_alive():
            try:
                release()
            except Exception:  # the head is away (its reboot clears /run anyway) or the TTL frees it
                pass
            return "released"
        if clock() >= next_beat:
            try:
                state = beat()
            except Exception:
                state = None
            if state == "GONE":
                return "gone"
            next_beat = clock() + interval
        sleep(poll)
