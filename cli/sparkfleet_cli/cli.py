"""sparkfleet ACTION -i INVENTORY [options]: the sparkfleet.vllm collection's playbooks through ansible-runner.

The command runs the same playbooks as ansible-playbook (sparkfleet.vllm.prepare, .site, .status, .stop, .restart), from the
current directory (so its ansible.cfg applies), and shows their events live. It decides nothing about the cluster.

To add a subcommand, add one Action to ACTIONS (its playbook, a one-line help and a description); every subcommand
gets the common options, its own --help, the live view, the event log and the exit codes.
"""

from __future__ import annotations

import argparse
import collections
import getpass
import json
import os
import re
import shlex
import shutil
import signal
import stat
import sys
import tempfile
import threading
import time

from sparkfleet_cli import __version__
from sparkfleet_cli.view import (EXIT_ANSIBLE, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_INVENTORY, EXIT_OK,
                                 EXIT_UNREACHABLE, EXIT_USAGE, RunView, stdout_failure)

Action = collections.namedtuple("Action", "playbook help description")

ACTIONS = {
    "prepare": Action("sparkfleet.vllm.prepare", "once, with the sudo password (-K): what preflight asks of a person",
                      "Runs sparkfleet.vllm.prepare with the login user's sudo password (-K or --become-password-file): "
                      "a sudoers file that lets the login user use sudo without a password and the image key run its "
                      "load command, the controller's key on every node, the model checked on the head, the image "
                      "pinned by its digest (prepare_image_vars_file) and the API key made once into a vault file "
                      "(prepare_api_key_vault_file; -J or --vault-password-file). deploy then runs without -K. A "
                      "second run changes nothing."),
    "deploy": Action("sparkfleet.vllm.site", "bare Sparks to a serving vLLM cluster (site.yml; idempotent)",
                     "Runs sparkfleet.vllm.site: preflight, image, GPU cleanup, model sync, Ray, vLLM, health check. "
                     "A second run changes nothing. Writes the deploy report (report.json, report.txt, timeline.png)."),
    "status": Action("sparkfleet.vllm.status", "read-only report of every node; non-zero when something is down",
                     "Runs sparkfleet.vllm.status: every node's units and the API; changes nothing. Prints the latest "
                     "deploy report's table too."),
    "restart": Action("sparkfleet.vllm.restart", "restart vLLM only (Ray keeps running) and wait until it serves",
                      "Runs sparkfleet.vllm.restart and writes a report like deploy's."),
    "stop": Action("sparkfleet.vllm.stop", "stop and disable vLLM and Ray on every node (the model stays)",
                   "Runs sparkfleet.vllm.stop."),
    "qualify": Action("sparkfleet.vllm.qualify", "measure the fabric, all-reduce, disks and the API against two Sparks",
                      "Runs sparkfleet.vllm.qualify and writes its report (qualify.txt, qualify.json, qualify.png: "
                      "throughput and latency against concurrency) beside the deploy report's files."),
}
# Kept for callers of 0.2.0 (the action -> playbook map).
PLAYBOOKS = {name: action.playbook for name, action in ACTIONS.items()}

EPILOG = """exit codes:
  %d  done (status: the cluster serves)
  %d  a task failed on a node (status: something is down); the failure class and hint are printed
  %d  bad command line
  %d  a node could not be reached over ssh
  %d  Ansible stopped before any task ran or failed (playbook error, bad extra vars, an encrypted
     inventory without its vault password or with a wrong one, collection not installed)
  %d  the inventory has no spark group or not exactly one spark_head (or does not exist, or -l on an
     inventory without a host)
  %d  interrupted (Ctrl-C, SIGTERM or SIGHUP): ansible-playbook and every process it started are ended

The options shared with ansible-playbook (-i -e -l -t --skip-tags -C -D -u --private-key -K -J
--vault-password-file -v) mean what they mean there. A --check run writes its report but never moves
<reports>/latest, nor does a run in which no node ran a task.

Every run keeps its events (events.jsonl) and ansible-runner's artifacts (stdout, job_events) in
<reports>/runs/<time>-<action>/; deploy and restart also write report.json, report.txt and timeline.png under
<reports>/<time>-<playbook>/ (the sparkfleet.vllm.report callback; <reports>/latest points at the newest); qualify
adds qualify.txt, qualify.json and qualify.png (throughput and latency against concurrency) there.
Errors go to stderr, without colour unless it is a terminal (NO_COLOR turns colour off everywhere).
""" % (EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_ANSIBLE, EXIT_INVENTORY, EXIT_INTERRUPTED)

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# The vault password reaches ansible-playbook through a named pipe this process feeds and a script that reads it:
# never a file holding it, never the environment (ansible-runner writes the command's environment to its artifacts).


