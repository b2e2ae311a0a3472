#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: access_check
short_description: Check, before anything changes, that docker runs as root and the deployment's keys can run their commands
version_added: 0.2.0
description:
  - Run as root (with become). Checks that C(docker) answers as root, and for every key in O(keys) (a key the
    deployment will authorize on this node with a forced command) whether it could run its command, without
    authorizing anything.
  - For each key it reads the account (its login shell must run commands; sshd runs a forced command through it),
    the modes of its home, C(~/.ssh) and C(~/.ssh/authorized_keys) (sshd's StrictModes ignores keys in files others
    may write), and sshd's effective settings for a connection from the key's source address
    (C(sshd -T -C user=USER,host=ADDR,addr=ADDR), Match blocks applied) - public keys accepted, no C(ForceCommand),
    not denied by C(AllowUsers)/C(DenyUsers)/C(AllowGroups)/C(DenyGroups) or C(AuthenticationMethods),
    C(~/.ssh/authorized_keys) read, agent forwarding where the key relays.
  - A key's O(keys[].command) (with O(keys[].arguments)) is tried as its user with empty input (C(runuser)); the
    program behind it then refuses the empty stream or the arguments itself, which proves it ran. A C(sudo) that asks
    for a password or refuses is named with the exact sudoers line that allows it.
  - Read-only; in check mode it does the same. It fails listing every problem, each with its fix.
author:
  - sparkfleet.vllm contributors (@sparkfleet)
