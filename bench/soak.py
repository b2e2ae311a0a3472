#!/usr/bin/env python3
"""Chaos soak: a deployed lab serves one request a second while faults are injected, and must heal by itself.

    SPARKLAB_NAME=me .venv/bin/python bench/soak.py --duration 3600 --every 300 [--out DIR] [--tree CHECKOUT]

Run as root from the repo root on a deployed lab (SPARKLAB_NAME: a lab of your own; default the shared one). It re-runs itself
in the lab's control namespace, so every request goes to the lab's API (10.99.0.11) and nowhere else.

- Load: one completion a second (a few tokens, with the lab's API key) through the real API, each bounded by
  --request-timeout; every request's outcome is kept (requests.csv).
- Faults: one every --every seconds (the first half a period in), drawn at random (--seed) so that every kind of
  --faults comes once before any comes twice; each is injected with the lab's own knobs (`lab/labctl break|fix`,
  `lab/labctl reboot`). A fabric flap lasts 20-60 s. A fault is never injected before the previous one healed.
- Per fault: the seconds from its end (a flap: the cable back; a reboot: the host up) to the first good answer after
  the last failed request it caused, the requests it failed, and whether a human step was needed: not healed within
  --human-after seconds, the soak does what an operator would (undo a pause, run site.yml of --tree, bounded) and
  says so.
- status.yml (of --tree) is run every --status-every seconds; each sample is compared with the requests sent while it
  ran (serving: exit 0; not serving: non-zero).
- At the end: every node's model files hash (sha256) as the head's did at the start.
- Unified memory (--uma, on when `labctl mem` shows the lab's hosts with a memory limit): the wedge knob is on for every
  host from the start to the end (a reboot clears it: the soak sets it again), so an over-allocation freezes a node as
  on a GB10 instead of being OOM-killed, and two more kinds: leak-worker (the leak knob on a worker at --leak-pct of
  its memory, the engine killed after each start until supervision escalates or --leak-kills kills; the knob then
  fixed) and page-cache-worker (the worker's page cache filled, then the engine killed: the memory gate must drop it).
  After every fault and at the end: the nodes found FROZEN (`labctl mem`; a frozen node is power-cycled as an operator
  would, a human step) and the engine's starts in the fault's window (the head's journal of sparkfleet-vllm: systemd's
  "Starting" and the gate's "memory gate:" lines). A fault after which supervision escalated (its marker on the head)
  is recorded as "escalated, human step named: <step>"; the soak then does that step (labctl reboot of the node it
  names, then site.yml of --tree, bounded) and measures until the API serves again.

Writes DIR/report.md (the table), DIR/availability.png (availability over time, faults marked), summary.json,
requests.csv, faults.json, status.csv, supervision-spark-1.jsonl (the head's supervision log), starts.json (the engine's
starts seen in the head's journal), and prints the table. Bounded: at most --duration (<= 4 h) plus the last
fault's healing and a human step (each bounded), then it stops by itself; faults still in place are undone on exit.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LABCTL = os.path.join(REPO, "lab", "labctl")
API = "http://10.99.0.11:30000"        # the lab head's management address: exists only in the lab's namespaces
API_KEY_FILE = "/var/tmp/sparklab/lab/api-key"
MAX_DURATION = 4 * 3600

# Every kind of fault the soak knows, in the order the issue lists them.
KINDS = ("kill-worker-raylet", "kill-head-raylet", "kill-engine", "pause-engine", "fabric-flap-head",
         "fabric-flap-worker", "restart-docker", "reboot-node", "kill-gcs", "leak-worker", "page-cache-worker")
UMA_KINDS = ("leak-worker", "page-cache-worker")     # need the lab's unified memory model (a memory limit per host)
UNIT = "sparkfleet-vllm"
MARKER = "/run/sparkfleet/escalated-%s" % UNIT       # the watchdog's escalation (JSON: reason, step, nodes, memory)
SUPERVISION_LOG = "/var/lib/sparkfleet/watchdog/supervision.log"
MiB = 1 << 20


def log(msg):
    sys.stdout.write("[soak %s] %s\n" % (time.strftime("%H:%M:%S"), msg))
    sys.stdout.flush()


def machine():
    cpu = "?"
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem = int(open("/proc/meminfo").readline().split()[1]) // 1024 // 1024
    return "%d x %s, %d GiB RAM, kernel %s" % (os.cpu_count(), cpu, mem, os.uname().release)


def commit_of(tree):
    p = subprocess.run(["git", "-C", tree, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", tree, "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                           text=True).stdout.strip()
    return (p.stdout.strip() or "?") + (" +changes" if dirty else "")


# --------------------------------------------------------------------------- unified memory (pure: unit-tested)
def parse_mem(text):
    """`labctl mem HOST`'s text -> {limit, usage, free, page_cache, rss (bytes; limit 0: none), leak (bool),
    leaked_files, leaked_bytes, wedge ("off", "on" or "frozen"), page_cache_knob (bool)}; None when it is not one."""
    out = {}
    for line in text.splitlines():
        key, sep, rest = line.strip().partition(":")
        if not sep:
            continue
        words = rest.split()
        if key in ("limit", "usage", "free", "page cache", "rss"):
            out[key.replace(" ", "_")] = int(words[0]) if words and words[0].lstrip("-").isdigit() else 0
        elif key == "leak":
            out["leak"] = rest.strip().startswith("on")
            tail = rest.partition("leaked:")[2].split()
            out["leaked_files"] = int(tail[0]) if tail and tail[0].isdigit() else 0
            out["leaked_bytes"] = int(tail[2]) if len(tail) > 2 and tail[2].isdigit() else 0
        elif key == "wedge":
            value = rest.strip()
            out["wedge"] = "frozen" if "FROZEN" in value else "on" if value.startswith("on") else "off"
        elif key == "page-cache":
            out["page_cache_knob"] = rest.strip().startswith("on")
    return out if "usage" in out and "wedge" in out else None


def engine_starts(journal):
    """The head's journal of the engine's unit (`journalctl -o short-unix`) -> [(epoch, kind)]: kind "start" for each
    start systemd began ("Starting ..."), "gate" for each that passed the memory gate (the engine really started)."""
    out = []
    for line in journal.splitlines():
        stamp, _, rest = line.partition(" ")
        try:
            t = float(stamp)
        except ValueError:
            continue
        if " systemd[1]: Starting " in " " + rest.partition(" ")[2]:
            out.append((t, "start"))
        elif ": memory gate: " in rest:
            out.append((t, "gate"))
    return out


def per_window(times, windows):
    """How many of times fall in each [start, end) of windows."""
    return [sum(1 for t in times if a <= t < b) for a, b in windows]


def supervision_events(text, unit=UNIT):
    """The supervision log's JSON lines of unit, in order (lines that do not parse are skipped)."""
    out = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and (unit is None or entry.get("unit") == unit):
            out.append(entry)
    return out


