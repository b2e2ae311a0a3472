# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether the keys a deployment authorizes on a node can run their forced commands (private to sparkfleet.vllm).

Pure functions over what ``sshd -T -C user=...,host=...,addr=...`` prints (the server's effective settings for one
connection, Match blocks applied), the account's passwd entry and groups, the modes of its home, and what a forced
command said when it was tried with empty input. Every problem says what to change; the caller adds the host.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import shlex

# Login shells that refuse every command: sshd runs a forced command through the account's shell.
NO_LOGIN_SHELLS = ("nologin", "false")
# sshd -T keys whose value is a list given on several lines.
MULTI = ("allowusers", "denyusers", "allowgroups", "denygroups", "authorizedkeysfile", "authenticationmethods")


def parse_sshd_config(text):
    """``sshd -T`` output -> {key: [values]} (keys lower-case, each line's value split on whitespace)."""
    config = {}
    for line in (text or "").splitlines():
        parts = line.strip().split(None, 1)
        if not parts:
            continue
        key = parts[0].lower()
        value = parts[1] if len(parts) > 1 else ""
        config.setdefault(key, []).extend(value.split() if key in MULTI else [value])
    return config


def _one(config, key, default=""):
    values = config.get(key) or [default]
    return values[0].lower()


def _host_matches(pattern, addr):
    if "/" in pattern:
        try:
            return ipaddress.ip_address(addr) in ipaddress.ip_network(pattern, strict=False)
        except ValueError:
            return False
    return fnmatch.fnmatchcase(addr, pattern)


def _user_entry_matches(entry, user, addr):
    """One AllowUsers/DenyUsers entry: USER or USER@HOST, glob patterns (HOST may be an address/masklen)."""
    negate = entry.startswith("!")
    entry = entry.lstrip("!")
    user_pat, _at, host_pat = entry.partition("@")
    hit = fnmatch.fnmatchcase(user, user_pat) and (not host_pat or _host_matches(host_pat, addr))
    return hit != negate if negate else hit


def authorized_keys_paths(config, user, home):
    """The files sshd reads a user's keys from (AuthorizedKeysFile with %h, %u, %% and relative paths expanded)."""
    paths = []
    for token in config.get("authorizedkeysfile", [".ssh/authorized_keys", ".ssh/authorized_keys2"]):
        if token.lower() == "none":
            continue
        path = token.replace("%%", "\0").replace("%h", home).replace("%u", user).replace("%U", "").replace("\0", "%")
        paths.append(path if path.startswith("/") else "%s/%s" % (home.rstrip("/"), path))
    return paths


def sshd_problems(config, user, groups, home, addr, key, agent_forwarding=False):
    """Why sshd, as configured for a connection from ``addr`` as ``user``, would not run ``key``'s forced command."""
    fix_file = "in /etc/ssh/sshd_config (or a Match block for %s), then: sudo systemctl reload ssh" % user
    problems = []
    if _one(config, "pubkeyauthentication", "yes") != "yes":
        problems.append("sshd refuses public keys for %s from %s (PubkeyAuthentication no), so %s cannot log in: "
                        "set PubkeyAuthentication yes %s" % (user, addr, key, fix_file))
    methods = config.get("authenticationmethods") or ["any"]
    if not any(m.lower() in ("any", "publickey") for m in methods):
        what = (user, " ".join(methods), key, user, fix_file)
        problems.append("sshd asks %s for more than a key (AuthenticationMethods %s), so %s cannot log in alone: "
                        "allow publickey on its own for %s from the fabric %s" % what)
    force = (config.get("forcecommand") or ["none"])[0]
    if force.lower() != "none":
        problems.append("sshd forces its own command for %s (ForceCommand %s), which replaces %s's: remove it for "
                        "%s %s" % (user, force, key, user, fix_file))
    deny = [e for e in config.get("denyusers", []) if _user_entry_matches(e, user, addr)]
    if deny:
        what = (user, addr, " ".join(deny), fix_file)
        problems.append("sshd denies %s from %s (DenyUsers %s): remove that entry %s" % what)
    allow = config.get("allowusers", [])
    if allow and not any(_user_entry_matches(e, user, addr) for e in allow):
        problems.append("sshd lets in only AllowUsers %s, not %s from %s: add %s@%s there %s" % (
            " ".join(allow), user, addr, user, addr, fix_file))
    deny_g = [g for g in config.get("denygroups", []) if any(fnmatch.fnmatchcase(x, g.lstrip("!")) for x in groups)]
    if deny_g:
        what = (" ".join(deny_g), user, fix_file)
        problems.append("sshd denies the groups %s, and %s is in one: remove it %s" % what)
    allow_g = config.get("allowgroups", [])
    if allow_g and not any(fnmatch.fnmatchcase(x, g) for g in allow_g for x in groups):
        problems.append("sshd lets in only AllowGroups %s, and %s is in none of them (%s): add one of them to %s "
                        "(sudo usermod -aG GROUP %s)" % (" ".join(allow_g), user, ", ".join(groups) or "no group",
                                                         user, user))
    if user == "root" and _one(config, "permitrootlogin", "prohibit-password") == "no":
        problems.append("sshd refuses root logins (PermitRootLogin no), so %s as root cannot log in: set "
                        "PermitRootLogin forced-commands-only %s, or use another user" % (key, fix_file))
    if not [p for p in authorized_keys_paths(config, user, home) if p == "%s/.ssh/authorized_keys" % home.rstrip("/")]:
        problems.append("sshd does not read %s/.ssh/authorized_keys (AuthorizedKeysFile %s), where %s is authorized: "
                        "add .ssh/authorized_keys to AuthorizedKeysFile %s" % (
                            home.rstrip("/"), " ".join(config.get("authorizedkeysfile", [])) or "none", key, fix_file))
    if agent_forwarding and (_one(config, "allowagentforwarding", "yes") == "no"
                             or _one(config, "disableforwarding", "no") == "yes"):
        problems.append("sshd forbids agent forwarding for %s (AllowAgentForwarding no or DisableForwarding yes), "
                        "which %s needs to relay the model between workers: allow it %s" % (user, key, fix_file))
    return problems


