# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: report
type: aggregate
short_description: Write a deploy report (JSON, table, timeline chart) after every deploy
version_added: 0.2.0
author: sparkfleet.vllm contributors (@sparkfleet)
description:
  - Times every phase on every node (a phase is the play's tag, which C(site.yml)'s thin plays name after their role;
    else the task's role) from the start of its first task to its last result, and keeps what the modules report
    (model transfer rate, Ray proof, vLLM and Ray versions, vLLM's startup phases, the first failure with its class
    and hint) and the results the healthcheck role publishes with C(set_stats) (endpoint, model, tokens/s).
  - At the end of a playbook named in O(playbooks) it writes C(report.json), C(report.txt) (the table it also prints)
    and C(timeline.png) (phases per node; needs matplotlib on the controller, else skipped with a note) into a new
    directory under O(dir), points C(latest) at it, and prints where.
  - The table has a row per phase, vLLM's startup sub-phases (from C(vllm_wait)'s C(phase_times)) under the serving
    phase when the server started in this run, and NCCL's transport per node; the chart draws the same. A phase in
    which every task was skipped on a host is not a row.
  - For AWX and other ansible-runner callers the report's directory and chart path are known from the start. The
    callback puts the directory in the environment variable C(SPARKFLEET_REPORT_RUN_DIR) of the run, and the first
    play of every playbook (C(playbooks/inventory_check.yml)) publishes it with C(set_stats) as
    C(sparkfleet.report.dir) and C(sparkfleet.report.chart), so they are in the job's artifacts. After the run the
    callback prints the chart's path (or why there is none) as the last summary line.
  - An empty run (no host matched, or the inventory check failed) still writes the report with its failure; there
    is then no chart.
  - A node that went away during the run (a task there ended UNREACHABLE or its ssh dropped under a running module, or
    Ray said a node was marked dead or a task pinned to a node could not be scheduled any more) is the run's failure,
    whatever late error it caused elsewhere. After any playbook the callback then prints one line naming the node, what
    happened and when, and the next step (for example that spark-2 went away during the run, having stopped answering
    ssh at 21:49, and to run site.yml again once it is back); the report's failure has class C(node_away), the first error kept as its
    C(detail).
  - C(latest) moves only to the report of a real run. A C(--check) run, and a run in which no node ran a task
    (every play skipped, or the inventory check stopped it), write their report but leave C(latest) where it was,
    and say so. The report names the run's inventory sources (C(inventory)) and whether it was a check
    (C(check_mode)).
  - C(playbooks/status.yml) prints the latest report's table when that report is of the same inventory.
  - After C(qualify.yml) the report also holds its C(qualify) section (what C(sparkfleet.vllm.qualify) published with
    C(set_stats) as C(sparkfleet.qualify)), written as C(qualify.txt), C(qualify.json) and C(qualify.png)
    (throughput and latency against concurrency).
  - Enable it with C(callbacks_enabled = sparkfleet.vllm.report) in C(ansible.cfg); it works beside any stdout callback.
requirements:
  - enabled in callbacks_enabled
  - matplotlib (optional, for the chart)
options:
  dir:
    description: Directory that receives one sub-directory per run (C(<UTC time>-<playbook>)) and the C(latest) link.
      A relative path is taken from the directory the playbook was started in.
    type: path
    default: sparkfleet-reports
    env:
      - name: SPARKFLEET_REPORT_DIR
    ini:
      - section: callback_sparkfleet_report
        key: dir
  playbooks:
    description: File names of the playbooks that get a report (the deploy, the restart and the qualification).
    type: list
    elements: str
    default: [site.yml, restart.yml, qualify.yml]
    env:
      - name: SPARKFLEET_REPORT_PLAYBOOKS
    ini:
      - section: callback_sparkfleet_report
        key: playbooks
