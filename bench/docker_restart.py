#!/usr/bin/env python3
"""A restart of docker under load, without and with docker's live-restore, side by side on one deployed lab.

    SPARKLAB_NAME=me .venv/bin/python bench/docker_restart.py [--rounds 2] [--tree CHECKOUT]

Run as root from the repo root on a deployed lab (SPARKLAB_NAME: a lab of your own; default the shared one); it re-runs
itself in the lab's control namespace, so every request goes to the lab's API and nowhere else. For each mode, off
(docker's default, as the lab stages it) then on (`labctl break live-restore` on every node):
site.yml of --tree (the units follow the node's setting), the API serving, then --rounds rounds of `systemctl restart
docker` on every node in turn (workers first, then the head), each followed by a wait until the API has answered for
--hold seconds (bounded by --heal-limit), under one completion a second (bench/soak.py's load). Prints per mode the
requests answered and per restart the seconds of failed requests, then the ratios. Leaves the lab as it found it: live-
restore off and a last site.yml. Bounded: about 3 site.yml runs plus 2 x rounds x nodes x (restart + heal).
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import soak  # noqa: E402  (the soak's lab knobs, load and healing rule)


def restarts(lab, load, args, mode):
    """The rounds of docker restarts: per restart (host, seconds of failed requests after it, healed)."""
    out = []
    for _round in range(args.rounds):
        for host in lab.workers + [lab.head]:
            t0 = time.time()
            p = lab.labctl("break", "docker-restart", host)
            if p.returncode != 0:
                sys.exit("docker_restart: %s: the restart failed: %s" % (host, p.stderr[-300:]))
            # healed: a run of --hold seconds of good answers, all sent after the restart returned (without
            # live-restore it stops our units first: the API may answer until their stop ends the engine)
            t_done, healed = time.time(), None
            while time.time() - t_done < args.heal_limit + args.hold:
                time.sleep(2)
                healed = soak.healed_since(load.snapshot(), t_done, args.hold)
                if healed is not None:
                    break
            rows = [r for r in load.snapshot() if t0 <= r[0] and (healed is None or r[0] < healed)]
            failed = [r for r in rows if r[2] != "ok"]
            lost = (max(r[0] for r in failed) - min(r[0] for r in failed) + 1) if failed else 0.0
            out.append((host, lost, healed is not None))
            soak.log("%s: docker restarted on %s (%.0f s): %d request(s) failed over %.0f s, %s"
                     % (mode, host, t_done - t0, len(failed), lost, "healed" if healed else
                        "NOT healed within %d s" % args.heal_limit))
    return out


def mode_run(lab, args, key, mode, logfile):
    for host in lab.hosts:
        p = lab.labctl("break" if mode == "on" else "fix", "live-restore", host)
        if p.returncode != 0:
            sys.exit("docker_restart: live-restore %s on %s failed: %s" % (mode, host, p.stderr[-300:]))
    rc, secs = lab.playbook("site.yml", 1800, logfile)
    if rc != 0:
        sys.exit("docker_restart: site.yml (live-restore %s) failed (rc %d): %s" % (mode, rc, logfile))
    soak.log("live-restore %s: site.yml %.0f s" % (mode, secs))
    load = soak.Requests(args.model, key, args.request_timeout)
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            load.tick()
            stop.wait(1.0)

    t = threading.Thread(target=ticker, daemon=True)
    t.start()
    try:
        while soak.healed_since(load.snapshot(), 0, 10) is None:      # serving before the first restart
            if len(load.snapshot()) > 300:
                sys.exit("docker_restart: the API did not serve within 300 s of site.yml (live-restore %s)" % mode)
            time.sleep(2)
        t_start = time.time()
        per = restarts(lab, load, args, mode)
    finally:
        stop.set()
        t.join(timeout=10)
        load.pool.shutdown(wait=True)
    rows = [r for r in load.snapshot() if r[0] >= t_start]
    ok = sum(1 for r in rows if r[2] == "ok")
    return {"requests": len(rows), "ok": ok, "restarts": per}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2, help="restarts of docker per node and mode (1-5)")
    ap.add_argument("--hold", type=int, default=30, help="seconds of good answers that count as healed")
    ap.add_argument("--heal-limit", type=int, default=300, help="seconds to wait for healing after a restart")
    ap.add_argument("--request-timeout", type=int, default=10)
    ap.add_argument("--tree", default=soak.REPO, help="the checkout whose site.yml deploys (the one under test)")
    ap.add_argument("--model", default="sparklab/tiny-moe")
    ap.add_argument("--in-ctl", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if not 1 <= args.rounds <= 5:
        sys.exit("docker_restart: --rounds must be 1..5")
    args.tree = os.path.abspath(args.tree)
    if not args.in_ctl:
        os.execv(soak.LABCTL, [soak.LABCTL, "ctl", "--", sys.executable, os.path.abspath(__file__), "--in-ctl"]
                 + sys.argv[1:])
    lab = soak.Lab(os.environ.get("SPARKLAB_NAME") or "sfl", args.tree)
    key = open(soak.API_KEY_FILE).read().strip()
    logfile = "/var/tmp/sparkfleet-docker-restart-%s.log" % time.strftime("%Y%m%d-%H%M%S")
    soak.log("lab %s (%s), tree %s @ %s, %s; load %s; playbook log %s" % (
        lab.name, ", ".join(lab.hosts), args.tree, soak.commit_of(args.tree), soak.machine(),
        " ".join(open("/proc/loadavg").read().split()[:3]), logfile))
    results = {}
    try:
        for mode in ("off", "on"):
            results[mode] = mode_run(lab, args, key, mode, logfile)
    finally:
        for host in lab.hosts:
            lab.labctl("fix", "live-restore", host)
        rc, _secs = lab.playbook("site.yml", 1800, logfile)
        soak.log("restored: live-restore off, site.yml rc %d" % rc)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print("\ndocker restarted under load, %s, %d round(s) x %d node(s) per mode, load now %s"
          % (date, args.rounds, len(lab.hosts), " ".join(open("/proc/loadavg").read().split()[:3])))
    print("| live-restore | requests answered | seconds of failed requests per restart | healed |")
    print("|---|---|---|---|")
    for mode, r in results.items():
        print("| %s | %.1f %% (%d of %d) | %s | %d of %d |" % (
            mode, 100.0 * r["ok"] / max(1, r["requests"]), r["ok"], r["requests"],
            ", ".join("%s %.0f" % (h, lost) for h, lost, _ in r["restarts"]),
            sum(1 for *_x, healed in r["restarts"] if healed), len(r["restarts"])))
    off, on = (sum(lost for _h, lost, _ in results[m]["restarts"]) for m in ("off", "on"))
    failed_off = results["off"]["requests"] - results["off"]["ok"]
    failed_on = results["on"]["requests"] - results["on"]["ok"]
    print("ratio on/off: seconds of failed requests %.2f (%.0f / %.0f s), failed requests %.2f (%d / %d)"
          % (on / off if off else 0.0, on, off, failed_on / failed_off if failed_off else 0.0, failed_on, failed_off))
    return 0


if __name__ == "__main__":
    sys.exit(main())
