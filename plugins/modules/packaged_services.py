#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: packaged_services
short_description: Install a service's distribution packages, write its files and keep its units running, in one call
version_added: 0.4.0
description:
  - One module run on the node does what an C(apt) task, a C(config_files) task, a C(systemd_service) task per unit and
    their handlers did in a round trip each, so a re-run that changes nothing costs one round trip per node.
  - The steps, in order - the O(files) marked O(files[].early) written; the O(units) marked O(units[].early) made
    running (a firewall that must hold before the packages' services start); the O(packages) not installed (read with
    C(dpkg-query)) installed with C(apt-get) (the package lists refreshed first; an existing configuration file is
    kept, C(--force-confold)); the other O(files) written; the other O(units) made running.
  - Before a unit is made running, systemd reloads its units when a changed file is a unit file (under
    a C(systemd/system) directory, as C(/etc/systemd/system)). A unit is restarted when one of its O(units[].restart_on)
    paths changed in this run, else enabled and started when it is not both.
  - Each file is written as M(sparkfleet.vllm.config_files) writes it (atomic, only when it differs).
author:
  - sparkfleet.vllm contributors (@sparkfleet)
options:
  packages:
    description:
      - Debian package names that must be installed. Nothing is asked of apt when all are.
    type: list
    elements: str
    default: []
  files:
    description:
      - Directories and files, as M(sparkfleet.vllm.config_files)'s O(sparkfleet.vllm.config_files#module:files), with
        O(files[].early).
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description:
          - Absolute path.
        type: path
        required: true
      state:
        description:
          - V(file), V(directory) or V(line), as for M(sparkfleet.vllm.config_files).
        type: str
        choices: [file, directory, line]
        default: file
      line:
        description:
          - The line for V(line).
        type: str
      regexp:
        description:
          - For V(line), the regular expression whose last match is replaced.
        type: str
      content:
        description:
          - The whole text of the file (UTF-8). Required for V(file).
        type: str
      mode:
        description:
          - Permissions, as an octal string (V("0644")).
        type: str
        required: true
      owner:
        description:
          - Owner (name or uid).
        type: str
      group:
        description:
          - Group (name or gid). A group the packages create (V(prometheus)) needs the entry not early.
        type: str
      diff:
        description:
          - Whether a changed file's old and new text may appear in the diff and the output; V(false) for secrets.
        type: bool
        default: true
      early:
        description:
          - Written before the packages are installed (with the early units' files).
        type: bool
        default: false
  units:
    description:
      - The systemd units that must be enabled and running, in order.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description:
          - The unit's name (V(prometheus), V(my.timer)).
        type: str
        required: true
      restart_on:
        description:
          - Paths of O(files) whose change restarts the unit (its configuration).
        type: list
        elements: path
        default: []
      early:
        description:
          - Made running before the packages are installed.
        type: bool
        default: false
notes:
  - Check mode reports what would be installed, written, restarted and started (RV(installed), RV(changed_paths),
    RV(restarted), RV(started)) and changes nothing.
  - Debian and Ubuntu only (C(dpkg-query), C(apt-get)); systemd.
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: The node exporter, its settings and its unit, behind our firewall table (one round trip)
  sparkfleet.vllm.packaged_services:
    files:
      - path: /etc/sparkfleet/exporter-firewall.nft
        content: "{{ rules }}"
        mode: "0644"
        early: true
      - path: /etc/systemd/system/exporter-firewall.service
        content: "{{ lookup('ansible.builtin.template', 'exporter-firewall.service.j2') }}"
        mode: "0644"
        early: true
      - path: /etc/default/prometheus-node-exporter
        content: ARGS="--web.listen-address=:9100"
        mode: "0644"
    packages: [prometheus-node-exporter]
    units:
      - name: exporter-firewall.service
        restart_on: [/etc/sparkfleet/exporter-firewall.nft, /etc/systemd/system/exporter-firewall.service]
        early: true
      - name: prometheus-node-exporter
        restart_on: [/etc/default/prometheus-node-exporter]
"""

RETURN = r"""
installed:
  description: The packages that were (in check mode, would be) installed.
  returned: always
  type: list
  elements: str
  sample: [prometheus-node-exporter]
changed_paths:
  description: The paths of O(files) that were (would be) created or changed, in the order given.
  returned: always
  type: list
  elements: str
  sample: [/etc/default/prometheus-node-exporter]
files:
  description: One entry per path (C(path), C(state), C(changed)), in the order given.
  returned: always
  type: list
  elements: dict
daemon_reload:
  description: Whether systemd reloaded (would reload) its units.
  returned: always
  type: bool
restarted:
  description: The units restarted (would be) because a file of theirs changed.
  returned: always
  type: list
  elements: str
  sample: [prometheus-node-exporter]
started:
  description: The units enabled and started (would be) because they were not both.
  returned: always
  type: list
  elements: str
  sample: []
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sparkfleet.vllm.plugins.module_utils._command import Runner
from ansible_collections.sparkfleet.vllm.plugins.module_utils._config_files import (
    ENTRY_HINT, ENTRY_OPTIONS, apply, diff_list, problem, secrets)

# apt's own bound: a download that stalls fails the run instead of holding it (seconds).
APT_TIMEOUT = 900


def missing_packages(status_text, wanted):
    """The ``wanted`` packages that ``dpkg-query -W -f '${Package} ${db:Status-Abbrev}\\n'`` does not list as
    installed (``ii``; ``rc``, removed with its configuration left, or a half-installed ``iU``/``iF`` are not)."""
    installed = set()
    for line in status_text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[1].startswith("ii"):
            installed.add(parts[0].split(":", 1)[0])
    return [p for p in wanted if p not in installed]


def unit_states(show_text, names):
    """``systemctl show -p Id -p ActiveState -p UnitFileState UNIT...`` (blocks separated by a blank line, in the
    order asked) as {name: {"active": ..., "enabled": ...}}."""
    blocks = show_text.strip().split("\n\n") if show_text.strip() else []
    states = {}
    for name, block in zip(names, blocks):
        props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        states[name] = {"active": props.get("ActiveState", ""), "enabled": props.get("UnitFileState", "")}
    return states


def is_unit_file(path):
    return "/systemd/system/" in path


class Services(object):
    def __init__(self, module):
        self.module = module
        self.check = module.check_mode
        self.diff = {"before": {}, "after": {}}
        self.done = []
        self.result = dict(installed=[], restarted=[], started=[], daemon_reload=False)
        self.reloaded_for = set()
        self.runner = Runner(module)
        self._systemctl = None

    def run(self, argv, what, environ=None, timeout=None):
        res = self.runner.run(argv, env=environ, timeout=timeout)
        if not res.ok:
            self.runner.fail(res, "%s failed" % what, **self.summary())
        return res.stdout

    def systemctl(self):
        if self._systemctl is None:
            self._systemctl = self.runner.bin("systemctl")
        return self._systemctl

    def summary(self):
        changed_paths = [r["path"] for r in self.done if r["changed"]]
        return dict(self.result, changed_paths=changed_paths, files=list(self.done))

    def write(self, entries):
        self.done.extend(apply(self.module, entries, self.diff))

    def changed(self):
        return set(r["path"] for r in self.done if r["changed"])

    def packages(self, wanted):
        if not wanted:
            return
        dpkg = self.runner.bin("dpkg-query")
        res = self.runner.run([dpkg, "-W", "-f", "${Package} ${db:Status-Abbrev}\n"] + list(wanted))
        # rc 1 names a package dpkg never heard of (on stderr); the others are still listed
        missing = missing_packages(res.stdout if res.rc in (0, 1) else "", wanted)
        if not missing:
            return
        self.result["installed"] = missing
        if self.check:
            return
        apt = self.runner.bin("apt-get")
        env = dict(DEBIAN_FRONTEND="noninteractive")
        self.run([apt, "update", "-q"], "apt-get update (before installing %s)" % ", ".join(missing), env,
                 timeout=APT_TIMEOUT)
        self.run([apt, "install", "-y", "-q", "--no-install-recommends", "-o", "Dpkg::Options::=--force-confdef",
                  "-o", "Dpkg::Options::=--force-confold"] + missing, "apt-get install %s" % " ".join(missing), env,
                 timeout=APT_TIMEOUT)

    def units(self, units):
        if not units:
            return
        changed = self.changed()
        unit_files = set(p for p in changed if is_unit_file(p)) - self.reloaded_for
        if unit_files:
            self.result["daemon_reload"] = True
            self.reloaded_for |= unit_files
            if not self.check:
                self.run([self.systemctl(), "daemon-reload"], "systemctl daemon-reload")
        names = [u["name"] for u in units]
        states = unit_states(self.run([self.systemctl(), "show", "-p", "ActiveState", "-p", "UnitFileState"] + names,
                                      "systemctl show %s" % " ".join(names)), names)
        for unit in units:
            name = unit["name"]
            state = states.get(name, {})
            enabled = state.get("enabled") in ("enabled", "static", "enabled-runtime", "alias", "indirect",
                                               "generated")
            if changed & set(unit["restart_on"]):
                self.result["restarted"].append(name)
                if not self.check:
                    if not enabled:
                        self.run([self.systemctl(), "enable", name], "systemctl enable %s" % name)
                    self.run([self.systemctl(), "restart", name], "systemctl restart %s" % name)
            elif not (enabled and state.get("active") == "active"):
                self.result["started"].append(name)
                if not self.check:
                    self.run([self.systemctl(), "enable", "--now", name], "systemctl enable --now %s" % name)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            packages=dict(type="list", elements="str", default=[]),
            files=dict(type="list", elements="dict", default=[], no_log=True,
                       options=dict(ENTRY_OPTIONS, early=dict(type="bool", default=False))),
            units=dict(type="list", elements="dict", default=[], options=dict(
                name=dict(type="str", required=True),
                restart_on=dict(type="list", elements="path", default=[]),
                early=dict(type="bool", default=False),
            )),
        ),
        supports_check_mode=True,
    )
    p = module.params
    # As config_files: `files` is no_log so the node's syslog record holds no file's text; the output hides only the
    # text of the entries marked diff=false.
    module.no_log_values.clear()
    module.no_log_values.update(secrets(p["files"]))
    problems = [x for x in (problem(e) for e in p["files"]) if x]
    paths = set(e["path"] for e in p["files"])
    for unit in p["units"]:
        if not unit["name"].strip() or "/" in unit["name"]:
            problems.append("units: %r is not a unit name" % unit["name"])
        problems.extend("units: %s restarts on %s, which is not among files" % (unit["name"], path)
                        for path in unit["restart_on"] if path not in paths)
    bad = [name for name in p["packages"] if not name.strip() or name.startswith("-") or " " in name]
    if bad:
        problems.append("packages: %s is not a package name" % ", ".join(repr(b) for b in bad))
    if problems:
        module.fail_json(msg="; ".join(problems), hint=ENTRY_HINT + "; a unit's restart_on names paths of files")
    svc = Services(module)
    svc.write([e for e in p["files"] if e["early"]])
    svc.units([u for u in p["units"] if u["early"]])
    svc.packages(p["packages"])
    svc.write([e for e in p["files"] if not e["early"]])
    svc.units([u for u in p["units"] if not u["early"]])
    out = svc.summary()
    out["changed"] = bool(out["changed_paths"] or out["installed"] or out["restarted"] or out["started"])
    if module._diff and out["changed_paths"]:
        out["diff"] = diff_list(svc.diff, out["changed_paths"])
    module.exit_json(**out)


if __name__ == "__main__":
    main()