"""

import os
import time

from ansible import context
from ansible.plugins.callback import CallbackBase

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils import _node_away, _qualify, _report

# Where this run's report goes, for the first play's set_stats (see the description).
RUN_DIR_ENV = "SPARKFLEET_REPORT_RUN_DIR"
# The controller's own check (playbooks/inventory_check.yml): a host it ran on did no work on a node.
INVENTORY_CHECK_PLAY = "Check the inventory has a spark group and exactly one spark_head"


def latest_refusal(report):
    """Why this report must not become `latest` (None when it may)."""
    if report.get("check_mode"):
        return "a --check run"
    if not report.get("nodes_ran"):
        return "no node ran a task"
    return None


class CallbackModule(CallbackBase):
    """Time the phases per node and write the deploy report."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "sparkfleet.vllm.report"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, display=None):
        super(CallbackModule, self).__init__(display=display)
        self._clock = _report.PhaseClock()
        self._captured = {}
        self._failure = None
        self._away = []
        self._ips = {}
        self._answered = set()      # nodes that ran a task in this run
        self._ran = set()           # hosts that ran a task outside the inventory check
        self._trips = {}            # node -> module runs on it (ssh round trips), retries and loop items included
        self._inventory_ips = None
        self._play = None
        self._playbook = None
        self._run_dir = None
        self._play_tags = ()
        self._play_name = None
        self._cwd = os.getcwd()

    def _phase(self, task):
        role = task._role.get_name() if getattr(task, "_role", None) else None
        return _report.phase_of(self._play_tags, role, self._play_name, task.action)

    def _wanted(self):
        return self._playbook in (self.get_option("playbooks") or [])

    def v2_playbook_on_start(self, playbook):
        self._playbook = os.path.basename(playbook._file_name)
        self._clock = _report.PhaseClock()
        self._captured = {}
        self._failure = None
        self._away = []
        self._ips = {}
        self._answered = set()
        self._ran = set()
        self._trips = {}
        os.environ.pop(RUN_DIR_ENV, None)
        if not self._wanted():
            self._run_dir = None
            return
        base = self.get_option("dir")
        base = base if os.path.isabs(base) else os.path.join(self._cwd, base)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(self._clock.started))
        self._run_dir = os.path.join(base, "%s-%s" % (stamp, os.path.splitext(self._playbook)[0]))
        # Read by the first play's set_stats (the workers that template it are forked from this process).
        os.environ[RUN_DIR_ENV] = self._run_dir

    def v2_playbook_on_play_start(self, play):
        self._play = play
        self._play_tags = tuple(play.tags or ())
        self._play_name = play.get_name()

    def v2_runner_on_start(self, host, task):
        phase = self._phase(task)
        if phase:
            self._clock.start(host.get_name(), phase)

    def _result(self, result, status):
        task = result._task
        if self._play_name != INVENTORY_CHECK_PLAY and status != "skipped":
            self._ran.add(result._host.get_name())
        if status != "skipped":  # a skipped result's dict need not say so (ansible-core 2.19)
            self._count_trips(result)
        phase = self._phase(task)
        if phase:
            self._clock.result(result._host.get_name(), phase, status)
        if isinstance(result._result, dict):
            self._ips.update(_node_away.ip_hosts(result._result))
        got = _report.capture(task.action, result._result)
        if got:
            self._captured[got[0]] = got[1]
            if got[0] == "vllm_wait":
                start = _report.vllm_start(got[1], result._host.get_name(), phase, self._clock.offset())
                if start:
                    self._captured["vllm_start"] = start
        return task

    def _count_trips(self, result):
        node, n = _report.round_trips(result._host.get_name(), result._task.action, result._task.loop is not None,
                                      result._result)
        if n:
            self._trips[node] = self._trips.get(node, 0) + n

    def v2_runner_retry(self, result):
        self._count_trips(result)  # every retry of an until loop ran the module on the node once more

    def v2_runner_on_ok(self, result):
        self._answered.add(result._host.get_name())
        self._result(result, "ok")

    def v2_runner_on_skipped(self, result):
        self._result(result, "skipped")

    def v2_runner_on_unreachable(self, result):
        self._note_failure(result, "unreachable")
        self._result(result, "unreachable")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        if ignore_errors:
            self._result(result, "ok")
            return
        self._note_failure(result, "failed")
        self._result(result, "failed")

    def _note_failure(self, result, status):
        res = result._result if isinstance(result._result, dict) else {}
        self._ips.update(_node_away.ip_hosts(res))
        verdict = _node_away.classify(status, result._host.get_name(), res, dict(self._hosts_by_ip(), **self._ips),
                                      self._answered)
        if verdict:
            verdict["at"] = time.time()
            self._away.append(verdict)
        if self._failure is not None:
            return
        failure = res.get("failure") if isinstance(res.get("failure"), dict) else {}
        self._failure = {
            "host": result._host.get_name(),
            "task": result._task.get_name(),
            "phase": self._phase(result._task),
            "status": status,
            "class": failure.get("class") or ("unreachable" if status == "unreachable" else None),
            "msg": str(res.get("msg", ""))[:1000],
            "hint": failure.get("hint") or res.get("hint"),
        }

    def _hosts_by_ip(self):
        """{address: host} of the inventory (fabric, management and ssh addresses), read once, at the first failure."""
        if self._inventory_ips is None:
            self._inventory_ips = {}
            try:
                manager = self._play.get_variable_manager()
                for host in manager._inventory.get_hosts():
                    hostvars = manager.get_vars(play=self._play, host=host, include_hostvars=False)
                    for key in ("sparkfleet_fabric_ip", "sparkfleet_mgmt_ip", "ansible_host"):
                        value = hostvars.get(key)
                        if isinstance(value, str) and value and "{" not in value:
                            self._inventory_ips.setdefault(value, host.get_name())
            except Exception:  # an address map is a help for the message, never a reason to fail the report
                pass
        return self._inventory_ips

    def _node_away(self):
        """The run's failure when a node went away: the cause, not the late error it caused."""
        verdict = _node_away.merge(self._away)
        if not verdict:
            return None
        msg = _node_away.message(verdict, verdict.get("at"))
        first = self._failure or {}
        return dict(first, host=verdict.get("host") or first.get("host"), **{
            "class": "node_away", "msg": msg, "detail": first.get("msg"),
            "hint": ("the deployment lock is released by the run's heartbeat when ansible-playbook ends; once the node "
                     "answers ssh again, run site.yml: it brings Ray and vLLM back on every node")})

    def v2_playbook_on_stats(self, stats):
        away = self._node_away()
        if away:
            self._failure = away
            self._display.display("sparkfleet: %s" % away["msg"], color="red", stderr=True)
        if not self._wanted() or not self._run_dir:
            return
        os.environ.pop(RUN_DIR_ENV, None)
        host_stats = {h: stats.summarize(h) for h in sorted(stats.processed)}
        custom = (stats.custom or {}).get("_run") or {}
        report = _report.build(self._playbook, self._clock, self._captured, custom, host_stats, self._failure)
        run_dir = self._run_dir
        base = os.path.dirname(run_dir)
        qualify = (custom.get("sparkfleet") or {}).get("qualify")  # the qualify role's section (playbooks/qualify.yml)
        if qualify:
            report["qualify"] = qualify
        report["inventory"] = sorted(str(i) for i in (context.CLIARGS.get("inventory") or ()))
        report["check_mode"] = bool(context.CLIARGS.get("check"))
        report["nodes_ran"] = sorted(self._ran)
        report["round_trips"] = dict(sorted(self._trips.items()))
        refusal = latest_refusal(report)
        try:
            written = _report.write(report, run_dir)
            if qualify:
                written.update(("qualify_" + k, v) for k, v in _qualify.write(qualify, run_dir).items())
            link = os.path.join(base, "latest")
            if refusal is None and os.path.islink(link):
                os.unlink(link)
            if refusal is None and not os.path.exists(link):
                os.symlink(os.path.basename(run_dir), link)
        except OSError as e:
            self._display.warning("sparkfleet report: could not write %s: %s" % (run_dir, e))
            return
        for line in _report.table(report) + (_qualify.table(qualify) if qualify else []):
            self._display.display(line)
        self._display.display("sparkfleet report: %s" % run_dir, color="cyan")
        if refusal:
            latest = os.path.join(base, "latest")
            self._display.display("sparkfleet report: %s stays where it was (%s)" % (latest, refusal))
        if written.get("chart"):
            self._display.display("sparkfleet report: chart %s" % written["chart"], color="cyan")
        else:
            self._display.display("sparkfleet report: no chart (%s)" % written.get("chart_missing"))
        if written.get("qualify_chart_missing"):
            self._display.display("sparkfleet report: %s" % written["qualify_chart_missing"])
