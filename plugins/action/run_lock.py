# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of sparkfleet.vllm.run_lock (documented in plugins/modules/run_lock.py)."""

from __future__ import annotations

import json
import os
import shlex
import socket
import time

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.sparkfleet.vllm.plugins.module_utils.host._run_lock import (
    NOT_A_FILE,
    acquire_script,
    beat_interval,
    decide,
    heartbeat_loop,
    heartbeat_script,
    lock_record,
    parse_held,
    parse_lock,
    path_problem,
    refusal_message,
    release_script,
    takeover_message,
    takeover_script,
)

ARGUMENT_SPEC = dict(
    state=dict(type="str", choices=["acquired", "released"], default="acquired"),
    path=dict(type="path", default="/run/sparkfleet/deploy.lock"),
    timeout=dict(type="int", default=3600),
    ttl=dict(type="int", default=300),
)


def _pid_alive(pid):
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _start_time(pid):
    """The start time of process ``pid`` (clock ticks since boot), which a reused pid does not share; "0" if unknown."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rpartition(")")[2].split()[19]
    except (IOError, OSError, IndexError):
        return "0"


def _run_alive(pid, started):
    """Whether the ansible-playbook process ``pid`` that started at ``started`` still runs."""
    return _pid_alive(pid) and (started == "0" or _start_time(pid) == started)


def _run_identity():
    """(controller, pid, token) of this ansible-playbook run, the same in every task.

    Each task runs in a fresh fork of the ansible-playbook process, so nothing a task keeps in memory survives
    to the next: the token is derived from that process (its pid and its start time, which a reused pid lacks).
    """
    pid = os.getppid()
    started = _start_time(pid)
    controller = socket.gethostname()
    return controller, pid, "%s-%d-%s" % (controller, pid, started)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = True

    def _sh(self, script):
        res = self._low_level_execute_command(script, sudoable=True)
        if res.get("rc", 1) != 0:
            raise AnsibleActionFail("run_lock: the command on the head failed (rc %s): %s"
                                    % (res.get("rc"), (res.get("stderr") or res.get("stdout") or "").strip()[-500:]))
        return (res.get("stdout") or "").strip()

    def _heartbeat(self, path, token, pid, started, interval):
        """Detach a process that refreshes the lock while this run's ansible-playbook lives and releases it when the
        run ends without releasing it (a failed, interrupted or killed run: no later play runs then).

        It is a fork of this task's worker, so it reaches the head over the run's own connection (ssh's control
        socket); it keeps no terminal or pipe of the run open, so nothing that reads the run's output waits for it.
        """
        child = os.fork()
        if child:
            os.waitpid(child, 0)
            return
        try:
            os.setsid()
            if os.fork():
                os._exit(0)
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            os.closerange(3, 65536)
            # The worker's display sends to the run's result queue, whose pipe is closed here: write nowhere instead.
            display = Display()
            display._final_q = None
            display.verbosity = 0

            def beat():
                return self._sh(heartbeat_script(path, token))

            heartbeat_loop(beat, lambda: _run_alive(pid, started), lambda: self._sh(release_script(path, token)),
                           interval)
        finally:
            os._exit(0)

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        validation = ArgumentSpecValidator(ARGUMENT_SPEC).validate(self._task.args)
        if validation.error_messages:
            raise AnsibleActionFail("run_lock: %s" % "; ".join(validation.error_messages))
        args = validation.validated_parameters
        if args["timeout"] < 1:
            raise AnsibleActionFail("run_lock: timeout must be 1 or more seconds, got %d" % args["timeout"])
        if args["ttl"] < 30:
            raise AnsibleActionFail("run_lock: ttl must be 30 or more seconds (the lock is refreshed every ttl/6 s, "
                                    "at least every 5 s), got %d" % args["ttl"])
        host = (task_vars or {}).get("inventory_hostname", "the head")
        problem = path_problem(args["path"])
        if problem:
            raise AnsibleActionFail("run_lock: %s" % problem)
        controller, pid, token = _run_identity()
        started = token.rsplit("-", 1)[-1]
        path = args["path"]
        result.update(changed=False, path=path, token=token)

        if args["state"] == "released":
            if self._task.check_mode:
                return result
            # Bookkeeping, not a change to the cluster: a re-run stays changed=0.
            result["released"] = self._sh(release_script(path, token)).startswith("RELEASED")
            return result

        now = time.time()
        playbook = os.path.basename(str((task_vars or {}).get("ansible_play_name") or ""))
        me = lock_record(controller, pid, token, now, playbook, ttl=args["ttl"])
        record = json.dumps(me, sort_keys=True)
        if self._task.check_mode:
            # A dry run takes nothing, but it still says when a real run is in progress.
            q = shlex.quote(path)
            out = self._sh("if [ -f %s ]; then echo $(( $(date +%%s) - $(stat -c %%Y %s) )); cat %s; fi 2>/dev/null; "
                           "true" % (q, q, q))
            beat_age, text = parse_held(out)
            holder = parse_lock(text)
            verdict, why = decide(holder, me, now, args["timeout"], _pid_alive, beat_age)
            if verdict == "refuse":
                raise AnsibleActionFail(refusal_message(host, path, holder, now, args["timeout"], beat_age))
            result.update(holder=holder, reason=why)
            return result

        for _attempt in range(3):
            out = self._sh(acquire_script(path, record))
            if out.startswith(NOT_A_FILE):
                raise AnsibleActionFail("%s: %s is a directory, a link or another non-file; the deployment lock must be"
                                        " a plain file (remove it, or set another path)" % (host, path))
            if out.startswith("ACQUIRED"):
                result.update(acquired=True, reason="free")
                self._heartbeat(path, token, pid, started, beat_interval(args["ttl"]))
                return result
            beat_age, held_text = parse_held(out.partition("\n")[2])
            holder = parse_lock(held_text)
            verdict, why = decide(holder, me, now, args["timeout"], _pid_alive, beat_age)
            if verdict == "refuse":
                raise AnsibleActionFail(refusal_message(host, path, holder, now, args["timeout"], beat_age))
            # A verdict on a stale heartbeat holds only if no heartbeat comes before the swap.
            on_beat = holder is not None and holder.get("controller") != controller and bool(holder.get("ttl")) \
                and beat_age is not None
            out = self._sh(takeover_script(path, held_text, record, int(holder["ttl"]) if on_beat else None))
            if out.startswith(NOT_A_FILE):
                raise AnsibleActionFail("%s: %s is a directory, a link or another non-file; the deployment lock must be"
                                        " a plain file (remove it, or set another path)" % (host, path))
            if out.startswith("ACQUIRED"):
                result.update(acquired=True, reason=why, previous=holder)
                if why != "ours":  # this run's own lock (taken twice) has its heartbeat already
                    if holder is not None:
                        result["took_over"] = takeover_message(host, path, holder, why)
                        result["warnings"] = [result["took_over"]]
                    self._heartbeat(path, token, pid, started, beat_interval(args["ttl"]))
                return result
        raise AnsibleActionFail("%s: could not take %s: another run keeps changing it" % (host, path))