class UsageError(Exception):
    """A bad command line found after parsing (a path that cannot be used): exit 2 with the message."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.print_usage(sys.stderr)
        raise UsageError("%s: error: %s" % (self.prog, message))


def _common(p):
    p.add_argument("-i", "--inventory", required=True, action="append",
                   help="inventory file or directory (repeatable), as for ansible-playbook")
    p.add_argument("-e", "--extra-vars", action="append", default=[], metavar="VARS",
                   help="key=value, YAML/JSON or @file, as for ansible-playbook (repeatable)")
    p.add_argument("-l", "--limit", metavar="HOSTS", help="limit to these hosts (as for ansible-playbook)")
    p.add_argument("-t", "--tags", metavar="TAGS", help="run only plays and tasks with these tags, comma-separated")
    p.add_argument("--skip-tags", metavar="TAGS", help="skip these tags, comma-separated (qualify: fabric, nccl, "
                                                       "disk, serving)")
    p.add_argument("-C", "--check", action="store_true",
                   help="change nothing; predict what would change (as for ansible-playbook)")
    p.add_argument("-D", "--diff", action="store_true", help="show the differences in the files it changes (or "
                                                              "would change, with --check)")
    p.add_argument("-u", "--user", metavar="REMOTE_USER", help="connect as this user (as for ansible-playbook)")
    p.add_argument("--private-key", "--key-file", metavar="FILE", dest="private_key",
                   help="use this file to authenticate the ssh connection")
    become = p.add_mutually_exclusive_group()
    become.add_argument("-K", "--ask-become-pass", action="store_true", help="ask for the privilege escalation "
                                                                               "(sudo) password")
    become.add_argument("--become-password-file", "--become-pass-file", metavar="FILE",
                        help="become (sudo) password file, as for ansible-playbook")
    vault = p.add_mutually_exclusive_group()
    vault.add_argument("--vault-password-file", metavar="FILE", action="append", default=[],
                       help="vault password file (repeatable), as for ansible-playbook")
    vault.add_argument("-J", "--ask-vault-pass", action="store_true", help="ask for the vault password")
    p.add_argument("--reports", metavar="DIR", default=os.environ.get("SPARKFLEET_REPORT_DIR") or "sparkfleet-reports",
                   help="where runs and reports go (default: ./sparkfleet-reports, or $SPARKFLEET_REPORT_DIR)")
    p.add_argument("--plain", action="store_true", help="plain lines instead of the live view (default when "
                                                         "stdout is not a terminal)")
    p.add_argument("-v", "--verbose", action="count", default=0, help="passed to ansible-playbook (-vvv: more)")


def parser():
    p = _Parser(prog="sparkfleet", description=__doc__.splitlines()[0], epilog=EPILOG,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version="sparkfleet %s" % __version__)
    sub = p.add_subparsers(dest="action", metavar="ACTION", parser_class=_Parser)
    sub.required = True
    for name, action in ACTIONS.items():
        sp = sub.add_parser(name, help=action.help, description="%s\n\n%s" % (action.help, action.description),
                            epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
        _common(sp)
    top = sub.add_parser("top", help="a live view of the serving cluster from the head's Prometheus (monitoring role)",
                         description="Tokens/s, running and waiting requests, TTFT p50/p95, KV cache use, each node's "
                                     "unified memory against its baseline, Ray on each node, the last restart and why, "
                                     "the firing alerts. Asks Prometheus on the head over ssh (the inventory's "
                                     "connection), or at --prometheus URL. Ctrl-C ends it.",
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    top.add_argument("-i", "--inventory", required=True, action="append",
                     help="inventory file or directory (repeatable), as for ansible-playbook")
    top.add_argument("--prometheus", metavar="URL", help="ask this Prometheus directly (http://HEAD:9090) instead of "
                                                         "through ssh to the head")
    top.add_argument("--interval", type=float, default=5.0, metavar="SECONDS", help="refresh every SECONDS (default 5)")
    top.add_argument("--once", action="store_true", help="one snapshot, then exit")
    top.add_argument("--plain", action="store_true", help="plain lines, one snapshot (default when stdout is not a "
                                                         "terminal)")
    return p


def _check_args(args):
    """Paths and values argparse cannot judge: refused here with the option named, before anything runs."""
    for i in args.inventory:
        if not i.strip():
            raise UsageError("sparkfleet: error: -i/--inventory is empty")
    for e in args.extra_vars:
        if not e.strip():
            raise UsageError("sparkfleet: error: -e/--extra-vars is empty")
        if e.startswith("@") and not os.path.isfile(e[1:]):
            raise UsageError("sparkfleet: error: -e %s: no such file" % e)
    for f in args.vault_password_file:
        if not os.path.isfile(f):
            raise UsageError("sparkfleet: error: --vault-password-file %s: no such file" % f)
    for option, f in (("--private-key", args.private_key), ("--become-password-file", args.become_password_file)):
        if f is not None and not os.path.isfile(f):
            raise UsageError("sparkfleet: error: %s %s: no such file" % (option, f))
    for option, value in (("-u/--user", args.user), ("-t/--tags", args.tags), ("--skip-tags", args.skip_tags)):
        if value is not None and not value.strip():
            raise UsageError("sparkfleet: error: %s is empty" % option)
    if args.limit is not None and not args.limit.strip():
        raise UsageError("sparkfleet: error: -l/--limit is empty")
    if not args.reports.strip():
        raise UsageError("sparkfleet: error: --reports is empty")
    if "\0" in "".join(args.inventory + args.extra_vars + [args.limit or "", args.reports, args.user or "",
                                                             args.tags or "", args.skip_tags or ""]):
        raise UsageError("sparkfleet: error: an argument holds a NUL byte")
    base = os.path.abspath(args.reports)
    try:
        os.makedirs(os.path.join(base, "runs"), exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=os.path.join(base, "runs"), prefix=".probe-")
        probe.close()
    except OSError as e:
        raise UsageError("sparkfleet: error: --reports %s cannot hold the run's files: %s" % (
            args.reports, e.strerror or e)) from None
    return base


def _cmdline(args):
    """ansible-playbook's options the CLI passes through (ansible-runner has no keyword for these)."""
    cmdline = ["-e %s" % shlex.quote(e) for e in args.extra_vars]
    cmdline += ["--vault-password-file %s" % shlex.quote(os.path.abspath(f)) for f in args.vault_password_file]
    if args.check:
        cmdline.append("--check")
    if args.diff:
        cmdline.append("--diff")
    if args.user:
        cmdline.append("-u %s" % shlex.quote(args.user))
    if args.private_key:
        cmdline.append("--private-key %s" % shlex.quote(os.path.abspath(args.private_key)))
    if args.become_password_file:
        cmdline.append("--become-password-file %s" % shlex.quote(os.path.abspath(args.become_password_file)))
    return cmdline


