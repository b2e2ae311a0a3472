#!/usr/bin/env python3
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write the floor playbooks of B3 from one recorded re-run (bench/callback_plugins/timetable.py's JSON).

    bench/noop_floor.py RUN.json empty > floor-empty.yml
    bench/noop_floor.py RUN.json ping  > floor-ping.yml

Both keep the run's shape: one task for every task it ran, in the same order, on the same hosts (consecutive tasks
with the same hosts share a play), with the inventory and connection settings of the run that plays them.
- empty: every task is an empty one (ansible.builtin.debug, nothing leaves the controller): Ansible's own cost per
  task (a worker process per host, templating, the results queue, the callbacks), the floor of the task count;
- ping: every task that ran a module on a node runs ansible.builtin.ping there instead, as many times per host as
  the run did (loop items and retries included), the rest stays empty: the floor of the node round trips (ssh,
  become, a Python start on the node), with no work in any of them.
"""

from __future__ import annotations

import json
import sys


def _q(text):
    return json.dumps(text)  # a JSON string is a YAML scalar


def plays(run):
    """The run's tasks grouped into consecutive runs of the same hosts: [(hosts, [task, ...]), ...]."""
    out = []
    for task in run["tasks"]:
        hosts = sorted(set(task.get("host_names") or []))
        if not hosts:  # a task no host reached (every host had failed or ended): nothing to replay
            continue
        if out and out[-1][0] == hosts:
            out[-1][1].append(task)
        else:
            out.append((hosts, [task]))
    return out


def render(run, kind):
    if kind not in ("empty", "ping"):
        raise SystemExit("kind must be empty or ping, not %r" % kind)
    lines = ["---", "# Written by bench/noop_floor.py (%s floor of a recorded run): do not edit." % kind]
    n = 0
    for i, (hosts, tasks) in enumerate(plays(run), 1):
        lines += ["- name: %s" % _q("floor play %d (%s)" % (i, ", ".join(hosts))),
                  "  hosts: %s" % _q(":".join(hosts)),
                  "  gather_facts: false",
                  "  tasks:"]
        for task in tasks:
            n += 1
            name = "%d %s : %s" % (n, task.get("role") or task.get("play", ""), task.get("task", ""))
            by_host = task.get("calls_by_host") or {}
            if kind == "ping" and by_host:
                lines += ["    - name: %s" % _q(name),
                          "      ansible.builtin.ping:"]
                if set(by_host.values()) == {1}:
                    if set(by_host) != set(hosts):
                        lines.append("      when: inventory_hostname in %s" % json.dumps(sorted(by_host)))
                else:
                    lines += ["      loop: \"{{ range(_floor_calls[inventory_hostname] | default(0)) | list }}\"",
                              "      vars:",
                              "        _floor_calls: %s" % json.dumps(by_host, sort_keys=True)]
            else:
                lines += ["    - name: %s" % _q(name),
                          "      ansible.builtin.debug:",
                          "        msg: empty"]
    return "\n".join(lines) + "\n"


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    with open(argv[1]) as handle:
        run = json.load(handle)
    sys.stdout.write(render(run, argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