def reboot_targets(step, hosts):
    """The nodes an escalation's human step says to reboot ("reboot spark-2 and spark-3 (...), then run site.yml"),
    among the lab's hosts, in its order; [] when the step reboots nothing."""
    _before, sep, rest = (step or "").partition("reboot ")
    if not sep:
        return []
    names = rest.split(",")[0].split("(")[0].replace(" and ", " ").split()
    return [n for n in names if n in hosts]


def outcome(row):
    """A fault's outcome from its row: healed by itself, escalated (supervision named the human step), or needed a
    human step the soak chose (not healed within --human-after, or a node found frozen)."""
    if row.get("escalation"):
        return "escalated, human step named: %s" % row["escalation"].get("step", "?")
    if row.get("human"):
        return "needed a human step"
    return "healed by itself"


class Lab:
    """The lab's knobs, through lab/labctl (root namespace steps re-exec themselves there)."""

    def __init__(self, name, tree):
        self.name = name
        self.tree = tree
        self.state = "/var/tmp/sparklab/lab" + ("" if name == "sfl" else "-" + name)
        self.inventory = os.path.join(tree, "inventories", "lab") if name == "sfl" else os.path.join(self.state, "inventory")
        n = int(open(os.path.join(self.state, "nhosts")).read().strip())
        self.hosts = ["spark-%d" % i for i in range(1, n + 1)]
        self.head, self.workers = self.hosts[0], self.hosts[1:]

    def labctl(self, *args, timeout=900):
        t0 = time.time()
        p = subprocess.run([LABCTL, *args], capture_output=True, text=True, timeout=timeout)
        log("labctl %s: rc %d in %.1f s %s" % (" ".join(args), p.returncode, time.time() - t0,
                                               (p.stderr.strip().splitlines() or [""])[-1][:160]))
        return p

    def exec(self, host, script, timeout=300):
        return subprocess.run([LABCTL, "exec", host, "sh", "-c", script], capture_output=True, text=True,
                              timeout=timeout)

    def sh(self, host, script, timeout=60):
        """exec that never raises: a frozen or booting host gives rc 124 and no output."""
        try:
            return self.exec(host, script, timeout=timeout)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess([], 124, "", "timed out after %d s" % timeout)

    def mem(self, host):
        """`labctl mem HOST` parsed (read from the machine's side: answers for a frozen host too); None if it fails."""
        try:
            p = subprocess.run([LABCTL, "mem", host], capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            return None
        return parse_mem(p.stdout) if p.returncode == 0 else None

    def frozen(self):
        """The hosts whose memory is full with the wedge knob on: a GB10 would need a power cycle."""
        return [h for h in self.hosts if (self.mem(h) or {}).get("wedge") == "frozen"]

    def escalation(self, since=0):
        """The head's escalation marker (JSON) when written at or after the epoch second since, or None."""
        text = self.sh(self.head, "cat %s 2>/dev/null || true" % MARKER).stdout.strip()
        try:
            value = json.loads(text) if text else None
        except ValueError:
            return {"reason": "unreadable marker", "step": text[:200]}
        if not isinstance(value, dict) or not isinstance(value.get("time", since), (int, float)):
            return None
        return value if value.get("time", since) >= since else None

    def starts(self, since):
        """The engine's starts since the epoch second since, from the head's journal."""
        p = self.sh(self.head, "journalctl -u %s.service --since @%d -o short-unix --no-pager | "
                    "grep -E 'systemd\\[1\\]: Starting |: memory gate: ' || true" % (UNIT, int(since)), timeout=120)
        return engine_starts(p.stdout)

    def playbook(self, name, timeout, logfile):
        """ansible-playbook of the --tree checkout (already in the control namespace); returns (rc, seconds)."""
        env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(self.tree, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
        t0 = time.time()
        with open(logfile, "a") as out:
            out.write("\n===== %s %s\n" % (time.strftime("%H:%M:%S"), name))
            out.flush()
            try:
                rc = subprocess.run([os.path.join(self.tree, ".venv", "bin", "ansible-playbook"), "-i", self.inventory,
                                     os.path.join(self.tree, name)], cwd=self.tree, env=env, stdout=out,
                                    stderr=subprocess.STDOUT, timeout=timeout).returncode
            except subprocess.TimeoutExpired:
                rc = 124
        return rc, time.time() - t0


# --------------------------------------------------------------------------- faults
class Fault:
    def __init__(self, index, kind, host, planned):
        self.index, self.kind, self.host, self.planned = index, kind, host, planned
        self.t_start = self.t_end = None
        self.detail = ""
        self.undo = None            # the knob that puts the environment back (a flap's cable, a pause), if pending
        self.settled_at = None      # when the soak saw it healed (a run of good answers)
        self.human = []             # human steps taken: (what, seconds, rc)
        self.injected = False
        self.escalation = None      # the head's escalation marker, when supervision escalated in this fault
        self.wedged = []            # nodes found FROZEN after it (each power-cycled: a human step)
        self.starts = None          # the engine's starts in its window (systemd's), and those past the memory gate
        self.gate_starts = None
        self.kills = 0              # leak-worker: engine kills
        self.heal_from = None       # healing is looked for in the answers sent after this (default: its start)

    def row(self):
        return {"index": self.index, "kind": self.kind, "host": self.host, "planned": self.planned,
                "t_start": self.t_start, "t_end": self.t_end, "detail": self.detail, "settled_at": self.settled_at,
                "human": self.human, "injected": self.injected, "escalation": self.escalation, "wedged": self.wedged,
                "starts": self.starts, "gate_starts": self.gate_starts, "kills": self.kills}


def plan(kinds, count, rng):
    """count kinds: every one of kinds once (shuffled) before any comes twice."""
    out = []
    while len(out) < count:
        batch = list(kinds)
        rng.shuffle(batch)
        out += batch
    return out[:count]


def wait_until(predicate, limit, stop, step=5):
    """True as soon as predicate() holds; False past limit seconds or on stop."""
    t0 = time.time()
    while not stop.is_set() and time.time() - t0 < limit:
        if predicate():
            return True
        stop.wait(step)
    return False


def inject_leak(lab, fault, args, stop):
    """The leak knob on the worker at --leak-pct of its memory, then the engine killed after each start (a rank that
    reserved the leak) until supervision escalates or --leak-kills kills; the knob then fixed (what leaked stays)."""
    h = fault.host
    m = lab.mem(h) or {}
    mib = max(1, int(m.get("limit", 0) * args.leak_pct / 100 // MiB))
    p = lab.labctl("break", "leak", h, str(mib))
    if p.returncode != 0:
        return p
    fault.undo = ("fix", "leak", h)
    while lab.escalation(fault.t_start) is None and fault.kills < args.leak_kills and not stop.is_set():
        before = (lab.mem(h) or {}).get("leaked_files", 0)
        lab.labctl("break", "engine", lab.head)
        fault.kills += 1

        def moved(before=before):
            """Supervision escalated, the next start reserved its leak, or a node froze."""
            return (lab.escalation(fault.t_start) is not None
                    or (lab.mem(h) or {}).get("leaked_files", 0) > before or bool(lab.frozen()))

        wait_until(moved, args.leak_wait, stop)
        if lab.frozen():
            break
    lab.labctl(*fault.undo)
    fault.undo = None
    m = lab.mem(h) or {}
    fault.detail = "%d MiB a start, %d kill(s), %d leaked file(s) (%.2f GiB)" % (
        mib, fault.kills, m.get("leaked_files", 0), m.get("leaked_bytes", 0) / 2 ** 30)
    return p


def inject(lab, fault, rng, args=None, stop=None):
    """Inject fault with the lab's knobs; returns when the fault is over (a flap's cable back, a reboot done)."""
    k, h = fault.kind, fault.host
    fault.t_start = time.time()
    if k in ("kill-worker-raylet", "kill-head-raylet"):
        p = lab.labctl("break", "raylet", h)
    elif k == "kill-gcs":
        p = lab.labctl("break", "gcs", h)
    elif k == "kill-engine":
        p = lab.labctl("break", "engine", h)
    elif k == "pause-engine":
        p = lab.labctl("break", "engine-pause", h)
        fault.undo = ("fix", "engine-pause", h)     # left paused: healing it is the supervision's job
    elif k in ("fabric-flap-head", "fabric-flap-worker"):
        secs = rng.randint(20, 60)
        fault.detail = "%d s down" % secs
        p = lab.labctl("break", "fabric-down", h)
        fault.undo = ("fix", "fabric-down", h)
        time.sleep(max(0, secs - (time.time() - fault.t_start)))
        lab.labctl(*fault.undo)
        fault.undo = None
    elif k == "restart-docker":
        p = lab.labctl("break", "docker-restart", h)
    elif k == "reboot-node":
        p = lab.labctl("reboot", h)
        if args is not None and args.uma:
            lab.labctl("break", "wedge", h)          # every boot clears the wedge knob
    elif k == "leak-worker":
        p = inject_leak(lab, fault, args, stop or threading.Event())
        fault.heal_from = time.time()               # the engine served between kills: healed only after the last
    elif k == "page-cache-worker":
        p = lab.labctl("break", "page-cache", h)
        m = lab.mem(h) or {}
        fault.detail = "page cache %.2f GiB, free %.2f of %.2f GiB" % (
            m.get("page_cache", 0) / 2 ** 30, m.get("free", 0) / 2 ** 30, m.get("limit", 0) / 2 ** 30)
        fault.undo = ("fix", "page-cache", h)       # the ballast file goes once the fault healed
        if p.returncode == 0:
            p = lab.labctl("break", "engine", lab.head)
    else:
        raise ValueError(k)
    fault.injected = p.returncode == 0
    if not fault.injected:
        fault.detail = (fault.detail + " injection failed: " + (p.stderr.strip().splitlines() or ["?"])[-1])[:300]
    fault.t_end = time.time()


def pick_host(kind, lab, rng):
    if kind in ("kill-worker-raylet", "fabric-flap-worker", "leak-worker", "page-cache-worker"):
        return rng.choice(lab.workers)
    if kind in ("restart-docker", "reboot-node"):
        return rng.choice(lab.hosts)
    return lab.head


# --------------------------------------------------------------------------- load
class Requests:
    """One completion a second, each in its own thread (a hung API never delays the next one)."""

    def __init__(self, model, key, timeout):
        self.model, self.key, self.timeout = model, key, timeout
        self.rows = []              # [t_sent, seconds, outcome]
        self.lock = threading.Lock()
        self.pool = ThreadPoolExecutor(max_workers=int(timeout) + 8)
        self.n = 0

    def one(self, n):
        t0 = time.time()
        body = json.dumps({"model": self.model, "prompt": "soak %d" % n, "max_tokens": 4}).encode()
        req = urllib.request.Request(API + "/v1/completions", data=body, headers={
            "Content-Type": "application/json", "Authorization": "Bearer " + self.key})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                data = json.loads(r.read().decode() or "{}")
                outcome = "ok" if r.status == 200 and data.get("choices") else "bad-answer"
        except urllib.error.HTTPError as e:
            outcome = "http-%d" % e.code
        except (TimeoutError, OSError) as e:
            reason = getattr(e, "reason", e)
            text = str(reason).lower()
            outcome = ("timeout" if "timed out" in text or isinstance(reason, TimeoutError) else
                       "refused" if "refused" in text else "error: " + str(reason)[:80])
        except Exception as e:  # noqa: BLE001  (any other failure is a failed request, recorded as such)
            outcome = "error: %s" % str(e)[:80]
        with self.lock:
            self.rows.append([t0, time.time() - t0, outcome])

    def tick(self):
        self.n += 1
        self.pool.submit(self.one, self.n)

    def snapshot(self):
        with self.lock:
            return sorted(self.rows)


def healed_since(rows, since, hold):
    """The time of the first good answer of a run of good answers lasting `hold` seconds, all sent after since."""
    run_start = None
    for t, dt, outcome in rows:
        if t < since:
            continue
        if outcome == "ok":
            if run_start is None:
                run_start = t + dt
            if t - run_start >= hold:
                return run_start
        else:
            run_start = None
    return None


# --------------------------------------------------------------------------- status.yml samples
class StatusSampler(threading.Thread):
    def __init__(self, lab, every, logfile, stop):
        super().__init__(daemon=True)
        self.lab, self.every, self.logfile, self.stop = lab, every, logfile, stop
        self.samples = []           # [t0, t1, rc]

    def run(self):
        while not self.stop.is_set():
            t0 = time.time()
            rc, secs = self.lab.playbook("playbooks/status.yml", 300, self.logfile)
            self.samples.append([t0, t0 + secs, rc])
            self.stop.wait(max(1.0, self.every - secs))


def agreement(samples, rows):
    """Each sample against the requests answered while it ran: (sample, truth, agrees); truth None when mixed."""
    out = []
    for t0, t1, rc in samples:
        seen = [o for t, dt, o in rows if t0 <= t + dt <= t1]
        if not seen:
            truth = None
        elif all(o == "ok" for o in seen):
            truth = True
        elif not any(o == "ok" for o in seen):
            truth = False
        else:
            truth = None            # a change of state while status.yml ran: either answer is true
        out.append((t0, t1, rc, truth, truth is None or (rc == 0) == truth))
    return out


# --------------------------------------------------------------------------- model files
HASH = "cd %s 2>/dev/null && find . -type f -print0 | sort -z | xargs -0r sh -c 'for f; do " \
       "printf \"%%s %%s \" \"$(stat -c %%s \"$f\")\" \"$(sha256sum < \"$f\" | cut -c1-64)\"; echo \"$f\"; done' sh"


def model_files(lab, host, path):
    p = lab.exec(host, HASH % path, timeout=600)
    files = {}
    for line in p.stdout.splitlines():
        size, digest, name = line.split(" ", 2)
        files[name] = (int(size), digest)
    return files


def compare_models(reference, nodes):
    """Bytes of the reference lost (missing) or changed on each node."""
    out = {}
    for host, files in nodes.items():
        lost = sum(s for n, (s, d) in reference.items() if n not in files)
        changed = sum(s for n, (s, d) in reference.items() if n in files and files[n] != (s, d))
        out[host] = {"files": len(files), "bytes_lost": lost, "bytes_changed": changed}
    return out


# --------------------------------------------------------------------------- report
def fault_stats(faults, rows, end, victims=12.0):
    """Per fault, from the request log: failed requests in its window (its start to the next fault's), and the
    seconds from its end to the first good answer after the last failure of the window (failures sent in the last
    `victims` seconds before the next fault may be that fault's: they do not count for this one's healing). With a
    human step, the healing is the soak's own observation: the first answer of the run of good answers it waited for
    (the human step's own restarts fail requests too)."""
    stats = []
    injected = [f for f in faults if f.t_start is not None]
    for i, f in enumerate(injected):
        last = i + 1 == len(injected)
        w_end = end if last else injected[i + 1].t_start
        window = [r for r in rows if f.t_start <= r[0] < w_end]
        failed = [r for r in window if r[2] != "ok"]
        recovery = 0.0
        if failed and f.human and f.settled_at:
            recovery = f.settled_at - f.t_end
        elif failed:
            mine = [r for r in failed if last or r[0] < w_end - victims] or failed
            last_fail = max(r[0] + r[1] for r in mine)
            good = [r[0] + r[1] for r in window if r[2] == "ok" and r[0] + r[1] >= last_fail]
            recovery = (min(good) - f.t_end) if good else None
        stats.append({"fault": f, "requests": len(window), "failed": len(failed),
                      "kinds": sorted({r[2] for r in failed}), "recovery_s": recovery})
    return stats


def chart(path, t0, rows, faults, samples, title):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(13, 5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    bins = {}
    for t, dt, o in rows:
        b = int((t - t0) // 10)
        ok, n = bins.get(b, (0, 0))
        bins[b] = (ok + (o == "ok"), n + 1)
    xs = sorted(bins)
    human_labelled = False
    ax.step([(b * 10) / 60 for b in xs], [100.0 * bins[b][0] / bins[b][1] for b in xs], where="post",
            color="tab:blue", linewidth=1.2, label="requests answered (10 s bins)")
    for f in faults:
        if not f.t_start:
            continue
        a, b = (f.t_start - t0) / 60, (max(f.t_end, f.t_start + 5) - t0) / 60
        ax.axvspan(a, b, color="tab:red", alpha=0.25)
        ax.annotate("%d %s\n%s" % (f.index, f.kind, f.host), xy=(a, 3), fontsize=7, rotation=90, va="bottom",
                    color="darkred")
        for what, secs, rc, when in f.human:
            ax.axvline((when - t0) / 60, color="black", linestyle="--", linewidth=1,
                       label="human step (%s)" % what if not human_labelled else None)
            human_labelled = True
    if samples:
        ax.scatter([(s[0] - t0) / 60 for s in samples], [104 if s[2] == 0 else 101 for s in samples], s=8,
                   c=["tab:green" if s[2] == 0 else "tab:orange" for s in samples],
                   label="status.yml sample (top: exit 0, lower: non-zero)")
    ax.set_ylim(0, 108)
    ax.set_xlabel("minutes since the start")
    ax.set_ylabel("% of requests answered")
    ax.set_title(title, fontsize=9)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=3, fontsize=7, frameon=False)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def uma_cells(f):
    """The unified memory columns of a fault's row: outcome, engine starts (past the gate), frozen nodes."""
    starts = "?" if f.starts is None else "%d (%s)" % (f.starts, "?" if f.gate_starts is None else f.gate_starts)
    return " %s | %s | %s |" % (outcome(f.row()), starts, ", ".join(f.wedged) or "0")


def report(args, lab, meta, faults, rows, samples, models, out):
    end = meta["t_end"]
    stats = fault_stats(faults, rows, end)
    agree = agreement(samples, rows)
    ok = sum(1 for r in rows if r[2] == "ok")
    answered = 100.0 * ok / len(rows) if rows else 0.0
    lost = sum(v["bytes_lost"] + v["bytes_changed"] for v in models.get("nodes", {}).values())
    recovered = [s for s in stats if s["recovery_s"] is not None and s["recovery_s"] <= args.target_recovery
                 and not s["fault"].human]
    humans = [s for s in stats if s["fault"].human and not s["fault"].escalation]
    escalated = [s for s in stats if s["fault"].escalation]
    uma = bool(meta.get("args", {}).get("uma"))
    wedged = sorted({h for s in stats for h in (s["fault"].wedged or [])} | set(meta.get("frozen_at_end") or []))
    starts = [s["fault"].starts for s in stats if s["fault"].starts is not None]
    lines = ["# Chaos soak, lab %s, %s" % (lab.name, meta["date"]), "",
             "- tree: %s (commit %s); machine: %s" % (lab.tree, meta["commit"], meta["machine"]),
             "- load average: %s at the start, %s at the end (1-min samples: min %.1f, mean %.1f, max %.1f)" % (
                 meta["load_start"], meta["load_end"], min(meta["loads"] or [0]),
                 sum(meta["loads"] or [0]) / max(1, len(meta["loads"])), max(meta["loads"] or [0])),
             "- %d s, a fault every %d s (seed %d), one request a second (timeout %d s)" % (
                 args.duration, args.every, args.seed, args.request_timeout), "",
             "| # | fault | node | detail | requests | failed | back after (s) | human step |%s" % (
                 " outcome | engine starts (past the gate) | frozen nodes |" if uma else ""),
             "|---|---|---|---|---|---|---|---|%s" % ("---|---|---|" if uma else "")]
    for s in stats:
        f = s["fault"]
        lines.append("| %d | %s | %s | %s | %d | %d%s | %s | %s |%s" % (
            f.index, f.kind, f.host, f.detail or "-", s["requests"], s["failed"],
            (" (" + ", ".join(s["kinds"]) + ")") if s["kinds"] else "",
            "never" if s["recovery_s"] is None else "%.0f" % max(0.0, s["recovery_s"]),
            "; ".join("%s (%.0f s, rc %s)" % (w, secs, rc) for w, secs, rc, _ in f.human) or "none",
            uma_cells(f) if uma else ""))
    judged = [a for a in agree if a[3] is not None]
    lines += ["",
              "| figure | value | target |", "|---|---|---|",
              "| requests answered | %.2f %% (%d of %d) | >= 99 %% |" % (answered, ok, len(rows)),
              "| faults healed by themselves within %d s | %d of %d | all |" % (
                  args.target_recovery, len(recovered), len(stats)),
              "| faults needing a human step (not named by supervision) | %d | 0 |" % len(humans),
              "| model bytes lost or changed (every node vs the head at the start) | %d | 0 |" % lost,
              "| status.yml samples agreeing with the requests | %d of %d (%d more taken during a change) | all |" % (
                  sum(1 for a in judged if a[4]), len(judged), len(agree) - len(judged))]
    if uma:
        lines[-1:-1] = [
            "| faults escalated by supervision, human step named | %d%s | - |" % (len(escalated), "".join(
                "; #%d: %s" % (s["fault"].index, s["fault"].escalation.get("step", "?")) for s in escalated)),
            "| wedged (FROZEN) nodes, after any fault or at the end | %d%s | 0 |" % (
                len(wedged), (" (" + ", ".join(wedged) + ")") if wedged else ""),
            "| most engine starts in one fault's window (systemd's, journal of %s) | %s | bounded |" % (
                UNIT, max(starts) if starts else "?")]
    disagree = [a for a in judged if not a[4]]
    if disagree:
        lines += ["", "status.yml disagreed at: " + ", ".join(
            "+%.0f s (rc %d, requests %s)" % (a[0] - meta["t_start"], a[2], "answered" if a[3] else "failed")
            for a in disagree[:20])]
    lines += ["", "Per node, model files against the head's at the start: " + ", ".join(
        "%s %d files, %d bytes lost, %d changed" % (h, v["files"], v["bytes_lost"], v["bytes_changed"])
        for h, v in sorted(models.get("nodes", {}).items())), "", "![availability](availability.png)", ""]
    text = "\n".join(lines)
    open(os.path.join(out, "report.md"), "w").write(text)
    summary = {"answered_pct": round(answered, 3), "requests": len(rows), "ok": ok, "faults": len(stats),
               "healed_within_target": len(recovered), "human_steps": len(humans), "model_bytes_lost_or_changed": lost,
               "status_samples": len(agree), "status_judged": len(judged), "models": models,
               "status_agree": sum(1 for a in judged if a[4]), "meta": meta, "uma": uma,
               "escalations": [dict({k: s["fault"].escalation.get(k) for k in ("reason", "step", "nodes")},
                                    fault=s["fault"].index, kind=s["fault"].kind) for s in escalated],
               "wedged_nodes": len(wedged), "wedged": wedged, "max_starts_in_a_fault": max(starts) if starts else None,
               "per_fault": [dict(s["fault"].row(), requests=s["requests"], failed=s["failed"],
                                  failed_kinds=s["kinds"], recovery_s=s["recovery_s"],
                                  outcome=outcome(s["fault"].row())) for s in stats]}
    json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1, default=str)
    chart(os.path.join(out, "availability.png"), meta["t_start"], rows, faults, samples,
          "soak, lab %s, commit %s, %s: %.2f %% answered, %d faults, %d human steps%s" % (
              lab.name, meta["commit"], meta["date"], answered, len(stats), len(humans),
              ", %d escalated with the step named, %d nodes frozen" % (len(escalated), len(wedged)) if uma else ""))
    return text, summary


# --------------------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=int, default=3600, help="seconds of load (<= %d)" % MAX_DURATION)
    ap.add_argument("--every", type=int, default=300, help="seconds between faults")
    ap.add_argument("--faults", help="kinds to draw from (default: all; without --uma all but %s): %s" % (
        ", ".join(UMA_KINDS), ", ".join(KINDS)))
    ap.add_argument("--seed", type=int, default=18)
    ap.add_argument("--request-timeout", type=int, default=10)
    ap.add_argument("--hold", type=int, default=60, help="seconds of good answers that count as healed")
    ap.add_argument("--human-after", type=int, default=300,
                    help="seconds after a fault's end without healing before the soak takes a human step")
    ap.add_argument("--target-recovery", type=int, default=120, help="the figure's bound (s) on healing by itself")
    ap.add_argument("--status-every", type=int, default=30, help="seconds between status.yml samples (0: none)")
    ap.add_argument("--tree", default=REPO, help="the checkout whose status.yml and site.yml are run (the deployed one)")
    ap.add_argument("--model", default="sparklab/tiny-moe")
    ap.add_argument("--model-dir", default="/models/sparklab-tiny")
    ap.add_argument("--out", help="output directory (default /var/tmp/sparkfleet-soak/<lab>-<time>)")
    ap.add_argument("--replot", metavar="DIR", help="write DIR's report and chart again from a finished soak's files"
                    " (a soak before the arguments were recorded: give its --duration, --every, --seed)")
    ap.add_argument("--uma", action=argparse.BooleanOptionalAction, default=None,
                    help="the unified memory model: wedge knob on every host for the run, the %s kinds, frozen nodes"
                         " and engine starts counted (default: on when `labctl mem` shows the hosts with a memory"
                         " limit)" % " and ".join(UMA_KINDS))
    ap.add_argument("--leak-pct", type=int, default=20,
                    help="leak-worker: MiB leaked a start, in %% of the worker's memory")
    ap.add_argument("--leak-kills", type=int, default=4, help="leak-worker: at most this many engine kills")
    ap.add_argument("--leak-wait", type=int, default=240,
                    help="leak-worker: seconds to wait after a kill for the next start (a new leak) or an escalation")
    ap.add_argument("--in-ctl", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.replot:
        return replot(args.replot, args)
    name = os.environ.get("SPARKLAB_NAME") or "sfl"
    if not 60 <= args.duration <= MAX_DURATION or args.every < 30:
        sys.exit("soak: --duration must be 60..%d s and --every >= 30 s" % MAX_DURATION)
    kinds = [k.strip() for k in (args.faults or ",".join(KINDS)).split(",") if k.strip()]
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        sys.exit("soak: unknown fault kind(s) %s; known: %s" % (", ".join(bad), ", ".join(KINDS)))
    if not 1 <= args.leak_pct <= 50 or not 1 <= args.leak_kills <= 10 or not 30 <= args.leak_wait <= 900:
        sys.exit("soak: --leak-pct must be 1..50, --leak-kills 1..10, --leak-wait 30..900")
    args.tree = os.path.abspath(args.tree)
    if not args.in_ctl:
        # The requests and playbooks run in the lab's control namespace (no default route: lab addresses only).
        os.execv(LABCTL, [LABCTL, "ctl", "--", sys.executable, os.path.abspath(__file__), "--in-ctl"] + sys.argv[1:])

    lab = Lab(name, args.tree)
    limits = [(lab.mem(h) or {}).get("limit", 0) for h in lab.hosts]
    if args.uma is None:
        args.uma = all(limits)
    elif args.uma and not all(limits):
        sys.exit("soak: --uma: the lab's hosts have no memory limit (labctl mem %s); bring the lab up with "
                 "SPARKLAB_HOST_MEM set" % lab.hosts[0])
    if not args.uma:
        if args.faults and any(k in UMA_KINDS for k in kinds):
            sys.exit("soak: %s need --uma (the lab's unified memory model)" % ", ".join(UMA_KINDS))
        kinds = [k for k in kinds if k not in UMA_KINDS]
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = os.path.abspath(args.out or os.path.join("/var/tmp/sparkfleet-soak", "%s-%s" % (name, stamp)))
    os.makedirs(out, exist_ok=True)
    rng = random.Random(args.seed)
    key = open(API_KEY_FILE).read().strip()
    count = max(0, -(-(args.duration - args.every // 2) // args.every))   # faults due before the end
    faults = []
    for i, kind in enumerate(plan(kinds, count, rng)):
        faults.append(Fault(i + 1, kind, pick_host(kind, lab, rng), args.every // 2 + i * args.every))
    meta = {"lab": name, "tree": args.tree, "commit": commit_of(args.tree), "machine": machine(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "load_start": " ".join(open("/proc/loadavg").read().split()[:3]), "loads": [],
            "args": {k: getattr(args, k) for k in ("duration", "every", "seed", "request_timeout", "target_recovery",
                                                    "hold", "human_after", "status_every", "faults", "uma",
                                                    "leak_pct", "leak_kills", "leak_wait")},
            "host_memory": dict(zip(lab.hosts, limits))}
    meta["args"]["faults"] = ",".join(kinds)
    log("lab %s (%s), tree %s @ %s; %d faults: %s; out %s" % (
        name, ", ".join(lab.hosts), args.tree, meta["commit"], len(faults),
        ", ".join("%s@%s" % (f.kind, f.host) for f in faults), out))

    log("hashing the model on every node (the reference: the head's)")
    reference = model_files(lab, lab.head, args.model_dir)
    if not reference:
        sys.exit("soak: no model files under %s on %s" % (args.model_dir, lab.head))
    load = Requests(args.model, key, args.request_timeout)
    stop = threading.Event()
    stopped = {"signal": None}

    def on_signal(signum, _frame):
        stopped["signal"] = signum
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    def ticker():
        nxt = time.time()
        while not stop.is_set() and time.time() < meta["t_start"] + args.duration:
            load.tick()
            nxt += 1.0
            stop.wait(max(0.0, nxt - time.time()))

    def loads():
        while not stop.is_set():
            meta["loads"].append(os.getloadavg()[0])
            stop.wait(30)

    meta["t_start"] = time.time()
    threads = [threading.Thread(target=ticker, daemon=True), threading.Thread(target=loads, daemon=True)]
    sampler = StatusSampler(lab, args.status_every, os.path.join(out, "status.log"), stop) if args.status_every else None
    for t in threads + ([sampler] if sampler else []):
        t.start()
    current = None
    try:
        if args.uma:
            uma_on(lab)
        for f in faults:
            due = meta["t_start"] + f.planned
            # never on top of an earlier fault that has not healed (its human step included)
            while not stop.is_set() and time.time() < due:
                stop.wait(min(5, due - time.time()))
            if stop.is_set() or time.time() >= meta["t_start"] + args.duration:
                break
            current = f
            log("fault %d: %s on %s" % (f.index, f.kind, f.host))
            inject(lab, f, rng, args, stop)
            deadline, rounds, checked = f.t_end + args.human_after, 0, 0.0
            # the load ends with the duration: past it, nothing more can be learnt about this fault
            while not stop.is_set() and time.time() < meta["t_start"] + args.duration:
                healed = healed_since(load.snapshot(), f.heal_from or f.t_start, args.hold)
                if healed is not None and not (f.escalation and not f.human):
                    f.settled_at = healed
                    log("fault %d healed: good answers since %+.0f s after its end" % (f.index, healed - f.t_end))
                    break
                if args.uma and time.time() - checked >= 15:
                    checked = time.time()
                    if f.escalation is None:
                        f.escalation = lab.escalation(f.t_start)
                    if f.escalation and not f.human:
                        log("fault %d: supervision escalated (%s); human step named: %s" % (
                            f.index, f.escalation.get("reason"), f.escalation.get("step")))
                        named_step(lab, f, out, args)
                        deadline = time.time() + args.human_after
                        continue
                    frozen = lab.frozen()
                    if frozen:
                        power_cycle(lab, f, frozen, out, args)
                        deadline = time.time() + args.human_after
                        continue
                if time.time() >= deadline:
                    human_step(lab, f, out, args)
                    rounds += 1
                    deadline = time.time() + args.human_after
                    if rounds >= 2:
                        log("fault %d: not healed after two human steps; going on" % f.index)
                        break
                stop.wait(5)
            if f.undo and f.kind == "page-cache-worker":
                lab.labctl(*f.undo)
                f.undo = None
            if args.uma:
                after_fault(lab, f, out, args)
            current = None
        while not stop.is_set() and time.time() < meta["t_start"] + args.duration:
            stop.wait(5)
    finally:
        stop.set()
        if current is not None and current.undo:
            lab.labctl(*current.undo)
        if args.uma:
            meta["frozen_at_end"] = lab.frozen()
            last = ([f for f in faults if f.t_start is not None] or [None])[-1]
            if last is not None and not stopped["signal"]:
                # the load ended while the last fault was still under way: its escalation (or a frozen node) gets the
                # human step all the same (bounded), so the lab is left serving
                last.escalation = last.escalation or lab.escalation(last.t_start)
                if meta["frozen_at_end"]:
                    power_cycle(lab, last, meta["frozen_at_end"], out, args)
                elif last.escalation and not last.human:
                    named_step(lab, last, out, args)
            uma_off(lab)
        for t in threads:
            t.join(timeout=60)
        load.pool.shutdown(wait=True)
        if sampler:
            sampler.join(timeout=400)
    meta["t_end"] = time.time()
    meta["load_end"] = " ".join(open("/proc/loadavg").read().split()[:3])
    if stopped["signal"]:
        meta["stopped_by_signal"] = stopped["signal"]
    log("hashing the model on every node")
    nodes = {h: model_files(lab, h, args.model_dir) for h in lab.hosts}
    models = {"reference_files": len(reference), "reference_bytes": sum(s for s, _ in reference.values()),
              "nodes": compare_models(reference, nodes)}
    if args.uma:
        uma_record(lab, meta, faults, out)
    rows = load.snapshot()
    with open(os.path.join(out, "requests.csv"), "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["t_sent", "seconds", "outcome"])
        w.writerows([["%.3f" % r[0], "%.3f" % r[1], r[2]] for r in rows])
    samples = sampler.samples if sampler else []
    with open(os.path.join(out, "status.csv"), "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["t_start", "t_end", "rc", "requests_answered", "agrees"])
        for a in agreement(samples, rows):
            w.writerow(["%.1f" % a[0], "%.1f" % a[1], a[2], "" if a[3] is None else a[3], a[4]])
    json.dump([f.row() for f in faults], open(os.path.join(out, "faults.json"), "w"), indent=1)
    text, _ = report(args, lab, meta, faults, rows, samples, models, out)
    print(text)
    log("written: %s" % out)


def replot(out, args):
    """The report and the chart again, from requests.csv, faults.json, status.csv and summary.json."""
    summary = json.load(open(os.path.join(out, "summary.json")))
    meta = summary["meta"]
    for key in ("duration", "every", "seed", "request_timeout", "target_recovery"):
        setattr(args, key, meta.get("args", {}).get(key, getattr(args, key)))
    with open(os.path.join(out, "requests.csv")) as fh:
        rows = [[float(r["t_sent"]), float(r["seconds"]), r["outcome"]] for r in csv.DictReader(fh)]
    with open(os.path.join(out, "status.csv")) as fh:
        samples = [[float(r["t_start"]), float(r["t_end"]), int(r["rc"])] for r in csv.DictReader(fh)]
    faults = []
    for row in json.load(open(os.path.join(out, "faults.json"))):
        f = Fault(row["index"], row["kind"], row["host"], row["planned"])
        f.t_start, f.t_end, f.human = row["t_start"], row["t_end"], row["human"]
        f.settled_at, f.detail, f.injected = row.get("settled_at"), row.get("detail", ""), row.get("injected")
        f.escalation, f.wedged, f.kills = row.get("escalation"), row.get("wedged") or [], row.get("kills", 0)
        f.starts, f.gate_starts = row.get("starts"), row.get("gate_starts")
        faults.append(f)
    lab = argparse.Namespace(name=meta["lab"], tree=meta["tree"])
    models = summary.get("models") or {"nodes": {}}
    text, _ = report(args, lab, meta, faults, rows, samples, models, out)
    print(text)
    log("written again: %s" % out)


def human_step(lab, f, out, args):
    """What an operator does when the API stays down: undo a pause, then run site.yml (bounded)."""
    log("fault %d: not healed %d s after its end: human step" % (f.index, args.human_after))
    t0 = time.time()
    if f.undo:
        lab.labctl(*f.undo)
        f.human.append(("labctl " + " ".join(f.undo[:2]), time.time() - t0, 0, t0))
        f.undo = None
        t0 = time.time()
    rc, secs = lab.playbook("site.yml", 900, os.path.join(out, "human-steps.log"))
    f.human.append(("site.yml", secs, rc, t0))
    log("fault %d: site.yml rc %d in %.0f s" % (f.index, rc, secs))


def reboot_and_rearm(lab, f, hosts, args):
    """labctl reboot of each host (a lab power cycle), then the wedge knob on it again (a boot clears it)."""
    for h in hosts:
        t0 = time.time()
        p = lab.labctl("reboot", h)
        f.human.append(("labctl reboot %s" % h, time.time() - t0, p.returncode, t0))
        if args.uma:
            lab.labctl("break", "wedge", h)


def named_step(lab, f, out, args):
    """Supervision escalated: do the human step it named (reboot the nodes it names, then site.yml, bounded)."""
    step = f.escalation.get("step") or ""
    targets = reboot_targets(step, lab.hosts)
    log("fault %d: doing the named step: %s" % (f.index, ", ".join("reboot " + h for h in targets) + ", site.yml"
                                                 if targets else "site.yml"))
    f.heal_from = time.time()
    reboot_and_rearm(lab, f, targets, args)
    t0 = time.time()
    rc, secs = lab.playbook("site.yml", 900, os.path.join(out, "human-steps.log"))
    f.human.append(("site.yml", secs, rc, t0))
    log("fault %d: site.yml rc %d in %.0f s" % (f.index, rc, secs))


def power_cycle(lab, f, frozen, out, args):
    """A node froze (a wedged GB10: sshd dead): what an operator must do, a power cycle and site.yml; counted."""
    log("fault %d: FROZEN: %s; power-cycling it (a human step)" % (f.index, ", ".join(frozen)))
    f.wedged = sorted(set(f.wedged) | set(frozen))
    f.heal_from = time.time()
    reboot_and_rearm(lab, f, frozen, args)
    t0 = time.time()
    rc, secs = lab.playbook("site.yml", 900, os.path.join(out, "human-steps.log"))
    f.human.append(("site.yml", secs, rc, t0))


def after_fault(lab, f, out, args):
    """After a fault: the nodes frozen now (power-cycled, counted), an escalation not yet seen, the engine's starts."""
    frozen = lab.frozen()
    if frozen:
        power_cycle(lab, f, frozen, out, args)
    if f.escalation is None:
        f.escalation = lab.escalation(f.t_start)
        if f.escalation:
            log("fault %d: supervision escalated after it healed (%s); step %s" % (
                f.index, f.escalation.get("reason"), f.escalation.get("step")))
            named_step(lab, f, out, args)
    seen = lab.starts(f.t_start)
    f.starts = sum(1 for _t, k in seen if k == "start")
    f.gate_starts = sum(1 for _t, k in seen if k == "gate")
    log("fault %d: %d start(s) of the engine since it began (%d past the memory gate); frozen: %s" % (
        f.index, f.starts, f.gate_starts, ", ".join(f.wedged) or "none"))


def uma_record(lab, meta, faults, out):
    """At the end: the engine's starts in every fault's window (its start to the next one's) from the head's journal
    (kept as starts.json; a count taken right after the fault is kept where it is higher: a head reboot may have
    taken the journal), and the head's supervision log of the run (supervision-spark-1.jsonl)."""
    seen = lab.starts(meta["t_start"])
    json.dump(seen, open(os.path.join(out, "starts.json"), "w"))
    done = [f for f in faults if f.t_start is not None]
    windows = [(f.t_start, done[i + 1].t_start if i + 1 < len(done) else meta["t_end"]) for i, f in enumerate(done)]
    starts = per_window([t for t, k in seen if k == "start"], windows)
    gates = per_window([t for t, k in seen if k == "gate"], windows)
    for f, n, g in zip(done, starts, gates):
        f.starts, f.gate_starts = max(n, f.starts or 0), max(g, f.gate_starts or 0)
    text = lab.sh(lab.head, "cat %s 2>/dev/null || true" % SUPERVISION_LOG).stdout
    with open(os.path.join(out, "supervision-spark-1.jsonl"), "w") as fh:
        for e in supervision_events(text, unit=None):
            if e.get("time", 0) >= meta["t_start"] - 5:
                fh.write(json.dumps(e) + "\n")


def uma_on(lab):
    """The wedge knob on every host: past its memory a host freezes (a GB10) instead of an OOM kill."""
    for h in lab.hosts:
        lab.labctl("break", "wedge", h)


def uma_off(lab):
    """Undo every memory knob the soak may have left: wedge off, no leak, no ballast."""
    for h in lab.hosts:
        lab.labctl("fix", "wedge", h)
        lab.labctl("fix", "leak", h)
        lab.labctl("fix", "page-cache", h)


if __name__ == "__main__":
    main()
