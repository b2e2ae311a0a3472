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

from ansible_collections.sparkfleet.vllm.plugins.module_utils._run_lock import (
    NOT_A_FILE,
    acquire_script,
    decide,
    lock_record,
    parse_lock,
    path_problem,
    refusal_message,
    release_script,
    takeover_script,
)

ARGUMENT_SPEC = dict(
    state=dict(type="str", choices=["acquired", "released"], default="acquired"),
    path=dict(type="path", default="/run/sparkfleet/deploy.lock"),
    timeout=dict(type="int", default=3600),
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


def _run_identity():
    """(controller, pid, token) of this ansible-playbook run, the same in every task.

    Each task runs in a fresh fork of the ansible-playbook process, so nothing a task keeps in memory survives
    to the next: the token is derived from that process (its pid and its start time, which a reused pid lacks).
    """
    pid = os.getppid()
    try:
        with open("/proc/%d/stat" % pid) as handle:
            started = handle.read().rpartition(")")[2].split()[19]
    except (IOError, OSError, IndexError):
        started = "0"
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

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        validation = ArgumentSpecValidator(ARGUMENT_SPEC).validate(self._task.args)
        if validation.error_messages:
            raise AnsibleActionFail("run_lock: %s" % "; ".join(validation.error_messages))
        args = validation.validated_parameters
        if args["timeout"] < 1:
            raise AnsibleActionFail("run_lock: timeout must be 1 or more seconds, got %d" % args["timeout"])
        host = (task_vars or {}).get("inventory_hostname", "the head")
        problem = path_problem(args["path"])
        if problem:
            raise AnsibleActionFail("run_lock: %s" % problem)
        controller, pid, token = _run_identity()
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
        me = lock_record(controller, pid, token, now, playbook)
        record = json.dumps(me, sort_keys=True)
        if self._task.check_mode:
            # A dry run takes nothing, but it still says when a real run is in progress.
            out = self._sh("cat %s 2>/dev/null; true" % shlex.quote(path))
            holder = parse_lock(out)
            verdict, why = decide(holder, me, now, args["timeout"], _pid_alive)
            if verdict == "refuse":
                raise AnsibleActionFail(refusal_message(host, path, holder, now, args["timeout"]))
            result.update(holder=holder, reason=why)
            return result

        for _attempt in range(3):
            out = self._sh(acquire_script(path, record))
            if out.startswith(NOT_A_FILE):
                raise AnsibleActionFail("%s: %s is a directory, a link or another non-file; the deployment lock must be"
                                        " a plain file (remove it, or set another path)" % (host, path))
            if out.startswith("ACQUIRED"):
                result.update(acquired=True, reason="free")
                return result
            held_text = out.partition("\n")[2]
            holder = parse_lock(held_text)
            verdict, why = decide(holder, me, now, args["timeout"], _pid_alive)
            if verdict == "refuse":
                raise AnsibleActionFail(refusal_message(host, path, holder, now, args["timeout"]))
            out = self._sh(takeover_script(path, held_text, record))
            if out.startswith(NOT_A_FILE):
                raise AnsibleActionFail("%s: %s is a directory, a link or another non-file; the deployment lock must be"
                                        " a plain file (remove it, or set another path)" % (host, path))
            if out.startswith("ACQUIRED"):
                result.update(acquired=True, reason=why, previous=holder)
                return result
        raise AnsibleActionFail("%s: could not take %s: another run keeps changing it" % (host, path))