options:
  docker:
    description:
      - Check that C(docker version) answers as the user the module runs as (root).
    type: bool
    default: true
  keys:
    description:
      - The keys to check.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: What the key is, for the messages (for example C(the image key)).
        type: str
        required: true
      user:
        description: The account the key is authorized for.
        type: str
        required: true
      source:
        description: The address the key connects from (the head's fabric IP).
        type: str
        required: true
      command:
        description:
          - The key's forced command, tried as O(keys[].user) with empty input. Leave it out when it cannot run yet
            (its program is installed by the run itself).
        type: str
      arguments:
        description:
          - Arguments the key adds to O(keys[].command) at each use, which change from run to run (the image key's
            C(--name IMAGE --content ID)). The command is tried with these; give ones its program refuses, so that
            trying it changes nothing. The sudoers line named for a C(sudo) that refuses then ends in C(*) (sudoers
            matches a command's arguments exactly).
        type: str
      interpreter:
        description: A program the forced command needs, which must exist and be executable (for example C(/usr/bin/python3)).
        type: path
      agent_forwarding:
        description: The key forwards the agent (model_sync's relays between workers); sshd must allow it.
        type: bool
        default: false
  timeout:
    description: Seconds each command may take.
    type: int
    default: 30
notes:
  - Needs root, for C(sshd -T) (it reads the host keys) and to run a command as another user.
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Docker answers as root and the image key could run its load command on the worker
  sparkfleet.vllm.access_check:
    keys:
      - name: the image key
        user: aurora
        source: 192.168.200.12
        command: sudo -n /usr/bin/python3 /usr/local/sbin/sparkfleet-image-load
        # refused by the load command itself (not a content ID): nothing is loaded
        arguments: --name hellohal2064/vllm-qwen3.5-gb10:latest --content sha256:access-check
        interpreter: /usr/bin/python3
  become: true
"""

RETURN = r"""
docker_version:
  description: What C(docker version) said the server is, when O(docker) is true and it answered.
  returned: always
  type: str
  sample: "28.2.2"
problems:
  description: One message per problem, each saying what to change.
  returned: always
  type: list
  elements: str
  sample: ["the image key's command `sudo -n /usr/bin/python3 /usr/local/sbin/sparkfleet-image-load` cannot run as
           aurora: sudo: a password is required; allow it once: echo 'aurora ALL=(root) NOPASSWD: /usr/bin/python3
           /usr/local/sbin/sparkfleet-image-load *' | sudo tee /etc/sudoers.d/sparkfleet-aurora && sudo chmod 440
           /etc/sudoers.d/sparkfleet-aurora"]
"""

import grp
import os
import pwd

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils.host import _access
from ansible_collections.sparkfleet.vllm.plugins.module_utils._command import Runner


def _groups(entry):
    names = {grp.getgrgid(entry.pw_gid).gr_name} if _has_gid(entry.pw_gid) else set()
    names.update(g.gr_name for g in grp.getgrall() if entry.pw_name in g.gr_mem)
    return sorted(names)


def _has_gid(gid):
    try:
        grp.getgrgid(gid)
    except KeyError:
        return False
    return True


def _modes(home):
    found = []
    for path in (home, os.path.join(home, ".ssh"), os.path.join(home, ".ssh", "authorized_keys")):
        try:
            st = os.stat(path)
        except OSError:
            continue
        found.append((path, st.st_uid, st.st_mode))
    return found


def check_key(runner, key, sshd, timeout):
    name, user = key["name"], key["user"]
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return ["%s is authorized for %s, which has no account on this node: create it (sudo useradd -m %s) or set "
                "the key's user" % (name, user, user)]
    problems = []
    shell = _access.shell_problem(user, entry.pw_shell, name)
    if shell:
        problems.append(shell)
    if key.get("interpreter") and not os.access(key["interpreter"], os.X_OK):
        problems.append("%s's command needs %s, which is not on this node: sudo apt-get install python3" % (
            name, key["interpreter"]))
    problems.extend(_access.mode_problems(user, entry.pw_uid, _modes(entry.pw_dir), name))
    if sshd:
        spec = "user=%s,host=%s,addr=%s" % (user, key["source"], key["source"])
        res = runner.run([sshd, "-T", "-C", spec], timeout=timeout)
        if res.ok:
            config = _access.parse_sshd_config(res.stdout)
            problems.extend(_access.sshd_problems(config, user, _groups(entry), entry.pw_dir, key["source"], name,
                                                  key.get("agent_forwarding")))
        else:
            problems.append("sshd's settings for %s could not be read: %s" % (name, res.why()))
    if key.get("command") and not shell:
        runuser = runner.bin("runuser")
        # Empty input (and arguments it refuses): the program behind the command refuses them itself (and changes
        # nothing).
        tried = " ".join(x for x in (key["command"], key.get("arguments")) if x)
        res = runner.run([runuser, "-u", user, "--", "/bin/sh", "-c", "%s </dev/null" % tried], timeout=timeout)
        rule = _access.sudo_rule(user, key["command"], lambda name: runner.bin(name, required=False),
                                 any_arguments=bool(key.get("arguments")))
        found = _access.forced_command_problem(user, key["command"], name, res.rc,
                                               res.stderr, rule)
        if found:
            problems.append(found)
    return problems


def main():
    module = AnsibleModule(
        argument_spec=dict(
            docker=dict(type="bool", default=True),
            keys=dict(type="list", elements="dict", default=[], no_log=False, options=dict(
                name=dict(type="str", required=True),
                user=dict(type="str", required=True),
                source=dict(type="str", required=True),
                command=dict(type="str"),
                arguments=dict(type="str"),
                interpreter=dict(type="path"),
                agent_forwarding=dict(type="bool", default=False),
            )),
            timeout=dict(type="int", default=30),
        ),
        supports_check_mode=True,
    )
    if module.params["timeout"] < 1:
        module.fail_json(msg="timeout must be at least 1 second, got %d" % module.params["timeout"])
    if os.geteuid() != 0:
        module.fail_json(msg="access_check runs as root (become: true); it runs as uid %d" % os.geteuid())
    runner = Runner(module)
    problems = []
    docker_version = ""
    if module.params["docker"]:
        docker = runner.bin("docker", required=False)
        if docker is None:
            problems.append("docker is not installed: sudo apt-get install docker.io (or Docker's docker-ce)")
        else:
            res = runner.run([docker, "version", "--format", "{{.Server.Version}}"], timeout=module.params["timeout"])
            if res.ok:
                docker_version = res.stdout.strip()
            else:
                problems.append("docker does not answer as root: %s; start it: sudo systemctl enable --now docker"
                                % res.why())
    sshd = runner.bin("sshd", required=False) if module.params["keys"] else None
    if module.params["keys"] and sshd is None:
        problems.append("sshd is not installed, so the deployment's keys cannot log in: sudo apt-get install "
                        "openssh-server")
    for key in module.params["keys"]:
        problems.extend(check_key(runner, key, sshd, module.params["timeout"]))
    if problems:
        module.fail_json(msg="; ".join(problems), problems=problems, docker_version=docker_version)
    module.exit_json(changed=False, problems=[], docker_version=docker_version)


if __name__ == "__main__":
    main()
