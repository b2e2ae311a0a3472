"""sparkfleet deploy|status|stop|restart|qualify -i INVENTORY [-e VARS ...]: the collection's playbooks through ansible-runner.

The command runs the same playbooks as ansible-playbook (sparkfleet.vllm.site, .status, .stop, .restart,
.qualify), from the current directory (so its ansible.cfg applies), and shows their events live. It decides nothing about the cluster.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import threading
import time

from sparkfleet_cli import __version__
from sparkfleet_cli.view import (EXIT_ANSIBLE, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE,
                                 RunView)

PLAYBOOKS = {"deploy": "sparkfleet.vllm.site", "status": "sparkfleet.vllm.status",
             "stop": "sparkfleet.vllm.stop", "restart": "sparkfleet.vllm.restart", "qualify": "sparkfleet.vllm.qualify"}

EPILOG = """exit codes:
  %d  done (status: the cluster serves)
  %d  a task failed on a node (status: something is down); the failure class and hint are printed
  %d  bad command line
  %d  a node could not be reached over ssh
  %d  Ansible stopped before any task ran or failed (playbook or inventory error, collection not installed)
  %d  interrupted

Every run keeps its events (events.jsonl) and ansible-runner's artifacts (stdout, job_events) in
<reports>/runs/<time>-<action>/; deploy and restart also write report.json, report.txt and timeline.png under
<reports>/<time>-<playbook>/ (the sparkfleet.vllm.report callback; <reports>/latest points at the newest); qualify
adds qualify.txt, qualify.json and qualify.png (throughput and latency against concurrency) there.
""" % (EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_ANSIBLE, EXIT_INTERRUPTED)


def parser():
    p = argparse.ArgumentParser(prog="sparkfleet", description=__doc__.splitlines()[0], epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version="sparkfleet %s" % __version__)
    p.add_argument("action", choices=sorted(PLAYBOOKS), help="what to run (the playbook of the same name)")
    p.add_argument("-i", "--inventory", required=True, action="append",
                   help="inventory file or directory (repeatable), as for ansible-playbook")
    p.add_argument("-e", "--extra-vars", action="append", default=[], metavar="VARS",
                   help="key=value, YAML/JSON or @file, as for ansible-playbook (repeatable)")
    p.add_argument("-l", "--limit", help="limit to these hosts (as for ansible-playbook)")
    p.add_argument("--skip-tags", help="skip these tags, comma-separated (qualify: fabric, nccl, disk, serving)")
    p.add_argument("--reports", default=os.environ.get("SPARKFLEET_REPORT_DIR") or "sparkfleet-reports",
                   help="where runs and reports go (default: ./sparkfleet-reports, or $SPARKFLEET_REPORT_DIR)")
    p.add_argument("--plain", action="store_true", help="plain lines instead of the live view (default when "
                                                         "stdout is not a terminal)")
    p.add_argument("-v", "--verbose", action="count", default=0, help="passed to ansible-playbook")
    return p


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


def main(argv=None):
    try:
        args = parser().parse_args(argv)
    except SystemExit as e:
        return EXIT_USAGE if e.code not in (0, None) else EXIT_OK
    try:
        import ansible_runner  # pylint: disable=import-outside-toplevel
    except ImportError:
        sys.stderr.write("sparkfleet: ansible-runner is not installed (pip install ansible-runner)\n")
        return EXIT_ANSIBLE
    from rich.console import Console  # pylint: disable=import-outside-toplevel
    from rich.live import Live  # pylint: disable=import-outside-toplevel

    console = Console(soft_wrap=True)
    # Installed in a virtualenv or by pipx and run by its path: ansible-playbook sits next to our interpreter.
    here = os.path.dirname(sys.executable)
    if not shutil.which("ansible-playbook") and os.path.exists(os.path.join(here, "ansible-playbook")):
        os.environ["PATH"] = here + os.pathsep + os.environ.get("PATH", "")
    plain = args.plain or not console.is_terminal
    base = os.path.abspath(args.reports)
    run_dir = _run_dir(base, args.action)
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
    cmdline = " ".join("-e %s" % shlex.quote(e) for e in args.extra_vars)
    envvars = {"SPARKFLEET_REPORT_DIR": base}
    callbacks = os.environ.get("ANSIBLE_CALLBACKS_ENABLED")
    if callbacks is not None and "sparkfleet.vllm.report" not in callbacks:
        envvars["ANSIBLE_CALLBACKS_ENABLED"] = callbacks + ",sparkfleet.vllm.report"
    elif callbacks is None:
        # ansible.cfg's list (when there is one) stays in force; ours is added through the environment only when
        # the current directory's ansible.cfg does not enable it.
        cfg = os.path.join(os.getcwd(), "ansible.cfg")
        if not (os.path.exists(cfg) and "sparkfleet.vllm.report" in open(cfg, encoding="utf-8").read()):
            envvars["ANSIBLE_CALLBACKS_ENABLED"] = "sparkfleet.vllm.report"
    kwargs = dict(private_data_dir=run_dir, project_dir=os.getcwd(), playbook=PLAYBOOKS[args.action],
                  inventory=inventories, cmdline=cmdline or None, limit=args.limit, verbosity=args.verbose or None,
                  envvars=envvars, quiet=True, event_handler=on_event, skip_tags=args.skip_tags)
    started = time.time()
    if not plain:
        console.print("sparkfleet %s: %s -i %s" % (args.action, PLAYBOOKS[args.action], " -i ".join(args.inventory)))
    try:
        if plain:
            thread, runner = ansible_runner.run_async(**kwargs)
            thread.join()
        else:
            with Live(view.render(), console=console, refresh_per_second=4, transient=False) as live:
                thread, runner = ansible_runner.run_async(**kwargs)
                while thread.is_alive():
                    thread.join(0.25)
                    with lock:
                        live.update(view.render())
                with lock:
                    live.update(view.render())
    except KeyboardInterrupt:
        console.print("sparkfleet: interrupted; events so far in %s" % events_path)
        return EXIT_INTERRUPTED
    finally:
        events.close()
    status = runner.status
    code = view.exit_code(status)
    if plain:
        flush_plain()
    for line in view.summary_lines(status):
        console.print(line, markup=False, highlight=False, style="red" if code else None)
    report = _report_written(base, started)
    if args.action == "status":
        # status.yml shows the latest deploy report's table first; the live view shows no task output, so here it is.
        latest = os.path.join(base, "latest", "report.txt")
        if os.path.exists(latest):
            with open(latest, encoding="utf-8") as f:
                console.print("last deploy (%s):\n%s" % (os.path.realpath(os.path.dirname(latest)), f.read().rstrip()),
                              markup=False, highlight=False)
        else:
            console.print("no deploy report under %s" % base, markup=False)
    if report:
        with open(os.path.join(report, "report.txt"), encoding="utf-8") as f:
            console.print(f.read().rstrip(), markup=False, highlight=False)
        if os.path.exists(os.path.join(report, "qualify.txt")):
            with open(os.path.join(report, "qualify.txt"), encoding="utf-8") as f:
                console.print(f.read().rstrip(), markup=False, highlight=False)
        console.print("report: %s" % report, markup=False)
    if code == EXIT_ANSIBLE:
        tail = "".join(runner.stdout.readlines()[-15:]) if runner.stdout else ""
        console.print(tail.rstrip(), markup=False, highlight=False)
    console.print("events: %s" % events_path, markup=False)
    return code


def run():
    sys.exit(main())
