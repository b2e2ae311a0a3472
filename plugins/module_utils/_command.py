# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one way sparkfleet.vllm's modules run a command (private to sparkfleet.vllm).

``Runner`` wraps ``AnsibleModule.run_command``:
  - commands run in the C locale (English messages, ``.`` decimals, plain ASCII sorting) whatever the node's
    locale is, because modules parse what they print; ``C_LOCALE`` is the only place that environment is written;
  - ``bin(name)`` finds a tool with ``get_bin_path`` (PATH, then /sbin, /usr/sbin, /usr/local/sbin, so ``ip``
    is found under a become PATH too) and fails naming the tool and the package that provides it;
  - ``run(argv)`` passes the argv as it is (no shell, no ``~``/``$VAR`` expansion: remote commands carry
    ``$HOME`` for the far side) and returns a ``Result``; ``timeout=`` bounds it with coreutils' ``timeout``;
  - ``fail(result, what)`` is the failure path: ``fail_json`` whose ``msg`` names what was run, its rc and the
    last lines it printed, with every value given as ``secrets=`` masked in msg, cmd, stdout and stderr
    (``fail_json`` itself masks the module's ``no_log`` options).
A process that must stay open while the module talks to it (``_fast_copy.LineProc``) cannot go through
``run_command``; it takes its environment from ``environ()``.
"""

from __future__ import annotations

import os

C_LOCALE = {"LANG": "C", "LC_ALL": "C", "LC_MESSAGES": "C", "LC_CTYPE": "C"}

# The package (Ubuntu / DGX OS names) that provides each tool a module looks for, for the "not found" message.
PACKAGES = {
    "bash": "bash",
    "docker": "docker.io (or docker-ce-cli)",
    "ip": "iproute2",
    "journalctl": "systemd",
    "nvidia-smi": "the NVIDIA driver's utilities (nvidia-utils-<driver branch>)",
    "python3": "python3",
    "rsync": "rsync",
    "ssh": "openssh-client",
    "ssh-add": "openssh-client",
    "ssh-agent": "openssh-client",
    "systemctl": "systemd",
    "timeout": "coreutils",
}

MASK = "********"
# Lines of output a failure message quotes; the result's stdout/stderr keys carry more.
MSG_LINES = 15
RESULT_LINES = 200
# How a command stopped by `timeout` ends: 124 after the signal; after -k's SIGKILL `timeout` dies of it too (its
# process group gets it), which Python reports as -9 and a shell as 137.
TIMEOUT_RCS = (124, -9, 137)


def environ(extra=None):
    """A whole environment for ``subprocess``: this process's, in the C locale, plus ``extra``."""
    env = dict(os.environ)
    env.update(C_LOCALE)
    env.update(extra or {})
    return env


def tail(text, lines=20):
    """The last ``lines`` lines of a command's output, for a message a person reads."""
    return "\n".join((text or "").strip().splitlines()[-lines:])


def mask(text, secrets):
    """``text`` with every secret replaced by ``********`` (longest first, so a secret inside another goes too)."""
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


class Result(object):
    """What a command did. ``argv`` is what was run with the secrets masked: safe to show."""

    def __init__(self, argv, rc, stdout, stderr, timed_out=False, secrets=()):
        self.secrets = tuple(s for s in secrets if s)
        self.argv = [mask(str(a), self.secrets) for a in argv]
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr
        self.timed_out = timed_out

    @property
    def ok(self):
        return self.rc == 0

    def why(self, what=None, lines=MSG_LINES):
        """One sentence: ``what`` (default: "`argv` failed"), the rc and the last lines of stderr (else stdout)."""
        what = what or "`%s` failed" % " ".join(self.argv)
        said = tail(self.stderr, lines) or tail(self.stdout, lines)
        return mask("%s (rc %s)%s" % (what, self.rc, ": " + said if said else ""), self.secrets)

    def details(self):
        """The keys a failure result carries about the command (masked, output bounded to its last lines)."""
        return dict(rc=self.rc, cmd=self.argv, stdout=mask(tail(self.stdout, RESULT_LINES), self.secrets),
                    stderr=mask(tail(self.stderr, RESULT_LINES), self.secrets))


class Runner(object):
    """Runs a module's commands; ``env`` is added to the C locale for every command it runs."""

    def __init__(self, module, env=None):
        self.module = module
        self.env = dict(C_LOCALE)
        self.env.update(env or {})

    def bin(self, name, required=True):
        """The path of tool ``name``; None when it is missing and not ``required`` (else fail_json naming it)."""
        path = self.module.get_bin_path(name, required=False)
        if path is None and required:
            package = PACKAGES.get(name)
            self.module.fail_json(
                msg="%s was not found on this node (searched PATH, /sbin, /usr/sbin, /usr/local/sbin)" % name,
                hint="install %s on the node" % package if package else "install %s or put it on the PATH" % name)
        return path

    def run(self, argv, data=None, env=None, timeout=None, kill_after=None, secrets=()):
        """Run ``argv``; ``data`` goes to stdin byte for byte; ``env`` adds to this runner's environment.

        ``timeout`` (seconds) stops the command with SIGTERM through coreutils' ``timeout`` (and SIGKILL
        ``kill_after`` seconds later when given); the result then says ``timed_out``.
        """
        argv = list(argv)
        if timeout is not None:
            limit = ["-k", str(kill_after)] if kill_after is not None else []
            argv = [self.bin("timeout")] + limit + [str(timeout)] + argv
        environ_update = dict(self.env)
        environ_update.update(env or {})
        rc, out, err = self.module.run_command(argv, data=data, binary_data=True, environ_update=environ_update,
                                               expand_user_and_vars=False)
        return Result(argv, rc, out, err, timed_out=timeout is not None and rc in TIMEOUT_RCS, secrets=secrets)

    def fail(self, result, what=None, hint=None, **extra):
        """fail_json for a command that did not do its job: ``msg`` is ``result.why(what)``; ``extra`` adds keys."""
        fields = result.details()
        fields.update(extra)
        if hint:
            fields["hint"] = hint
        self.module.fail_json(msg=result.why(what), **fields)