def shell_problem(user, shell, key):
    """A login shell that refuses commands (sshd runs the forced command with ``shell -c``)."""
    if not shell or shell.rsplit("/", 1)[-1] in NO_LOGIN_SHELLS:
        return ("%s's login shell is %s, so sshd cannot run %s's command: sudo usermod -s /bin/bash %s"
                % (user, shell or "empty", key, user))
    return None


def mode_problems(user, uid, entries, key):
    """StrictModes: sshd ignores authorized_keys when it, ~/.ssh or the home is writable by others or owned by
    someone else. ``entries``: [(path, owner uid, mode)] of those that exist."""
    problems = []
    for path, owner, mode in entries:
        if owner not in (0, uid):
            problems.append("%s belongs to uid %d, not %s or root, so sshd (StrictModes) ignores %s's key there: "
                            "sudo chown %s %s" % (path, owner, user, key, user, path))
        elif mode & 0o022:
            problems.append("%s is writable by group or others (mode %04o), so sshd (StrictModes) ignores %s's key: "
                            "sudo chmod go-w %s" % (path, mode & 0o7777, key, path))
    return problems


def sudo_rule(user, command, which, any_arguments=False):
    """The sudoers line that lets ``user`` run ``command`` (a ``sudo -n ...`` command line) without a password;
    ``which(name)`` gives a program's full path. ``any_arguments``: the command is run with further arguments that
    change from run to run (sudoers matches a command's arguments exactly, so the line ends in ``*``). None when the
    command does not go through sudo."""
    argv = shlex.split(command)
    if not argv or argv[0] != "sudo":
        return None
    rest = [a for a in argv[1:] if a not in ("-n", "--non-interactive")]
    if rest and not rest[0].startswith("/"):
        rest[0] = which(rest[0]) or rest[0]
    return "%s ALL=(root) NOPASSWD: %s" % (user, " ".join(rest + (["*"] if any_arguments else [])))


def forced_command_problem(user, command, key, rc, stderr, rule):
    """What a forced command said when tried as ``user`` with empty input (it reads an image or a stream there; an
    empty one is refused by the program itself, which proves it ran). None when it ran."""
    text = " ".join((stderr or "").split())
    if rc == 0:
        return None
    lowered = text.lower()
    fix = ("allow it once: echo '%s' | sudo tee /etc/sudoers.d/sparkfleet-%s && sudo chmod 440 "
           "/etc/sudoers.d/sparkfleet-%s (playbooks/prepare.yml run once with -K writes it)" % (rule, user, user)
           ) if rule else "run it as a user that may"
    if rc in (126, 127) and ("not found" in lowered or "no such file" in lowered):
        what = (key, command, user, text[:200])
        return "%s's command `%s` is not there for %s (%s): install it or fix the command" % what
    if text.startswith("sudo:") or "sudo: " in text:
        return "%s's command `%s` cannot run as %s: %s; %s" % (key, command, user, text[:300], fix)
    if "permission denied while trying to connect to the docker" in lowered:
        return ("%s's command `%s` cannot reach docker as %s (%s): run it through sudo (the default for a user "
                "other than root) and %s" % (key, command, user, text[:200], fix))
    if "cannot connect to the docker daemon" in lowered or "is the docker daemon running" in lowered:
        return "%s's command `%s` finds no docker daemon: sudo systemctl enable --now docker" % (key, command)
    return None
