"""What the live view shows, built from ansible-runner events only (no knowledge of the cluster of its own).

``RunView.handle(event)`` takes each event dict as ansible-runner hands it to ``event_handler`` (also the lines
of ``events.jsonl``); ``render()`` gives a rich renderable and ``lines()`` plain text for logs and pipes.
"""

from __future__ import annotations

import re
import time

# A wait's poll line (the collection's waits poll themselves and print it; ansible-runner makes it a `verbose` event):
# "  [10:21:07] spark-1 - <summary> (poll 12 of 485)" (plugins/plugin_utils/_poll.py line()).
POLL_LINE = re.compile(r"^\s*\[\d\d:\d\d:\d\d\] (?P<host>\S+) - (?P<summary>.*) \(poll (?P<n>\d+) of (?P<of>\d+)\)\s*$")
# vllm_wait's summary of a startup with a count (module_utils/engine/_vllm_log.py summary()).
_COUNTED = re.compile(r"^(?P<phase>\w+) (?P<n>\d+)/(?P<total>\d+) (?P<unit>shards|graphs)\b")
_ETA = re.compile(r", ETA (\d+) s\b")
_SLOWEST = re.compile(r"; slowest rank (\S+)")


def poll_progress(summary):
    """The progress a vllm_wait summary tells (phase, n, total, unit, eta_s, slowest_rank); None without a count."""
    m = _COUNTED.match(summary or "")
    if not m:
        return None
    eta, slowest = _ETA.search(summary), _SLOWEST.search(summary)
    return {"phase": m.group("phase"), "n": int(m.group("n")), "total": int(m.group("total")), "unit": m.group("unit"),
            "eta_s": int(eta.group(1)) if eta else None, "slowest_rank": slowest.group(1) if slowest else None}

# Exit codes a script can use (documented in README "Using the CLI" and `sparkfleet --help`).
EXIT_OK = 0
EXIT_FAILED = 1          # a task failed on a node (the failure class and hint are printed)
EXIT_USAGE = 2           # bad command line (argparse)
EXIT_UNREACHABLE = 3     # a node could not be reached over ssh
EXIT_ANSIBLE = 4         # Ansible stopped before any task failed: playbook error, vault password, collection not found
EXIT_INVENTORY = 5       # the inventory has no spark group or not exactly one spark_head (playbooks/inventory_check.yml)
EXIT_INTERRUPTED = 130   # interrupted (Ctrl-C) or canceled

# The first play of every playbook checks the inventory's groups on the controller; its failure has its own exit code.
INVENTORY_CHECK_PLAY = "Check the inventory has a spark group and exactly one spark_head"
# Preflight's access check (roles/preflight/tasks/access.yml) names a node ssh cannot reach in this task's message.
ACCESS_REFUSAL_TASK = "Refuse what would stop the run later, naming the node and the fix"
# prepare's (roles/prepare/tasks/main.yml) likewise: the node is unreachable, exit 3.
PREPARE_REFUSAL_TASK = "Refuse a node the controller cannot log in to, naming the key to authorize"


# The inventory check names an encrypted inventory it could not open with this prefix (a vault error: exit 4).
VAULT_MESSAGE = "vault: the inventory "
# ansible-playbook's own error when the inventory check's play cannot even start (--limit on an inventory without a
# host): the reason is the play's, an inventory error (exit 5).
LIMIT_MESSAGE = "Error processing keyword 'hosts': inventory: "


def stdout_failure(text):
    """The inventory check's reason when ansible-playbook stopped before any task (its stdout), else None."""
    for line in (text or "").splitlines():
        at = line.find(LIMIT_MESSAGE)
        if at >= 0:
            return {"host": "localhost", "phase": "inventory_check", "task": None, "class": "inventory",
                    "msg": line[at + len("Error processing keyword 'hosts': "):].strip()[:600],
                    "hint": INVENTORY_HINT}
    return None


INVENTORY_HINT = ("give -i the inventory of your Sparks: groups spark (every node), spark_head (one node) and "
                  "spark_workers; inventories/sample/hosts.yml is an example")