def _children(parent):
    """Pids of the processes whose parent is `parent` (Linux /proc; none elsewhere)."""
    found = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, encoding="utf-8") as f:
                # pid (comm) state ppid ...: comm may hold spaces, so read after its closing parenthesis
                if int(f.read().rsplit(")", 1)[1].split()[1]) == parent:
                    found.append(int(name))
        except (OSError, ValueError, IndexError):
            pass
    return found


class _Interrupt(object):
    """Ctrl-C, SIGTERM and SIGHUP while a run goes on.

    ansible-playbook runs in a session of its own (ansible-runner's terminal) and each of its workers in another
    (ansible-core setsid()s them), so killing ansible-playbook's process group, which is how ansible-runner cancels,
    would leave the workers and what they run behind. The first signal is passed on to ansible-playbook as SIGTERM,
    which ends its workers' sessions itself; only when it has not ended after GRACE seconds does cancel() tell
    ansible-runner to kill its group."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    GRACE = 15.0

    def __init__(self):
        self._event = threading.Event()
        self._saved = {}
        self._at = None

    def is_set(self):
        return self._event.is_set()

    def cancel(self):
        """ansible-runner's cancel_callback: kill ansible-playbook's group once it outlived its grace."""
        return self._at is not None and time.time() - self._at > self.GRACE

    def _handler(self, signum, _frame):
        if self._event.is_set():
            return
        self._event.set()
        self._at = time.time()
        for pid in _children(os.getpid()):
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:
                pass

    def install(self):
        if threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                self._saved[signum] = signal.signal(signum, self._handler)

    def uninstall(self):
        for signum, handler in self._saved.items():
            signal.signal(signum, handler)
        self._saved = {}


def latest_report_lines(base, inventories):
    """What status prints of <reports>/latest: its table when that report is of this inventory, else why not."""
    latest = os.path.join(base, "latest")
    try:
        with open(os.path.join(latest, "report.json"), encoding="utf-8") as f:
            meta = json.load(f)
        with open(os.path.join(latest, "report.txt"), encoding="utf-8") as f:
            table = f.read().rstrip()
    except (OSError, ValueError):
        return ["no deploy report under %s" % base]
    theirs = meta.get("inventory") if isinstance(meta, dict) else None
    ours = sorted(os.path.realpath(i) if os.path.exists(i) else i for i in inventories)   # as ansible-playbook has them
    if theirs is not None and sorted(theirs) != ours:
        return ["the latest deploy report under %s is of another inventory (%s), not shown" % (
            base, ", ".join(theirs))]
    return ["last deploy (%s):" % os.path.realpath(latest), table]


def _run_dir(base, action):
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = os.path.join(base, "runs", "%s-%s" % (stamp, action))
    n = 1
    while os.path.exists(path):
        n += 1
        path = os.path.join(base, "runs", "%s-%s-%d" % (stamp, action, n))
    os.makedirs(path)
    return path


def _report_written(base, since):
    """The report the callback wrote during this run, if any (its directory)."""
    latest = os.path.join(base, "latest")
    report = os.path.join(latest, "report.json")
    if os.path.exists(report) and os.path.getmtime(report) >= since:
        return os.path.realpath(latest)
    return None


class VaultPipe(object):
    """An executable password file (it holds no secret) that reads the password from a named pipe (0600) this
    process writes it into once (ansible-playbook reads its vault and become passwords once, at start), until
    close(). name: vault-password or become-password."""

    def __init__(self, run_dir, password, name="vault-password"):
        self.fifo = os.path.join(run_dir, "%s.fifo" % name)
        os.mkfifo(self.fifo, stat.S_IRUSR | stat.S_IWUSR)
        self.script = os.path.join(run_dir, "%s-client" % name)
        with open(self.script, "w", encoding="utf-8") as f:
            f.write("#!/bin/sh\nexec cat %s\n" % shlex.quote(self.fifo))
        os.chmod(self.script, stat.S_IRWXU)
        self._password = (password + "\n").encode("utf-8")
        self._closed = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        # One reader, one copy: a writer that opened the pipe again while the reader still held it would hand it the
        # password twice.
        try:
            fd = os.open(self.fifo, os.O_WRONLY)   # blocks until a reader opens it; never creates a file
        except OSError:
            return
        try:
            if not self._closed:
                os.write(fd, self._password)
        except OSError:
            pass
        finally:
            os.close(fd)

    def close(self):
        self._closed = True
        for flags in (os.O_RDONLY | os.O_NONBLOCK, os.O_WRONLY | os.O_NONBLOCK):
            try:
                # Release our writer if nobody read (what it writes goes nowhere), or a reader still waiting (EOF).
                os.close(os.open(self.fifo, flags))
            except OSError:
                pass
        for path in (self.fifo, self.script):
            try:
                os.unlink(path)
            except OSError:
                pass


def main(argv=None):
    try:
        args = parser().parse_args(argv)
        if args.action == "top":
            if args.interval < 1:
                raise UsageError("sparkfleet top: error: --interval must be at least 1 second")
            return _top(args)
        base = _check_args(args)
    except UsageError as e:
        sys.stderr.write("%s\n" % e)
        return EXIT_USAGE
    except SystemExit as e:   # --help and --version exit 0 through argparse
        return EXIT_USAGE if e.code not in (0, None) else EXIT_OK
    try:
        return _run(args, base)
    except KeyboardInterrupt:
        sys.stderr.write("sparkfleet: interrupted\n")
        return EXIT_INTERRUPTED


def _top(args):
    from rich.console import Console  # pylint: disable=import-outside-toplevel
    from sparkfleet_cli import top  # pylint: disable=import-outside-toplevel
    here = os.path.dirname(sys.executable)
    if not shutil.which("ansible-inventory") and os.path.exists(os.path.join(here, "ansible-inventory")):
        os.environ["PATH"] = here + os.pathsep + os.environ.get("PATH", "")
    try:
        return top.run(args, Console(soft_wrap=True))
    except KeyboardInterrupt:
        return EXIT_OK


def _run(args, base):
    try:
        import ansible_runner  # pylint: disable=import-outside-toplevel
    except ImportError:
        sys.stderr.write("sparkfleet: ansible-runner is not installed (pip install ansible-runner)\n")
        return EXIT_ANSIBLE
    from rich.console import Console  # pylint: disable=import-outside-toplevel
    from rich.live import Live  # pylint: disable=import-outside-toplevel

    action = ACTIONS[args.action]
    console = Console(soft_wrap=True)
    err = Console(soft_wrap=True, stderr=True)   # no colour unless stderr is a terminal (rich decides; NO_COLOR too)
    # Installed in a virtualenv or by pipx and run by its path: ansible-playbook sits next to our interpreter.
    here = os.path.dirname(sys.executable)
    if not shutil.which("ansible-playbook") and os.path.exists(os.path.join(here, "ansible-playbook")):
        os.environ["PATH"] = here + os.pathsep + os.environ.get("PATH", "")
    plain = args.plain or not console.is_terminal
    run_dir = _run_dir(base, args.action)
    pipes = []
    cmdline = _cmdline(args)
    # Asked in ansible-playbook's order and words (become first, then vault).
    for wanted, option, prompt, name, alternative in (
            (args.ask_become_pass, "--ask-become-pass", "BECOME password: ", "become-password",
             "--become-password-file"),
            (args.ask_vault_pass, "--ask-vault-pass", "Vault password: ", "vault-password", "--vault-password-file")):
        if not wanted:
            continue
        try:
            password = getpass.getpass(prompt, stream=sys.stderr)
        except EOFError:
            err.print("sparkfleet: %s needs a terminal to ask on (or use %s)" % (option, alternative),
                      markup=False, highlight=False)
            for pipe in pipes:
                pipe.close()
            return EXIT_USAGE
        pipes.append(VaultPipe(run_dir, password, name))
        cmdline.append("%s %s" % (alternative, shlex.quote(pipes[-1].script)))
    view = RunView(args.action)
    events_path = os.path.join(run_dir, "events.jsonl")
    events = open(events_path, "a", encoding="utf-8")
    lock = threading.Lock()
    printed = [0]

    def flush_plain():
        for line in view.changes[printed[0]:]:
            console.print(line, markup=False, highlight=False)
        printed[0] = len(view.changes)

    def on_event(event):
        with lock:
            events.write(json.dumps(event, default=str) + "\n")
            events.flush()
            view.handle(event)
            if plain:
                flush_plain()
        return True

    inventories = [os.path.abspath(i) if os.path.exists(i) else i for i in args.inventory]
    envvars = {"SPARKFLEET_REPORT_DIR": base}
    if not console.is_terminal or os.environ.get("NO_COLOR"):
        envvars["ANSIBLE_NOCOLOR"] = "1"
    callbacks = os.environ.get("ANSIBLE_CALLBACKS_ENABLED")
    if callbacks is not None and "sparkfleet.vllm.report" not in callbacks:
        envvars["ANSIBLE_CALLBACKS_ENABLED"] = callbacks + ",sparkfleet.vllm.report"
    elif callbacks is None:
        # ansible.cfg's list (when there is one) stays in force; ours is added through the environment only when
        # the current directory's ansible.cfg does not enable it.
        cfg = os.path.join(os.getcwd(), "ansible.cfg")
        if not (os.path.exists(cfg) and "sparkfleet.vllm.report" in open(cfg, encoding="utf-8").read()):
            envvars["ANSIBLE_CALLBACKS_ENABLED"] = "sparkfleet.vllm.report"
    stop = _Interrupt()
    kwargs = dict(private_data_dir=run_dir, project_dir=os.getcwd(), playbook=action.playbook,
                  inventory=inventories, cmdline=" ".join(cmdline) or None, limit=args.limit,
                  verbosity=args.verbose or None, envvars=envvars, quiet=True, event_handler=on_event,
                  tags=args.tags, skip_tags=args.skip_tags, cancel_callback=stop.cancel,
                  # how often ansible-runner asks cancel_callback (its default, 5 s, is a long wait after Ctrl-C)
                  settings={"pexpect_timeout": 1})
    started = time.time()
    if not plain:
        console.print("sparkfleet %s: %s -i %s" % (args.action, action.playbook, " -i ".join(args.inventory)),
                      markup=False, highlight=False)
    # Ctrl-C, SIGTERM and SIGHUP only set the flag: ansible-runner then ends ansible-playbook's whole process group
    # (its workers and the ssh clients they started), and the run is reported as interrupted, never as failed.
    stop.install()
    try:
        if plain:
            thread, runner = ansible_runner.run_async(**kwargs)
            while thread.is_alive():
                thread.join(0.25)
        else:
            with Live(view.render(), console=console, refresh_per_second=4, transient=False) as live:
                thread, runner = ansible_runner.run_async(**kwargs)
                while thread.is_alive():
                    thread.join(0.25)
                    with lock:
                        live.update(view.render())
                with lock:
                    live.update(view.render())
    finally:
        stop.uninstall()
        events.close()
        for pipe in pipes:
            pipe.close()
    status = "canceled" if stop.is_set() else runner.status
    if status == "failed" and view.failure is None and not view.finished and runner.stdout:
        # ansible-playbook stopped before any task: the inventory check's own reason when it is one (exit 5).
        failure = stdout_failure(_ANSI.sub("", runner.stdout.read()))
        runner.stdout.seek(0)
        if failure:
            view.failure = failure
    code = view.exit_code(status)
    if plain:
        flush_plain()
    out = err if code else console
    for line in view.summary_lines(status):
        out.print(line, markup=False, highlight=False, style="red" if code else None)
    report = _report_written(base, started)
    if args.action == "status":
        # status.yml shows the latest deploy report's table first; the live view shows no task output, so here it is.
        for line in latest_report_lines(base, inventories):
            console.print(line, markup=False, highlight=False)
    if report:
        with open(os.path.join(report, "report.txt"), encoding="utf-8") as f:
            console.print(f.read().rstrip(), markup=False, highlight=False)
        if os.path.exists(os.path.join(report, "qualify.txt")):
            with open(os.path.join(report, "qualify.txt"), encoding="utf-8") as f:
                console.print(f.read().rstrip(), markup=False, highlight=False)
        console.print("report: %s" % report, markup=False, highlight=False)
    if code == EXIT_ANSIBLE:
        tail = "".join(runner.stdout.readlines()[-15:]) if runner.stdout else ""
        err.print(_ANSI.sub("", tail).rstrip(), markup=False, highlight=False)
    console.print("events: %s" % events_path, markup=False, highlight=False)
    return code


def run():
    sys.exit(main())