VAULT_HINT = ("give the inventory's vault password: --vault-password-file FILE or --ask-vault-pass (-J); a wrong one "
              "fails the same way")

# Tasks that only pull in a role's tasks: the tasks they include name the phase.
_INCLUDES = ("include_role", "import_role", "include_tasks", "import_tasks")


def _short(name):
    return (name or "").rsplit(".", 1)[-1]


def _fmt_s(seconds):
    if seconds is None:
        return "?"
    seconds = max(0, int(round(seconds)))
    return "%d s" % seconds if seconds < 120 else "%dm%02ds" % (seconds // 60, seconds % 60)


class RunView(object):
    """The state of one playbook run, from its events."""

    def __init__(self, action, now=time.time):
        self.action = action
        self.now = now
        self.started = now()
        self.hosts = {}          # host -> dict(phase, task, state, ok, changed, failed)
        self.phase_order = []
        self.progress = None     # latest shard/graph progress of vllm_wait
        self.sync = None         # model_sync: running since / result
        self.failure = None      # first failure not ignored
        self.unreachable = []
        self.stats = None
        self.finished = False
        self.changes = []        # plain-text lines of what changed (for a log or a pipe)
        self._play_phase = {}    # play uuid -> its phase (the first role it runs, else its module, else its name)

    # ------------------------------------------------------------------ events
    def handle(self, event):
        kind = event.get("event")
        data = event.get("event_data") or {}
        if data.get("play") == INVENTORY_CHECK_PLAY and kind != "runner_on_failed":
            return   # the controller's own check, not a node
        host = data.get("host")
        action = _short(data.get("resolved_action") or data.get("task_action"))
        phase = self._phase(data, action)
        if kind == "runner_on_start" and host:
            row = self._host(host)
            if row["phase"] != phase:
                self.changes.append("%s %s: %s" % (self._clock(), host, phase))
            row.update(phase=phase, task=data.get("task") or "", state="running")
            if phase not in self.phase_order:
                self.phase_order.append(phase)
            if action == "model_sync" and (self.sync is None or "mb_per_s" in self.sync):
                self.sync = {"host": host, "since": self.now()}
        elif kind == "runner_retry" and host:
            res = data.get("res") or {}
            prog = res.get("progress") or {}
            if prog.get("total"):
                self.progress = dict(prog, phase=res.get("phase"), summary=res.get("summary"), host=host)
                self.changes.append("%s %s: %s" % (self._clock(), host, res.get("summary") or ""))
            self._host(host)["task"] = "%s (waiting)" % (data.get("task") or "")
        elif kind == "verbose" and POLL_LINE.match(event.get("stdout") or ""):
            self._poll_line(POLL_LINE.match(event["stdout"]))
        elif kind in ("runner_on_ok", "runner_on_skipped") and host:
            res = data.get("res") or {}
            row = self._host(host)
            row["state"] = "ok"
            row["ok"] += 1
            if res.get("changed"):
                row["changed"] += 1
            if action == "model_sync" and res.get("mb_per_s") is not None:
                self.sync = {"host": host, "mb": (res.get("bytes_transferred") or 0) / 1e6,
                             "mb_per_s": res.get("mb_per_s"), "seconds": res.get("transfer_seconds")}
                self.changes.append("%s %s: %s" % (self._clock(), host, self.sync_text()))
            if action == "vllm_wait" and res.get("ready"):
                self.progress = dict(self.progress or {}, done=True, summary=res.get("summary"))
        elif kind == "runner_on_failed" and host:
            row = self._host(host)
            if data.get("ignore_errors"):
                row["state"] = "ok"
                return
            row["state"] = "failed"
            row["failed"] += 1
            self._note_failure(host, phase, data, "failed")
        elif kind == "runner_on_unreachable" and host:
            self._host(host)["state"] = "unreachable"
            if host not in self.unreachable:
                self.unreachable.append(host)
            self._note_failure(host, phase, data, "unreachable")
        elif kind == "playbook_on_stats":
            self.stats = {k: data.get(k) or {} for k in ("ok", "changed", "failures", "dark", "skipped")}
            self.finished = True

    def _poll_line(self, m):
        """A poll of a wait that polls itself: the line goes to the log, a count to the progress bar."""
        host, summary = m.group("host"), m.group("summary")
        self.changes.append("%s %s: %s (poll %s of %s)" % (self._clock(), host, summary, m.group("n"), m.group("of")))
        row = self.hosts.get(host)
        if row is not None and not row["task"].endswith("(waiting)"):
            row["task"] = "%s (waiting)" % row["task"]
        prog = poll_progress(summary)
        if prog:
            self.progress = dict(prog, summary=summary, host=host)

    def _phase(self, data, action):
        """A play is one phase: site.yml's thin plays start with their role (a play may borrow another role's task
        file later, e.g. the image check); a play that runs no role is named by its name."""
        play = data.get("play_uuid") or data.get("play") or ""
        if not data.get("host"):
            return self._play_phase.get(play) or data.get("play") or ""
        if play not in self._play_phase and data.get("role"):
            self._play_phase[play] = _short(data["role"])
        elif play not in self._play_phase and action not in _INCLUDES:
            self._play_phase[play] = data.get("play") or ""
        return self._play_phase.get(play) or data.get("play") or ""

    def _host(self, host):
        return self.hosts.setdefault(host, {"phase": "", "task": "", "state": "waiting", "ok": 0, "changed": 0,
                                            "failed": 0})

    def _clock(self):
        return "[%s]" % _fmt_s(self.now() - self.started)

    def _note_failure(self, host, phase, data, status):
        if self.failure is not None:
            return
        res = data.get("res") or {}
        failure = res.get("failure") if isinstance(res.get("failure"), dict) else {}
        if status == "unreachable":
            klass, hint = "unreachable", "check ssh to %s: address, user, key, ProxyJump through the head" % host
        elif data.get("task") in (ACCESS_REFUSAL_TASK, PREPARE_REFUSAL_TASK) and " cannot be reached " in str(
                res.get("msg", "")):
            klass, hint = "unreachable", "the message says how to authorize the controller's key (through the head)"
            if host not in self.unreachable:
                self.unreachable.append(host)
        elif data.get("play") == INVENTORY_CHECK_PLAY or "inventory_check.yml" in str(data.get("task_path") or ""):
            klass, hint = "inventory", INVENTORY_HINT
            if str(res.get("msg", "")).startswith(VAULT_MESSAGE):
                klass, hint = "vault", VAULT_HINT
            phase = "inventory_check"
        else:
            klass = failure.get("class") or "%s_failed" % (phase or "task")
            hint = failure.get("hint") or res.get("hint")
            if not hint and phase == "preflight":
                hint = "preflight changes nothing: fix the values it names (inventory or -e) and run again"
        self.failure = {"host": host, "phase": phase, "task": data.get("task"), "class": klass, "hint": hint,
                        "msg": " ".join(str(res.get("msg", "")).split())[:600]}
        self.changes.append("%s %s: FAILED in %s (%s)" % (self._clock(), host, phase, klass))

    # ------------------------------------------------------------------ outcome
    def exit_code(self, status):
        """status: ansible-runner's final status (successful, failed, canceled, timeout)."""
        if status in ("canceled", "timeout"):
            return EXIT_INTERRUPTED
        if status == "successful":
            return EXIT_OK
        if self.unreachable:
            return EXIT_UNREACHABLE
        if self.failure is not None and self.failure["class"] == "inventory":
            return EXIT_INVENTORY
        if self.failure is not None and self.failure["class"] == "vault":
            return EXIT_ANSIBLE
        if self.failure is not None:
            return EXIT_FAILED
        return EXIT_ANSIBLE

    def summary_lines(self, status):
        lines = []
        if status in ("canceled", "timeout"):
            # Ctrl-C (or a signal) is the user's decision, not a failure of the cluster.
            lines.append("INTERRUPTED: %s stopped after %s; ansible-playbook and its workers were ended (what a "
                         "node was doing may be half done: run it again)" % (self.action,
                                                                             _fmt_s(self.now() - self.started)))
            if self.failure:
                f = self.failure
                lines.append("  before that: %s on %s, phase %s, task '%s'" % (f["class"], f["host"], f["phase"],
                                                                              f["task"]))
        elif self.failure:
            f = self.failure
            lines.append("FAILED: %s on %s, phase %s, task '%s'" % (f["class"], f["host"], f["phase"], f["task"]))
            if f["msg"]:
                lines.append("  %s" % f["msg"])
            if f["hint"]:
                lines.append("  hint: %s" % f["hint"])
        elif status != "successful":
            lines.append("FAILED: ansible-playbook stopped before a task failed (%s): read the run's stdout" % status)
        else:
            lines.append("%s: done in %s" % (self.action, _fmt_s(self.now() - self.started)))
        if self.stats:
            per = ["%s ok=%d changed=%d failed=%d unreachable=%d" % (
                h, self.stats["ok"].get(h, 0), self.stats["changed"].get(h, 0), self.stats["failures"].get(h, 0),
                self.stats["dark"].get(h, 0)) for h in sorted(set().union(*[set(v) for v in self.stats.values()]))
                if h in self.hosts]
            lines.extend("  " + p for p in per)
        return lines

    def progress_text(self):
        p = self.progress
        if not p:
            return None
        if p.get("done"):
            return "vLLM: ready (%s)" % (p.get("summary") or "")
        text = "%s %s/%s %s" % (p.get("phase") or "", p.get("n"), p.get("total"), p.get("unit") or "")
        if p.get("eta_s") is not None:
            text += ", ETA %s" % _fmt_s(p["eta_s"])
        if p.get("slowest_rank"):
            text += ", slowest %s" % p["slowest_rank"]
        return text

    def sync_text(self):
        s = self.sync
        if not s:
            return None
        if "mb_per_s" in s and not s["mb"]:
            return "model_sync: every worker already has the model (nothing sent)"
        if "mb_per_s" in s:
            return "model_sync: %.1f MB in %s at %.1f MB/s" % (s["mb"], _fmt_s(s.get("seconds")), s["mb_per_s"] or 0)
        return "model_sync: transferring from %s for %s" % (s["host"], _fmt_s(self.now() - s["since"]))

    # ------------------------------------------------------------------ rendering
    def render(self):
        """A rich renderable of the current state."""
        from rich.console import Group  # pylint: disable=import-outside-toplevel
        from rich.progress_bar import ProgressBar  # pylint: disable=import-outside-toplevel
        from rich.table import Table  # pylint: disable=import-outside-toplevel
        from rich.text import Text  # pylint: disable=import-outside-toplevel

        parts = [Text("sparkfleet %s  %s" % (self.action, _fmt_s(self.now() - self.started)), style="bold")]
        table = Table(box=None, pad_edge=False, show_header=True, header_style="dim")
        for col in ("node", "phase", "task", "ok", "changed", "state"):
            table.add_column(col)
        colours = {"failed": "red", "unreachable": "red", "running": "yellow", "ok": "green"}
        for host in sorted(self.hosts):
            row = self.hosts[host]
            table.add_row(host, row["phase"], row["task"][:60], str(row["ok"]), str(row["changed"]),
                          Text(row["state"], style=colours.get(row["state"], "")))
        parts.append(table)
        sync = self.sync_text()
        if sync:
            parts.append(Text(sync, style="cyan"))
        p = self.progress
        if p and not p.get("done"):
            bar = Table.grid(padding=(0, 1))
            bar.add_row(ProgressBar(total=float(p["total"]), completed=float(p.get("n") or 0), width=40),
                        Text(self.progress_text() or ""))
            parts.append(bar)
        elif p:
            parts.append(Text(self.progress_text(), style="green"))
        return Group(*parts)
