# sparkfleet-watchdog: restart what systemd sees running but is dead (installed by the sparkfleet.vllm roles as
# /usr/local/lib/sparkfleet-watchdog.py, run as `/usr/bin/python3 /usr/local/lib/sparkfleet-watchdog.py ...`).
#   sparkfleet-watchdog ray --unit U --container C --address HEAD:PORT --node-ip IP [--head] [--grace S] [--checks N]
#                           [--pg-stuck S] [--pg-stuck-leak S]
#       Ray's unit is active, but the node is dead in Ray: the raylet (or the head's GCS) is gone while
#       `ray start --block` lingers, or the GCS lists this node's IP as dead. N checks in a row -> restart the unit.
#       At once (within the grace too): the head's GCS answers with a new cluster id and does not know this node (the
#       head's Ray restarted; a raylet never joins a new cluster).
#       On the head also: Ray's scheduler stuck (a placement group pending --pg-stuck seconds while the free GPUs would
#       hold it) -> restart the head's unit (a new GCS; the workers' raylets follow it); twice as long next time unless
#       the restart placed the GPUs again. --pg-stuck-leak seconds instead once the GCS logged the stuck scheduler's
#       mark (it failed to remove a dead node's bundles).
#       Nothing is judged while a deploy restarts the unit: ray_cluster's handlers touch /run/sparkfleet-watchdog-hold-U
#       before they restart Ray (head first, then the workers) and remove it after; a hold older than HOLD_MAX seconds
#       (a run that died in between) is ignored.
#   sparkfleet-watchdog vllm --unit U --container C --url URL --model M --env-file F [--timeout S] [--failures N]
#                            [--start-grace S]
#       vLLM's unit is active, but no token comes back: N real one-token completions in a row failed within their
#       deadline -> restart the unit. A start that has not served yet is not judged before --start-grace seconds (an
#       11-minute weight load is not killed). The API key is read from the root-only env file, never an argument.
#       With --incidents-keep N, before restarting an engine whose container runs (not paused), an incident is saved on
#       the head: every node's engine and Ray worker stacks and their evidence (see save_incident), the newest N kept.
#   sparkfleet-watchdog record --unit U     (the units' ExecStopPost: why the unit stopped, from systemd's variables)
# Run by the sparkfleet-*-watchdog timers. Every restart and stop is one JSON line in
# /var/lib/sparkfleet/watchdog/supervision.log (what playbooks/status.yml shows as "last restarts and why"; best effort) and in the
# journal of the service that ran it.
import argparse
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request


def _load_memory():
    """sparkfleet_memory.py, installed beside this file (no bytecode left behind: the tests run it from role files)."""
    import importlib.util
    sys.dont_write_bytecode = True
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sparkfleet_memory.py")
    spec = importlib.util.spec_from_file_location("sparkfleet_memory", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load_model():
    """sparkfleet_model.py (the model's manifest and its stat check), which the model_sync role installs beside this
    file; None where it is not there yet (a node the sync has not reached): the model is then not checked."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sparkfleet_model.py")
    if not os.path.exists(path):
        return None
    sys.dont_write_bytecode = True
    spec = importlib.util.spec_from_file_location("sparkfleet_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MEM = _load_memory()
MODEL = _load_model()
STATE_DIR = os.environ.get("SPARKFLEET_WATCHDOG_DIR", "/var/lib/sparkfleet/watchdog")
RUN_DIR = os.environ.get("SPARKFLEET_WATCHDOG_RUN_DIR", "/run")    # tmpfs: a hold never outlives a reboot
# What model_sync left on this node (model_manifest writes it; sparkfleet_model.py compares the files with it)
MODEL_MANIFEST = os.environ.get("SPARKFLEET_MODEL_MANIFEST", "/var/lib/sparkfleet/model-manifest.json")
HOLD_MAX = 300            # seconds a deploy's hold counts (Ray's restart by the handlers: the head, its port, workers)
LOG_NAME = "supervision.log"
WAIT_BIN = "/usr/local/sbin/sparkfleet-wait"    # bounded waits (installed beside this script)
LOG_KEEP = 400            # lines kept when the log is trimmed (at twice that)

# Sent to the Ray container's Python: this node's state as the GCS has it, without joining the cluster as a driver.
GCS_PROGRAM = r'''
import json, os, sys, threading


def give_up():
    print(json.dumps({"ok": False, "error": "no answer from the GCS at %s within %s s" % (sys.argv[1], sys.argv[2])}))
    sys.stdout.flush()
    os._exit(0)


threading.Timer(float(sys.argv[2]), give_up).start()
try:
    from ray._raylet import GcsClient
    client = GcsClient(address=sys.argv[1])
    infos = client.get_all_node_info(timeout=float(sys.argv[2]))
    nodes = [{"ip": i.node_manager_address, "alive": int(i.state) == 0} for i in infos.values()]
    try:
        cluster = client.cluster_id.hex()
    except Exception:
        cluster = None
    out = {"ok": True, "nodes": nodes, "cluster": cluster}
    # the memory reports every node publishes, and the gate's requests (Ray's internal KV, namespace sparkfleet)
    ops = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    ns, kv = b"sparkfleet", {}
    for key, value in (ops.get("put") or {}).items():
        client.internal_kv_put(key.encode(), value.encode(), True, ns, timeout=float(sys.argv[2]))
    keys = [k.encode() for k in ops.get("get") or []]
    if ops.get("prefix"):
        keys += client.internal_kv_keys(ops["prefix"].encode(), ns, timeout=float(sys.argv[2]))
    if keys:
        got = client.internal_kv_multi_get(keys, ns, timeout=float(sys.argv[2]))
        kv = {k.decode(): v.decode("utf-8", "replace") for k, v in got.items() if v is not None}
    out["kv"] = kv
    print(json.dumps(out))
except Exception as e:
    print(json.dumps({"ok": False, "error": ("%s: %s" % (type(e).__name__, e)).strip()[:400]}))
sys.stdout.flush()
os._exit(0)
'''


def now():
    return time.time()


def run(argv, timeout=60, stdin=None):
    """(rc, stdout, stderr); rc 124 on a timeout, 127 when the program is missing."""
    try:
        p = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout,
                           env=dict(os.environ, LC_ALL="C"), check=False)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return 124, "", "timed out after %s s" % timeout
    except OSError as e:
        return 127, "", str(e)


def log_event(unit, event, cause, **extra):
    """One JSON line on stdout (the journal of the service that runs this) and in the supervision log. The log is best
    effort: a full disk must never keep the watchdog from acting (it acts after logging)."""
    entry = dict({"time": round(now(), 1), "unit": unit, "event": event, "cause": cause}, **extra)
    line = json.dumps(entry, sort_keys=True)
    print(line)
    sys.stdout.flush()
    path = os.path.join(STATE_DIR, LOG_NAME)
    try:
        os.makedirs(STATE_DIR, mode=0o700, exist_ok=True)
        with open(path, "a") as fh:
            fh.write(line + "\n")
        with open(path) as fh:
            lines = fh.readlines()
        if len(lines) > 2 * LOG_KEEP:
            tmp = path + ".tmp"
            with open(tmp, "w") as fh:
                fh.writelines(lines[-LOG_KEEP:])
            os.replace(tmp, path)
    except OSError as e:
        sys.stderr.write("sparkfleet-watchdog: %s not written (%s); acting anyway\n" % (path, e))


def state_path(unit):
    """A unit's watchdog state (its counters) lives in /run: tmpfs, written even when the disk is full (a full disk once
    killed both watchdogs at every check, so a hung engine was never restarted), and per boot, as the runs it counts."""
    return os.path.join(RUN_DIR, "sparkfleet", "watchdog-%s.json" % unit)


def load_state(unit):
    try:
        state = _load_memory().read_json_file(state_path(unit))
    except (OSError, ValueError, RecursionError):
        return {}
    return state if isinstance(state, dict) else {}


def save_state(unit, state):
    path = state_path(unit)
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        with open(path + ".tmp", "w") as fh:
            json.dump(state, fh)
        os.replace(path + ".tmp", path)
    except OSError as e:
        sys.stderr.write("sparkfleet-watchdog: %s not written (%s)\n" % (path, e))


def unit_run(unit):
    """(running, start) of the unit's current run: start is its main process's start (monotonic seconds), which names
    the run (a restart starts a new one)."""
    out = run(["systemctl", "show", "-p", "ActiveState,SubState,ExecMainStartTimestampMonotonic,ExecMainPID",
               unit + ".service"])[1]
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    running = props.get("ActiveState") == "active" and props.get("SubState") == "running"
    start = int(props.get("ExecMainStartTimestampMonotonic") or 0) / 1e6
    return running, start


def deploy_hold(unit):
    """Seconds left of a deploy's hold on judging the unit (0: none). A deploy that restarts Ray's head and then its
    workers would otherwise see the workers' watchdog restart them in between (the new head's GCS does not know them
    yet), and its own restart of the worker a second later kill the run that had just joined: the cluster check then
    pins a task to a node that is gone."""
    try:
        age = now() - os.stat(os.path.join(RUN_DIR, "sparkfleet-watchdog-hold-%s" % unit)).st_mtime
    except OSError:
        return 0
    return HOLD_MAX - age if 0 <= age < HOLD_MAX else 0     # from the future (the clock set back): none


def restart(unit, cause, state, **extra):
    """Restart the unit for cause, unless the run that was judged (state["start"]) is no longer the unit's current run:
    a deploy or systemd stopped or restarted it while it was being checked (a probe takes up to its timeout), and a
    restart now would kill a new run that nobody judged, or start a unit that was stopped. True when it restarted."""
    running, start = unit_run(unit)
    if not running or start != state.get("start"):
        state.update(bad=0)
        return False
    log_event(unit, "restart", cause, by="watchdog", **extra)
    # --no-block: vLLM's start waits up to its cluster timeout for the GPUs; the watchdog must not wait with it.
    run(["systemctl", "reset-failed", unit + ".service"])
    rc, _out, err = run(["systemctl", "restart", "--no-block", unit + ".service"])
    if rc != 0:
        log_event(unit, "restart-failed", "systemctl restart: %s" % err.strip()[:200], by="watchdog")
    state.update(bad=0, last_restart=round(now(), 1))
    return True


# --------------------------------------------------------------------------- Ray
def container_processes(container):
    """The command names running in the container, or None when it does not run."""
    rc, out, _err = run(["docker", "top", container, "-eo", "pid,comm"], timeout=30)
    if rc != 0:
        return None
    return {line.split(None, 1)[1].strip() for line in out.splitlines()[1:] if len(line.split(None, 1)) == 2}


def docker_answers():
    """Whether dockerd answers (a restart of dockerd with live-restore leaves the containers running meanwhile)."""
    return run(["docker", "version", "--format", "{{.Server.Version}}"], timeout=30)[0] == 0


def gcs_nodes(container, address, timeout, ops=None):
    """The GCS's view of the nodes ({"ok", "nodes", "cluster"}), and with ops ({"put": {key: text}, "get": [key],
    "prefix": key prefix}) its internal KV's answers in "kv" (namespace sparkfleet)."""
    argv = ["docker", "exec", "-i", container, "python3", "-", address, str(timeout)]
    rc, out, err = run(argv + ([json.dumps(ops)] if ops else []), timeout=timeout + 30, stdin=GCS_PROGRAM)
    for line in reversed(out.splitlines()):
        if line.startswith("{"):
            try:
                answer = json.loads(line)
            except (ValueError, RecursionError):
                break
            if isinstance(answer, dict):
                return answer
            break
    return {"ok": False, "error": "the check did not run in %s (rc %d): %s" % (container, rc, err.strip()[-200:])}


# A GCS whose process runs but does not answer may only be slow (a loaded head): it needs two more bad checks in a row
# than a process that is gone before Ray is restarted.
SLOW = "slow: "


def alive_in(gcs, node_ip):
    """Whether the GCS answered and lists node_ip as an alive node (an old dead entry beside a live one counts alive)."""
    return bool(gcs.get("ok")) and any(n.get("alive") for n in gcs.get("nodes", []) if n.get("ip") == node_ip)


def orphan_verdict(node_ip, state, gcs):
    """Why this node's Ray can never serve again although its raylet runs, or None: the head's GCS answers with another
    cluster id than the one this run of the unit was alive in (the head's Ray restarted) and does not know this node.
    A raylet keeps the cluster id it joined (the new GCS rejects it: WrongClusterID) and lingers for ever, so this is
    judged at once, within the grace too."""
    seen, now_id = state.get("cluster"), gcs.get("cluster") if gcs.get("ok") else None
    if not seen or not now_id or seen == now_id or alive_in(gcs, node_ip):
        return None
    return ("the head's GCS is a new one (cluster id %s..., this node joined %s...: the head's Ray restarted) and does"
            " not know %s: this raylet belongs to the old cluster and is never taken back" % (now_id[:8], seen[:8], node_ip))


def ray_verdict(head, node_ip, procs, gcs):
    """Why this Ray node is dead in Ray although its unit runs, or None when it is alive (or only waiting for a head
    that is away, which restarting would not help)."""
    if procs is None:
        return "the unit runs but its container does not (docker top failed)"
    need = ["raylet"] + (["gcs_server"] if head else [])
    gone = [p for p in need if p not in procs]
    if gone:
        return "%s gone while `ray start --block` lingers: alive in systemd, dead in Ray" % " and ".join(gone)
    if gcs.get("ok"):
        if alive_in(gcs, node_ip):
            return None
        listed = any(n.get("ip") == node_ip for n in gcs.get("nodes", []))
        return "the GCS lists %s as %s: alive in systemd, dead in Ray" % (node_ip, "dead" if listed else "no node at all")
    if head:
        return SLOW + "the head's GCS does not answer (%s): alive in systemd, dead in Ray" % gcs.get("error", "?")
    return None


# --------------------------------------------------------------------------- Ray's scheduler (head only)
# Seen on the lab after a worker's fabric flap (Ray 2.60; 2.53 logs the failed removal in its own words, BUNDLE_LEAK):
# the GCS failed to remove the old placement group's bundle on the worker it had marked dead ("Failed to remove 1
# bundle(s)"), and from then on every new placement group stayed
# pending while both nodes were alive and every GPU free; a restarted engine waits on its own placement group forever.
# Only a new GCS (the head's Ray restarted; the workers' raylets follow it) schedules again.
GPU_USAGE = re.compile(r"^\s*([0-9.]+)/([0-9.]+) GPU\b")
BUNDLE = re.compile(r"\{([^{}]*)\} \* (\d+)")
BUNDLE_GPU = re.compile(r"'GPU': ([0-9.]+)")
PG_PENDING_KEYS = ("pg_pending_since", "pg_checked", "pg_restart_after")   # the pending group's state, while it lasts
# The mark of that stuck scheduler in the head's GCS log of its current session (inside the Ray container): with it,
# a placement group pending while the free GPUs would hold it is judged after --pg-stuck-leak seconds, not --pg-stuck.
# Its words differ by Ray release: 2.60 logs "Failed to remove 1 bundle(s) for placement group ... at node ...";
# 2.53 (the Sparks' image, vLLM 0.17.1) has no such line: it logs the same failed removal as "Failed to cancel the
# resource reserved for bundle: placement group id={...}, bundle index={1} at node ..." (seen on the lab's 2.53 after
# a flap) and, its gcs_server binary says, "Failed to cancel resource reserved for bundle because the max retry count
# is reached." Either release's words count; a Ray that logs none is still judged, after --pg-stuck.
GCS_LOG = "/tmp/ray/session_latest/logs/gcs_server.out"
BUNDLE_LEAK = r"Failed to (remove [0-9]+ bundle|cancel (the )?resource reserved for bundle)"


def gpu_usage(text):
    """From `ray status`: (GPUs in use, GPUs in the cluster), or None when the text has no GPU usage line."""
    for line in text.splitlines():
        usage = GPU_USAGE.match(line)
        if usage:
            return float(usage.group(1)), float(usage.group(2))
    return None


def pending_pg_verdict(text):
    """From `ray status`: (free GPUs, GPUs of the smallest pending placement group that those free GPUs would hold),
    or None when no placement group is pending that the free GPUs could hold (nothing pending, or waiting for a node
    that is away: restarting would not help) or the text is not a `ray status` report."""
    usage = gpu_usage(text)
    free = usage[1] - usage[0] if usage else None
    demands, in_demands = [], False
    for line in text.splitlines():
        if line.startswith("Pending Demands:"):
            in_demands = True
        elif in_demands and line.rstrip().endswith("pending placement groups"):
            gpus = sum(float(m.group(1)) * int(n) for b, n in BUNDLE.findall(line) for m in [BUNDLE_GPU.search(b)] if m)
            if gpus > 0:
                demands.append(gpus)
    fits = [d for d in demands if free is not None and d <= free + 1e-6]
    return (free, min(fits)) if fits else None


def ray_status(container, address, timeout):
    """`ray status` of the cluster, as its head's container sees it: (rc, text). Bounded so that docker top, the GCS
    read and this stay within the watchdog service's TimeoutStartSec (120 s)."""
    rc, out, err = run(["docker", "exec", container, "ray", "status", "--address", address], timeout=timeout + 10)
    return rc, out if rc == 0 else (out + err)


def bundle_leaks(container, timeout):
    """How many times the head's current GCS has logged that it failed to remove a placement group's bundles from a
    node it marked dead, or None when its log cannot be read (grep's exit 1 is a count of 0)."""
    rc, out, _err = run(["docker", "exec", container, "grep", "-c", "-E", BUNDLE_LEAK, GCS_LOG], timeout=timeout)
    out = out.strip()
    return int(out) if rc in (0, 1) and out.isdigit() else None


def check_scheduler(a, state):
    """Head only: restart Ray when a placement group has stayed pending for a.pg_stuck seconds while the free GPUs
    would hold it. The wait doubles after each such restart that placed nothing (up to an hour), so a placement group
    Ray cannot place for another reason does not restart the cluster every few minutes; once GPUs are placed again,
    the next stuck scheduler waits a.pg_stuck again (a fabric that flaps often sticks it again)."""
    rc, text = ray_status(a.container, a.address, a.timeout)
    verdict = pending_pg_verdict(text) if rc == 0 else None
    if verdict is None:
        for key in PG_PENDING_KEYS:
            state.pop(key, None)
        if rc == 0 and (gpu_usage(text) or (0, 0))[0] > 0:
            state.pop("pg_wait", None)      # placed again (the restart helped): the next stuck one waits a.pg_stuck
        return
    free, gpus = verdict
    since = state.setdefault("pg_pending_since", round(now(), 1))
    waited = now() - since
    backoff = base = state.get("pg_wait", a.pg_stuck)
    leaks = None
    if "pg_wait" not in state and 0 < a.pg_stuck_leak < backoff:    # not after a restart that placed nothing
        leaks = bundle_leaks(a.container, a.timeout)
        if leaks:
            backoff = a.pg_stuck_leak
    state["cause"] = "a placement group of %g GPU(s) pending %d s with %g GPU(s) free" % (gpus, waited, free)
    state.update(pg_checked=round(now(), 1), pg_restart_after=backoff)    # read by playbooks/status.yml
    if waited < backoff:
        return
    leak = (", after the GCS failed to remove a dead node's bundles (%d time(s) in its log)" % leaks) if leaks else ""
    if restart(a.unit, "Ray's scheduler stuck: a placement group of %g GPU(s) pending for %d s while %g GPU(s) were"
               " free%s; a new GCS schedules it (the workers' Ray follows)" % (gpus, waited, free, leak), state,
               pending_s=round(waited), **({"bundle_leaks": leaks} if leaks else {})):
        for key in PG_PENDING_KEYS:
            state.pop(key, None)
        state["pg_wait"] = min(base * 2, 3600)      # a shortened wait doubles what it replaced


def check_ray(a):
    state = load_state(a.unit)
    running, start = unit_run(a.unit)
    kept = {k: state[k] for k in ("pg_wait",) if k in state}   # the scheduler's backoff spans the unit's runs
    if not running:
        save_state(a.unit, dict(kept, start=start))
        return 0
    if state.get("start") != start:
        state = dict(kept, start=start, bad=0)
    in_grace = time.monotonic() - start < a.grace
    if deploy_hold(a.unit):             # a deploy restarts the unit now; its new run is judged afresh
        save_state(a.unit, state)
        return 0
    procs = container_processes(a.container)
    if procs is None and not docker_answers():
        # dockerd restarting: docker cannot tell whether the container runs; judged at the next check (without
        # live-restore the container went with dockerd and systemd restarts the unit with docker anyway)
        save_state(a.unit, state)
        return 0
    ranks = engine_ranks(a.container) if procs is not None else False
    ops = memory_ops(a, ranks) if getattr(a, "model_dir", None) else None
    if not a.head:      # a worker answers the head's incident requests (save_incident)
        ops = dict(ops or {}, get=list((ops or {}).get("get") or []) + [INCIDENT_KEY])
    gcs = gcs_nodes(a.container, a.address, a.timeout, *([ops] if ops else [])) \
        if procs is not None and "raylet" in procs else {"ok": None}
    if ops:
        obey_drop_request(state, gcs, ranks)
    if not a.head and procs is not None:
        answer_incident(a, state, gcs)
    orphan = orphan_verdict(a.node_ip, state, gcs)
    if alive_in(gcs, a.node_ip) and gcs.get("cluster"):
        state["cluster"] = gcs["cluster"]            # the cluster this run of the unit is alive in
    if orphan:
        state["cause"] = orphan
        restart(a.unit, orphan, state, checks=1)
        save_state(a.unit, state)
        return 0
    if in_grace:
        save_state(a.unit, state)
        return 0
    cause = ray_verdict(a.head, a.node_ip, procs, gcs)
    if cause is None:
        if not gcs.get("ok") and not a.head:
            state["waiting"] = gcs.get("error")
        state.update(bad=0)
        state.pop("cause", None)
        if a.head and a.pg_stuck > 0:
            check_scheduler(a, state)
    else:
        slow = cause.startswith(SLOW)
        cause = cause[len(SLOW):] if slow else cause
        state["bad"] = state.get("bad", 0) + 1
        state["cause"] = cause
        if state["bad"] >= a.checks + (2 if slow else 0):
            restart(a.unit, cause, state, checks=state["bad"])
    save_state(a.unit, state)
    return 0


# --------------------------------------------------------------------------- unified memory (every node)
# Every node's Ray watchdog publishes its memory into Ray's internal KV (namespace sparkfleet, key memory:<fabric IP>)
# at every check, after dropping the model's page cache while no engine rank runs there; the head's gate reads them
# before every engine start, and the head's liveness timer while supervision is escalated.
RANK_MARKS = ("RayWorkerWrapper", "RayWorkerProc")     # vLLM's Ray actors (the ranks), by their process titles
DROP_KEY = "drop-caches"


def engine_ranks(container):
    """Whether an engine rank (vLLM's Ray worker actor) runs in this node's Ray container."""
    rc, out, _err = run(["docker", "top", container, "-eo", "pid,args"], timeout=30)
    return rc == 0 and any(mark in line for line in out.splitlines()[1:] for mark in RANK_MARKS)


def memory_report(node_ip, model_dir, ranks):
    """This node's memory, measured on the host after dropping the model's page cache when no engine rank runs here
    (a crashed engine's eager load leaves the shards cached; vLLM's startup check on GB10 counts that as used); and
    the stat check of its model files against what the sync left (the gate refuses a start on a changed model)."""
    dropped = 0 if ranks or not model_dir else MEM.drop_file_cache(model_dir)
    report = MEM.measure()
    report.update(ip=node_ip, time=round(now(), 1), engine=bool(ranks), dropped=dropped)
    if model_dir:
        report["model"] = model_check(model_dir)
    return report


def model_check(model_dir):
    """This node's model against its manifest, by stat only: {state, changes, msg} (state unrecorded when there is no
    manifest or no check installed: never a refusal)."""
    if MODEL is None:
        return {"state": "unrecorded", "changes": [], "msg": "the model check is not installed here"}
    try:
        got = MODEL.check(model_dir, MODEL_MANIFEST)
    except OSError as e:
        return {"state": "unrecorded", "changes": [], "msg": "the model check failed: %s" % e}
    return {"state": got["state"], "changes": got["changes"][:20], "msg": got["msg"]}


def model_refusals(nodes, reports, since):
    """Sentences naming each node whose model changed since the sync, from checks made at or after `since` (the
    gate's own start: a check from before it may predate the repair a deploy just made), and the nodes whose check
    is not that fresh yet."""
    changed, waiting = [], []
    for name, ip in nodes:
        report = reports.get(ip) or {}
        check = report.get("model")
        if not isinstance(report.get("time"), (int, float)) or report["time"] < since:
            waiting.append(name)
        elif isinstance(check, dict) and check.get("state") == "changed":
            # the node's own sentence names it by its hostname: name it as the inventory does
            text = str(check.get("msg") or "model changed since the sync: run site.yml")
            changed.append(_renamed(text, name))
    return changed, waiting


def _renamed(text, name):
    """A node's sentence 'model changed since the sync on HOST: ...' with HOST its inventory name."""
    head, sep, rest = text.partition(": ")
    if sep and head.startswith("model changed since the sync on "):
        return "model changed since the sync on %s: %s" % (name, rest)
    return "%s: %s" % (name, text)


def memory_ops(a, ranks):
    """The GCS program's KV operations for this node: publish its report, read the gate's request to drop caches."""
    report = memory_report(a.node_ip, a.model_dir, ranks)
    return {"put": {"memory:%s" % a.node_ip: json.dumps(report, sort_keys=True)}, "get": [DROP_KEY]}


def obey_drop_request(state, gcs, ranks):
    """The head's gate asked every node to drop its page cache (the model's alone was not enough): once per request,
    never under a running engine rank."""
    asked = (gcs.get("kv") or {}).get(DROP_KEY) if gcs.get("ok") else None
    try:
        asked = float(asked)
    except (TypeError, ValueError):
        return
    if asked > state.get("drop_seen", 0) and not ranks:
        state["drop_seen"] = asked
        state["dropped_caches"] = MEM.drop_caches()


def run_path(name):
    """A file under /run/sparkfleet: tmpfs, written even when the disk is full, gone at a reboot."""
    return os.path.join(RUN_DIR, "sparkfleet", name)


def escalation_path(unit):
    return run_path("escalated-%s" % unit)       # the unit's ConditionPathExists=! names it


def starts_path(unit):
    return run_path("starts-%s.json" % unit)


def baseline_path(unit):
    return os.path.join(STATE_DIR, "memory-baseline-%s.json" % unit)


def parse_nodes(values):
    """--node NAME=IP (the head first) -> [(name, ip)]."""
    out = []
    for value in values or []:
        name, sep, ip = value.partition("=")
        if not sep or not name or not ip:
            raise SystemExit("sparkfleet-watchdog: --node wants NAME=IP, got %r" % value)
        out.append((name, ip))
    return out


def cluster_memory(a, ops=None):
    """{fabric IP: report} of every node: the head's measured now (after dropping its model's page cache: its engine is
    down when this runs), the others' as they published it; and the GCS's answer."""
    nodes = parse_nodes(a.node)
    head_ip = nodes[0][1]
    ranks = engine_ranks(a.ray_container)
    head = memory_report(head_ip, a.model_dir, ranks)
    gcs = gcs_nodes(a.ray_container, a.address, a.gcs_timeout, dict({"prefix": "memory:"}, **(ops or {})))
    reports = {}
    for key, text in (gcs.get("kv") or {}).items():
        if key.startswith("memory:"):
            # another node's report: nested past the parser's depth or not an object, it is no report (never a crash
            # of the head's gate or watchdog, which would keep the engine from starting)
            try:
                report = json.loads(text)
            except (ValueError, RecursionError, TypeError):
                continue
            if isinstance(report, dict):
                reports[key[len("memory:"):]] = report
    reports[head_ip] = head
    return nodes, reports, gcs


def memory_verdicts(a, nodes, reports, since=0):
    """Every node's verdict; a report older than since (the last start that passed the gate) predates that engine and
    says nothing of what it left: waited for like a missing one."""
    baseline = (MEM.load_json(baseline_path(a.unit), {}) or {}).get("nodes") or {}
    fresh = {ip: r for ip, r in reports.items()
             if isinstance(r, dict) and isinstance(r.get("time"), (int, float)) and (r["time"] > since or not since)}
    return [MEM.node_verdict(name, ip, fresh.get(ip), now(), a.utilization, a.margin, baseline.get(ip),
                             a.tolerance, a.max_age) for name, ip in nodes]


def notify(a, entry):
    """The operator's escalation command (root-only file, it may hold a webhook's secret), once per escalation."""
    cmd = ""
    try:
        with open(a.notify_file) as fh:
            cmd = fh.read().strip()
    except (OSError, TypeError):
        pass
    if not cmd:
        return None
    env = dict(os.environ, SPARKFLEET_ESCALATION=json.dumps(entry, sort_keys=True),
               SPARKFLEET_ESCALATION_STEP=entry.get("step", ""), SPARKFLEET_UNIT=a.unit)
    try:
        p = subprocess.run(["/bin/sh", "-c", cmd], env=env, capture_output=True, text=True, timeout=30, check=False)
        return p.returncode
    except (subprocess.TimeoutExpired, OSError):
        return 124


def escalate(a, reason, verdicts, memory, step=None):
    """Stop restarting the engine: the unit's next start is skipped (ConditionPathExists=! the marker) until site.yml
    or a return of every node's memory; name what is held where and the one human step."""
    step = step or (MEM.human_step(verdicts) if memory else
                    "read journalctl -u %s on the head for why the engine did not serve, fix it, then run site.yml"
                    % a.unit)
    held = [v["why"] for v in verdicts if v.get("state") != "ok"]
    entry = {"time": round(now(), 1), "unit": a.unit, "reason": reason, "memory": bool(memory), "step": step,
             "nodes": held}
    MEM.save_json(escalation_path(a.unit), entry)
    try:
        log_event(a.unit, "escalated", reason, by="watchdog", step=step, nodes=held)
    except OSError:
        pass        # the disk is full: the marker in /run and the journal still say it
    notify(a, entry)
    sys.stderr.write("sparkfleet-watchdog: supervision of %s ESCALATED, the engine is not started again: %s%s. "
                     "Human step: %s\n" % (a.unit, reason, (" (" + "; ".join(held) + ")") if held else "", step))
    return 3


def gate(a):
    """vLLM's ExecStartPre: start the engine only when every node has the memory it takes and is back at its baseline;
    drop page caches to get there; escalate after a.starts starts in a.window seconds that did not serve, or when the
    memory does not come back within a.timeout seconds. Exit 0 to start, 3 not to (never 1)."""
    runs = MEM.load_json(starts_path(a.unit), {}) or {}
    starts = [t for t in runs.get("starts") or [] if isinstance(t, (int, float)) and 0 <= now() - t < a.window]
    if starts and served_in_journal(a.unit, max(starts)):
        mark_served(a, runs)        # the last start served (the liveness timer, when it runs, says so sooner)
        runs, starts = {}, []
    allowed = 1 if runs.get("returned") else a.starts
    if len(starts) >= allowed:
        nodes, reports, _gcs = cluster_memory(a)
        verdicts = memory_verdicts(a, nodes, reports)
        why = ("the start after every node's memory came back did not serve" if runs.get("returned") else
               "%d start(s) in %d min did not serve" % (len(starts), a.window // 60))
        return escalate(a, why, verdicts, memory=any(v["state"] == "short" for v in verdicts))
    if getattr(a, "gpu_wait", None):
        # Ray's cluster has every GPU the engine places (a node away or still booting is waited for, bounded); a wait
        # that ends short is a refusal, counted like one: a worker away for good escalates after K instead of the
        # unit retrying for ever, and the liveness timer starts the engine once every node reports again.
        print("memory gate: waiting up to %s s for %s to run and Ray's cluster to have %s GPU(s)"
              % (a.gpu_wait[2], a.gpu_wait[0], a.gpu_wait[1]), flush=True)
        rc, _out, err = run([WAIT_BIN, "gpus"] + list(a.gpu_wait), timeout=int(a.gpu_wait[2]) + 90)
        if rc != 0:
            nodes, reports, gcs = cluster_memory(a)
            short = (err.strip().splitlines() or ["the GPU wait ended with %d" % rc])[-1]
            return refuse(a, runs, starts, memory_verdicts(a, nodes, reports), gcs,
                          "the cluster did not have the engine's GPUs (%s)" % short[:300])
    deadline, asked, verdicts = time.monotonic() + a.timeout, False, []
    began = now()
    while True:
        want = [v for v in verdicts if v.get("state") == "drop"]
        ops = {"put": {DROP_KEY: str(round(now(), 1))}} if want and not asked else None
        if want and parse_nodes(a.node)[0][0] in [v["name"] for v in want]:
            MEM.drop_caches()
        asked = asked or bool(ops)
        nodes, reports, gcs = cluster_memory(a, ops)
        verdicts = memory_verdicts(a, nodes, reports, since=max(starts or [0]))
        # Each node's model files against what the sync left, checked since this gate began (the head's just now):
        # a changed shard would be served with wrong numbers on its rank, and no restart can mend it.
        changed, unchecked = model_refusals(nodes, reports, began) if a.model_dir else ([], [])
        if changed:
            return escalate(a, "; ".join(changed), [], memory=False,
                            step="run site.yml: it sends the changed files again from the head")
        if all(v["state"] == "ok" for v in verdicts) and (not unchecked or time.monotonic() >= deadline):
            if unchecked:
                print("memory gate: the model on %s not checked since this start began (no report within %d s)"
                      % (", ".join(unchecked), a.timeout))
            starts.append(round(now(), 1))
            MEM.save_json(starts_path(a.unit), {"starts": starts, "returned": bool(runs.get("returned")),
                                                "pending": {v["ip"]: v["used"] for v in verdicts}})
            print("memory gate: %s" % "; ".join(v["why"] for v in verdicts))
            return 0
        if time.monotonic() >= deadline:
            break
        time.sleep(a.poll)
    if any(v["state"] == "short" for v in verdicts):
        return escalate(a, "the memory did not come back within %d s" % a.timeout, verdicts, memory=True)
    return refuse(a, runs, starts, verdicts, gcs, "")


def refuse(a, runs, starts, verdicts, gcs, why):
    """Not this start: a node silent (or its old rank lingering), or the cluster short of the engine's GPUs. Never
    started into; bounded like the starts, and the escalated liveness timer starts the engine once every node reports
    again (a worker away for hours comes back serving)."""
    refusals = [t for t in runs.get("refusals") or [] if isinstance(t, (int, float)) and 0 <= now() - t < a.window]
    refusals.append(round(now(), 1))
    # the head's own GCS not answering hides every worker's report: say so, not that the workers are silent
    gcs_down = "" if gcs.get("ok") else "; the head's GCS does not answer (%s)" % str(gcs.get("error", "?"))[:200]
    found = why or "a node without a fresh memory report"
    if len(refusals) >= a.starts:
        return escalate(a, "%d start(s) in %d min found %s%s" % (len(refusals), a.window // 60, found, gcs_down),
                        verdicts, memory=True,
                        step="check the head's Ray (systemctl status %s on the head), or run site.yml" % a.ray_container
                        if gcs_down or not any(v["state"] != "ok" for v in verdicts) else None)
    MEM.save_json(starts_path(a.unit), dict(runs, starts=starts, refusals=refusals))
    held = "; ".join(([why] if why else []) + [v["why"] for v in verdicts if v["state"] != "ok"])
    sys.stderr.write("sparkfleet-watchdog: memory gate: not starting the engine yet (%s%s); systemd tries again"
                     " (refusal %d of %d before escalating)\n" % (held, gcs_down, len(refusals), a.starts))
    return 3


def served_in_journal(unit, since):
    """Whether the unit's journal since the epoch second `since` holds a completion the API server answered with 200
    (uvicorn's access log; vLLM's --disable-uvicorn-access-log leaves only the engine's /metrics to tell)."""
    rc, out, _err = run(["journalctl", "-u", unit + ".service", "--since", "@%d" % since, "-o", "cat", "--all",
                         "--no-pager", "-n", "20000"], timeout=30)
    return rc == 0 and bool(ACCESS_OK.search(out))


def served(a, start):
    """Whether the engine answered anything since this run started, by its own counters (/metrics) or, when it does not
    answer now (paused, hung), by the API server's access log in the unit's journal since its start."""
    code, text = http(a.url.rstrip("/") + "/metrics", timeout=5)
    if code == 200:
        for line in text.splitlines():
            if line.startswith(("vllm:generation_tokens_total", "vllm:request_success_total")):
                try:
                    if float(line.rsplit(None, 1)[1]) > 0:
                        return True
                except (IndexError, ValueError):
                    continue
    return served_in_journal(a.unit, now() - max(time.monotonic() - start, 0))


ACCESS_OK = re.compile(r'"POST /v1/(chat/)?completions HTTP/1\.[01]" 200')


def mark_served(a, runs=None):
    """A start served: forget the starts that did not, and keep every node's memory of that start as its baseline."""
    runs = (MEM.load_json(starts_path(a.unit), {}) or {}) if runs is None else runs
    if not runs:
        return
    if runs.get("pending"):
        MEM.save_json(baseline_path(a.unit), {"time": round(now(), 1), "nodes": runs["pending"]})
    try:
        os.remove(starts_path(a.unit))
    except OSError:
        pass


def watch_escalated(a, marker):
    """Escalated: the engine stays stopped; only memory is watched. When every node is back at its baseline after an
    escalation for memory, start the engine once (the gate allows that return one start that must serve)."""
    if not marker.get("memory") or marker.get("returned"):
        return 0
    nodes, reports, _gcs = cluster_memory(a)
    verdicts = memory_verdicts(a, nodes, reports)
    if not all(v["state"] == "ok" for v in verdicts):
        # The memory was read over seconds: site.yml (or restart.yml) may have lifted the escalation meanwhile. Write
        # the update only onto the marker as it was read, never re-create a lifted one (its restart would be skipped).
        now_marker = MEM.load_json(escalation_path(a.unit))
        if isinstance(now_marker, dict) and now_marker.get("time") == marker.get("time"):
            marker.update(checked=round(now(), 1), nodes=[v["why"] for v in verdicts if v["state"] != "ok"])
            MEM.save_json(escalation_path(a.unit), marker)
        return 0
    if MEM.load_json(escalation_path(a.unit)) is None:
        return 0        # lifted while the memory was read: the deploy starts the engine, not this timer
    MEM.save_json(starts_path(a.unit), {"starts": [], "returned": True})
    try:
        os.remove(escalation_path(a.unit))
    except OSError:
        pass
    log_event(a.unit, "return", "every node's memory is back at its baseline: one start", by="watchdog",
              nodes=[v["why"] for v in verdicts])
    run(["systemctl", "reset-failed", a.unit + ".service"])
    run(["systemctl", "start", "--no-block", a.unit + ".service"])
    return 0


# --------------------------------------------------------------------------- vLLM
def env_value(path, name):
    """NAME's value in a docker --env-file (KEY=value, everything after '=' literal)."""
    try:
        with open(path) as fh:
            for line in fh:
                key, sep, value = line.lstrip().rstrip("\n").partition("=")
                if sep and key == name:
                    return value
    except OSError:
        pass
    return ""


def http(url, body=None, key="", timeout=10):
    """(status or None, text): None when nothing answered in time."""
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read(65536).decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, ""
    except Exception as e:  # noqa: BLE001  (timeouts, refused, resets: nothing answered)
        reason = getattr(e, "reason", e)
        return None, "timed out" if "timed out" in str(reason).lower() else str(reason)[:120]


def probe(url, model, key, timeout):
    """One real token within the deadline: (True, '') or (False, why)."""
    t0 = time.monotonic()
    code, text = http(url.rstrip("/") + "/v1/completions",
                      {"model": model, "prompt": "ping", "max_tokens": 1, "temperature": 0}, key, timeout)
    if code == 200:
        try:
            if json.loads(text).get("choices"):
                return True, ""
        except (ValueError, RecursionError, AttributeError):
            pass
        return False, "HTTP 200 without a completion"
    if code is None:
        return False, ("no token within %d s" % timeout) if text == "timed out" else "no answer (%s)" % text
    return False, "HTTP %d after %.0f s" % (code, time.monotonic() - t0)


def stranded(unit, ray_unit):
    """Whether vLLM is down for good although its cause is gone: its start job failed on a dependency (the head's Ray
    failed to start: its guard refused a held port, the identity wait timed out) and Restart= never applies to a job
    that did not run, while Ray runs again now. A unit stopped on purpose (its journal's last line is not that
    failure), disabled, or whose Ray does not run is left alone."""
    out = run(["systemctl", "show", "-p", "ActiveState,UnitFileState", unit + ".service"])[1]
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    if props.get("ActiveState") not in ("inactive", "failed") or props.get("UnitFileState") != "enabled":
        return False
    lines = [line for line in run(["journalctl", "-u", unit + ".service", "-n", "5", "-o", "cat", "--all", "--no-pager"],
                                  timeout=30)[1].splitlines() if line.strip()]
    return bool(lines) and bool(DEPENDENCY_FAILED.search(lines[-1])) and unit_run(ray_unit)[0]


# systemd's last word on a start job that failed on a dependency (252: both lines, the second last)
DEPENDENCY_FAILED = re.compile(r"^Dependency failed for |: Job \S+/start failed with result 'dependency'\.$")


def check_vllm(a):
    marker = MEM.load_json(escalation_path(a.unit))
    running, start = unit_run(a.unit)
    if marker is not None and running:
        # the unit runs although supervision escalated (started by hand, or the marker outlived the start it refused):
        # it is supervised again, never left unjudged
        try:
            os.remove(escalation_path(a.unit))
        except OSError:
            pass
        marker = None
    if marker is not None:
        return watch_escalated(a, marker) if a.node else 0
    state = load_state(a.unit)
    if not running:
        if stranded(a.unit, a.ray_unit):
            # one start per such failure: the next check finds this start in the journal (the gate bounds the rest)
            log_event(a.unit, "restart", "its start failed on a dependency (the head's Ray did not start then); Ray"
                      " runs again", by="watchdog")
            run(["systemctl", "reset-failed", a.unit + ".service"])
            run(["systemctl", "start", "--no-block", a.unit + ".service"])
        save_state(a.unit, {"start": start})
        return 0
    if state.get("start") != start:
        state = {"start": start, "bad": 0, "served": False}
    key = env_value(a.env_file, "VLLM_API_KEY")
    ok, why = probe(a.url, a.model, key, a.timeout)
    age = time.monotonic() - start
    if ok:
        state.update(bad=0, served=True, last_ok=round(now(), 1))
        state.pop("cause", None)
        mark_served(a)
    elif why.startswith("HTTP 404"):
        # the engine answers, but knows no model by this name (a model switch not deployed, a list of served names):
        # a restart changes nothing, so it is never one (status.yml names it; site.yml deploys the name)
        state.update(bad=0, cause="serves no model named %r (%s): not restarted" % (a.model, why))
    elif not state.get("served") and served(a, start):
        # it answered requests since it started (the probe never saw it): judged from now on, no start grace
        state.update(served=True, bad=1, cause=why)
        mark_served(a)
    elif not state.get("served") and age < a.start_grace:
        state["starting"] = why          # loading: never judged before the start grace unless it served once
    else:
        state["bad"] = state.get("bad", 0) + 1
        state["cause"] = why
        if state["bad"] >= a.failures:
            health = http(a.url.rstrip("/") + "/health", timeout=5)[0]
            paused = run(["docker", "inspect", "-f", "{{.State.Paused}}", a.container], timeout=30)[1]
            detail = "%s in %d probes in a row" % (why, state["bad"])
            if health == 200:
                detail += "; answers /health, generates nothing"
            if paused.strip() == "true":
                detail += "; its container is paused"
                run(["docker", "unpause", a.container], timeout=30)   # a paused container cannot be stopped
            if not state.get("served"):
                detail += "; never served %d s after its start" % age
            extra = {}
            if a.incidents_keep > 0 and paused.strip() == "false" and run(
                    ["docker", "inspect", "-f", "{{.State.Running}}", a.container], timeout=30)[1].strip() == "true":
                # its processes are alive: their stacks say where it hangs, before the restart ends them
                extra["incident"], cause = save_incident(a, detail)
                detail += "; %s; incident %s" % (cause, extra["incident"] or "not written")
            restart(a.unit, "engine stopped generating: " + detail, state, **extra)
    save_state(a.unit, state)
    return 0


# --------------------------------------------------------------------------- incidents (a hang caught with its evidence)
# When the liveness timer restarts an engine whose processes are alive (it answers /health but generates nothing), it
# first saves an incident on the head under INCIDENT_DIR/<UTC time>-<cause>/: the Python stacks of every engine and Ray
# worker process on every node (py-spy, where the image has it), their NCCL_*/RAY_*/... environment without secrets,
# the last lines of each node's units, memory, process table and dmesg tail. Every part is bounded in size and time (a
# stuck py-spy never holds the restart back) and only the newest --incidents-keep are kept. The other nodes' parts
# travel as the memory reports do: the head puts a request into Ray's internal KV (namespace sparkfleet, key
# incident-request); each worker's Ray watchdog answers at its next check with its part under incident:<id>:<ip>.
INCIDENT_DIR = os.environ.get("SPARKFLEET_INCIDENT_DIR", "/var/lib/sparkfleet/incidents")
INCIDENT_KEY = "incident-request"
INCIDENT_PREFIX = "incident:"
INCIDENT_REQUEST_MAX_AGE = 300      # seconds a request is answered (a worker whose timer was stopped meanwhile: never)
PART_BUDGET = 25                    # seconds one node's capture may take (its py-spy dumps together)
SPY_TIMEOUT = 8                     # seconds one py-spy dump may take
PART_MAX = 100000                   # characters of one node's encoded part (one argument of the GCS program)
STACK_MAX = 12000                   # characters kept of one process's stack
TEXT_MAX = 32000                    # characters kept of one log, the process table or dmesg
PROCS_MAX = 32                      # processes dumped per container
SECRET_NAME = re.compile(r"KEY|TOKEN|PASSWORD|PASSWD|SECRET|CREDENTIAL|AUTH|COOKIE", re.I)
SECRET_ARG = re.compile(r"(?i)(-{1,2}[\w.-]*(?:key|token|password|passwd|secret|credential)[\w.-]*(?:=|\s+))\S+")
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "barrier", "all_to_all", "recv", "send",
               "wait", "synchronize")
SPIN_CPU = 50                       # % of a core a rank's process used over the sample: spinning, not waiting

# Sent to a container's Python (docker exec --privileged: py-spy needs ptrace): its processes whose command line holds
# one of the marks (none: every process), each one's CPU use over one second, state, wait channel, environment
# (NCCL_*, RAY_*, ... without secret names) and py-spy dump, within the budget. One JSON line.
PROC_PROGRAM = r'''
import json, os, re, shutil, subprocess, sys, time
marks, budget, per, limit, most = json.loads(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
skip = set(json.loads(sys.argv[6])) if len(sys.argv) > 6 else set()
end = time.monotonic() + budget
secret = re.compile(r"KEY|TOKEN|PASSWORD|PASSWD|SECRET|CREDENTIAL|AUTH|COOKIE", re.I)
prefixes = ("NCCL_", "RAY_", "GLOO_", "VLLM_", "UCX_", "TORCH_", "CUDA_", "PYTHON")
def read(path):
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return b""
def ticks(pid):
    text = read("/proc/%d/stat" % pid).decode("utf-8", "replace")
    try:
        f = text[text.rindex(")") + 2:].split()
        return int(f[11]) + int(f[12]), f[0]
    except (ValueError, IndexError):
        return None, "?"
procs = []
for pid in sorted(int(p) for p in os.listdir("/proc") if p.isdigit()):
    if pid == os.getpid() or pid == os.getppid():
        continue
    cmd = read("/proc/%d/cmdline" % pid).replace(b"\0", b" ").decode("utf-8", "replace").strip()
    if cmd and (not marks or any(m in cmd for m in marks)) and "%d %s" % (pid, cmd) not in skip:
        procs.append({"pid": pid, "cmd": cmd})
procs = procs[:most]
first = dict((p["pid"], ticks(p["pid"])[0]) for p in procs)
t0 = time.monotonic()
time.sleep(1.0)
dt = time.monotonic() - t0
hz = os.sysconf("SC_CLK_TCK")
here = os.path.dirname(os.path.realpath(sys.executable))
spy = shutil.which("py-spy") or next((c for c in (os.path.join(here, "py-spy"), "/opt/venv/bin/py-spy",
                                                  "/usr/local/bin/py-spy") if os.access(c, os.X_OK)), None)
for p in procs:
    t, p["state"] = ticks(p["pid"])
    p["cpu"] = round(100.0 * (t - first[p["pid"]]) / hz / dt) if None not in (t, first[p["pid"]]) else None
    p["wchan"] = read("/proc/%d/wchan" % p["pid"]).decode("utf-8", "replace")[:64]
    env = {}
    for item in read("/proc/%d/environ" % p["pid"]).split(b"\0"):
        k, sep, v = item.decode("utf-8", "replace").partition("=")
        if sep and k.startswith(prefixes) and not secret.search(k):
            env[k] = v[:300]
    p["env"] = env
    left = end - time.monotonic()
    p["stack"] = ""
    if spy is None:
        p["stack_error"] = "py-spy is not in this image"
    elif left < 1:
        p["stack_error"] = "not dumped: the capture's %d s were spent" % budget
    else:
        try:
            r = subprocess.run([spy, "dump", "--pid", str(p["pid"])], capture_output=True, text=True,
                               timeout=min(per, left))
            p["stack"] = r.stdout[:limit]
            if r.returncode != 0:
                p["stack_error"] = ("py-spy exit %d: %s" % (r.returncode, r.stderr.strip()))[:300]
        except subprocess.TimeoutExpired:
            p["stack_error"] = "py-spy gave no stack within %d s" % min(per, left)
        except OSError as e:
            p["stack_error"] = "py-spy did not run: %s" % e
print(json.dumps({"spy": spy, "processes": procs}))
sys.stdout.flush()
'''


def redact(text):
    """Command lines and logs with the values of secret-looking options (--api-key X, --token=X) replaced."""
    return SECRET_ARG.sub(lambda m: m.group(1) + "<redacted>", text)


def tail(text, limit=TEXT_MAX):
    return text if len(text) <= limit else "[... %d characters cut]\n" % (len(text) - limit) + text[-limit:]


def container_part(container, marks, budget, skip=()):
    """{"processes": [...], "spy": path or None} of the container, or {"error": why}. skip: "PID CMDLINE" of processes
    already captured in another container of the node (the engine's container shares the Ray container's PID space)."""
    if budget < 2:
        return {"error": "not captured: no time left"}
    t0 = time.monotonic()
    args = [container, "python3", "-", json.dumps(marks or []), str(max(budget - 2, 1)), str(SPY_TIMEOUT),
            str(STACK_MAX), str(PROCS_MAX), json.dumps(sorted(skip))]
    rc, out, err = run(["docker", "exec", "-i", "--privileged"] + args, timeout=budget + 10, stdin=PROC_PROGRAM)
    if rc == 126:
        # a host that cannot grant the exec its capabilities ("unable to apply caps"): without them py-spy still reads
        # a process of the same user where ptrace is not restricted (Yama's ptrace_scope 0 or absent)
        left = budget - (time.monotonic() - t0)
        args[4] = str(max(left - 2, 1))
        rc, out, err = run(["docker", "exec", "-i"] + args, timeout=left + 10, stdin=PROC_PROGRAM)
    for line in reversed(out.splitlines()):
        if line.startswith("{"):
            try:
                got = json.loads(line)
            except (ValueError, RecursionError):
                break
            if isinstance(got, dict):
                for p in got.get("processes") or []:
                    p["key"] = "%s %s" % (p.get("pid"), p.get("cmd", ""))
                    p["cmd"] = redact(str(p.get("cmd", "")))[:400]
                    p["container"] = container
                return got
            break
    return {"error": "no capture in %s (rc %d): %s" % (container, rc, err.strip()[-200:])}


def node_part(containers, units, budget=PART_BUDGET):
    """This node's part of an incident: each container's processes (container_part), each unit's last journal lines,
    memory, the process table and dmesg's tail, all bounded; within about budget seconds."""
    end = time.monotonic() + budget
    part = {"host": os.uname()[1], "time": round(now(), 1), "containers": {}, "journal": {}}
    seen = set()
    for container, marks in containers:
        got = part["containers"][container] = container_part(container, marks, end - time.monotonic(), seen)
        for p in got.get("processes") or []:
            seen.add(p.pop("key", ""))
    for unit in units:
        rc, out, err = run(["journalctl", "-u", unit + ".service", "-n", "200", "--no-pager", "-o", "short-iso"],
                           timeout=10)
        part["journal"][unit] = redact(tail(out if rc == 0 else "journalctl: %s" % err.strip()))
    meminfo = ""
    try:
        with open("/proc/meminfo") as fh:
            meminfo = fh.read()
    except OSError as e:
        meminfo = "/proc/meminfo: %s" % e
    part["memory"] = tail(run(["free", "-b"], timeout=10)[1] + "\n" + meminfo)
    part["ps"] = redact(tail(run(["ps", "-eo", "pid,ppid,stat,pcpu,rss,etimes,args", "--sort=-pcpu"], timeout=10)[1]))
    rc, out, err = run(["dmesg", "--ctime"], timeout=10)
    part["dmesg"] = tail(out if rc == 0 else "dmesg: %s" % err.strip(), 16000)
    return part


def encode_part(part):
    """The part as one KV value (zlib + base64), under PART_MAX characters: stacks, then texts, shortened if needed."""
    import base64
    import zlib
    for stack_max, text_max in ((STACK_MAX, TEXT_MAX), (3000, 8000), (800, 2000), (0, 500)):
        for c in part.get("containers", {}).values():
            for p in c.get("processes") or []:
                p["stack"] = p.get("stack", "")[:stack_max]
        for key in ("ps", "memory", "dmesg"):
            part[key] = tail(part.get(key, ""), text_max)
        part["journal"] = dict((k, tail(v, text_max)) for k, v in part.get("journal", {}).items())
        blob = base64.b64encode(zlib.compress(json.dumps(part).encode(), 9)).decode()
        if len(blob) <= PART_MAX:
            return blob
    return base64.b64encode(zlib.compress(json.dumps({"host": part.get("host"), "error": "too big"}).encode())).decode()


def decode_part(blob):
    import base64
    import zlib
    try:
        raw = zlib.decompressobj().decompress(base64.b64decode(blob), 1 << 24)     # 16 MiB at most
        part = json.loads(raw.decode("utf-8", "replace"))
    except (ValueError, zlib.error, RecursionError, TypeError):
        return None
    return part if isinstance(part, dict) else None


def answer_incident(a, state, gcs):
    """A worker's Ray watchdog: the head asked for an incident (a fresh request it has not answered): capture this
    node's part and put it into the KV for the head."""
    if not gcs.get("ok"):
        return
    try:
        req = json.loads((gcs.get("kv") or {}).get(INCIDENT_KEY) or "null")
    except (ValueError, RecursionError):
        return
    if not isinstance(req, dict) or not isinstance(req.get("id"), str) or req["id"] == state.get("incident_seen"):
        return
    if not isinstance(req.get("time"), (int, float)) or not 0 <= now() - req["time"] < INCIDENT_REQUEST_MAX_AGE:
        return
    state["incident_seen"] = req["id"]
    part = node_part([(a.container, ["ray::"])], [a.unit], min(PART_BUDGET, int(req.get("budget") or PART_BUDGET)))
    part["ip"] = a.node_ip
    answer = gcs_nodes(a.container, a.address, a.timeout,
                       {"put": {"%s%s:%s" % (INCIDENT_PREFIX, req["id"], a.node_ip): encode_part(part)}})
    log_event(a.unit, "incident-part", "sent this node's part of incident %s" % req["id"], by="watchdog",
              sent=bool(answer.get("ok")))


def py_frames(stack):
    """(active, frames) of a py-spy dump's main thread (the first thread when none is named MainThread): whether py-spy
    saw it running (not idle in a wait), and its frames innermost first [(function, file:line)]."""
    threads, cur = [], None
    for line in stack.splitlines():
        if line.startswith("Thread "):
            cur = {"main": '"MainThread"' in line, "frames": [], "active": "(active" in line}
            threads.append(cur)
        elif cur is not None and line.startswith("    ") and line.strip().endswith(")") and " (" in line:
            fn, _sep, where = line.strip().rpartition(" (")
            cur["frames"].append((fn, where[:-1]))
    main = [t for t in threads if t["main"]] or threads
    return (main[0]["active"], main[0]["frames"]) if main else (False, [])


def rank_processes(parts, nodes):
    """[(node name, rank, process)] in vLLM's rank order: the engine's (head's) node first, then by IP; in a node by
    PID."""
    head_ip = nodes[0][1]
    order = sorted(nodes, key=lambda n: (n[1] != head_ip, n[1]))
    out = []
    for name, ip in order:
        part = parts.get(ip) or {}
        procs = []
        for c in (part.get("containers") or {}).values():
            procs += [p for p in c.get("processes") or [] if any(m in p.get("cmd", "") for m in RANK_MARKS)]
        for p in sorted(procs, key=lambda p: p.get("pid", 0)):
            out.append((name, len(out), p))
    return out


def hang_cause(parts, nodes):
    """(slug, sentence) from the ranks' stacks: 'collective hang: spark-2 rank 1 spinning in f (file), spark-1 rank 0
    waiting in all_reduce' when one rank burns its core outside the collective its peers wait in."""
    ranks = rank_processes(parts, nodes)
    if not ranks:
        return "stopped-generating", "engine stopped generating; no rank process found on any node"
    said, spinning, waiting, unknown = [], 0, 0, 0
    for name, r, p in ranks:
        active, frames = py_frames(p.get("stack", ""))
        if not frames:
            unknown += 1
            said.append("%s rank %d: no stack (%s; cpu %s%%, state %s)" % (
                name, r, p.get("stack_error") or "empty dump", p.get("cpu"), p.get("state")))
            continue
        # py-spy names a method Class.method (Python >= 3.11): the collective is the name's last part
        coll = next((fn.rsplit(".", 1)[-1] for fn, _where in frames if fn.rsplit(".", 1)[-1] in COLLECTIVES), None)
        # spinning: it burns its core, or py-spy caught it running (a loaded node gives a spinner only part of one)
        busy = active or (isinstance(p.get("cpu"), (int, float)) and p["cpu"] >= SPIN_CPU)
        fn, where = frames[0]
        if busy and coll is None:
            spinning += 1
            said.append("%s rank %d spinning in %s (%s)" % (name, r, fn, where.rsplit("/", 1)[-1].split(":")[0]))
        elif coll is not None:
            waiting += 1
            said.append("%s rank %d waiting in %s" % (name, r, coll))
        else:
            said.append("%s rank %d in %s (%s)" % (name, r, fn, where.rsplit("/", 1)[-1]))
    spin_first = sorted(said, key=lambda s: " spinning in " not in s)
    if waiting and (spinning or waiting == len(ranks)):
        return "collective-hang", "collective hang: " + ", ".join(spin_first)
    return "stopped-generating", "engine stopped generating: " + ", ".join(spin_first)


def write_text(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


def write_part(d, part):
    """One node's part as files in d: stacks.txt, env.txt, journal-<unit>.txt, memory.txt, ps.txt, dmesg.txt."""
    os.makedirs(d, mode=0o700, exist_ok=True)
    stacks, env = [], []
    for name, c in sorted((part.get("containers") or {}).items()):
        if c.get("error"):
            stacks.append("== container %s: %s\n" % (name, c["error"]))
            continue
        for p in c.get("processes") or []:
            stacks.append("== %s pid %s cpu %s%% state %s wchan %s: %s\n%s%s\n" % (
                name, p.get("pid"), p.get("cpu"), p.get("state"), p.get("wchan") or "-", p.get("cmd", ""),
                p.get("stack", ""), ("(%s)\n" % p["stack_error"]) if p.get("stack_error") else ""))
            env.append("== %s pid %s: %s\n%s\n" % (name, p.get("pid"), p.get("cmd", "")[:120], "".join(
                "%s=%s\n" % kv for kv in sorted((p.get("env") or {}).items()))))
    write_text(os.path.join(d, "stacks.txt"), "".join(stacks) or "(no process captured)\n")
    write_text(os.path.join(d, "env.txt"), "".join(env))
    for unit, text in sorted((part.get("journal") or {}).items()):
        write_text(os.path.join(d, "journal-%s.txt" % re.sub(r"[^\w.@-]", "_", unit)), text)
    for key in ("memory", "ps", "dmesg"):
        write_text(os.path.join(d, key + ".txt"), str(part.get(key, "")))


def prune_incidents(keep):
    """Only the newest keep incident directories stay (their names start with the UTC time)."""
    import shutil
    try:
        names = sorted(n for n in os.listdir(INCIDENT_DIR) if re.match(r"^\d{8}T\d{6}Z-", n))
    except OSError:
        return
    for n in names[:max(len(names) - keep, 0)]:
        shutil.rmtree(os.path.join(INCIDENT_DIR, n), ignore_errors=True)


def save_incident(a, why):
    """Capture every node's part (the head's here, the others' through the KV) and write the incident; its directory, or
    None when nothing could be written. Bounded by --incident-wait seconds for the other nodes' parts."""
    nodes = parse_nodes(a.node or a.incident_node) or [(os.uname()[1], "")]
    head_name, head_ip = nodes[0]
    t0 = time.monotonic()
    ident = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    request = {"id": ident, "time": round(now(), 1), "budget": PART_BUDGET}
    others = list(nodes[1:])
    if others and a.address:
        gcs_nodes(a.ray_container, a.address, a.gcs_timeout, {"put": {INCIDENT_KEY: json.dumps(request)}})
    # the Ray container first: the engine's container may share its PID space (it then lists the ranks too, where py-spy
    # may lack the rights to read them), and what one container captured is skipped in the next
    parts = {head_ip: node_part([(a.ray_container, ["ray::"]), (a.container, None)], [a.unit, a.ray_unit])}
    parts[head_ip]["ip"] = head_ip
    missing = dict((ip, name) for name, ip in others)
    while missing and a.address and time.monotonic() - t0 < a.incident_wait:
        got = gcs_nodes(a.ray_container, a.address, a.gcs_timeout,
                        {"get": ["%s%s:%s" % (INCIDENT_PREFIX, ident, ip) for ip in missing]})
        for key, blob in (got.get("kv") or {}).items():
            ip = key.rsplit(":", 1)[-1]
            part = decode_part(blob)
            if ip in missing and part is not None:
                parts[ip] = part
                del missing[ip]
        if missing:
            time.sleep(3)
    slug, cause = hang_cause(parts, nodes)
    d = os.path.join(INCIDENT_DIR, "%s-%s" % (ident, slug))
    try:
        os.makedirs(d, mode=0o700)
        for name, ip in nodes:
            if ip in parts:
                write_part(os.path.join(d, name), parts[ip])
        summary = {"id": ident, "time": request["time"], "cause": cause, "class": slug, "why": why,
                   "unit": a.unit, "seconds": round(time.monotonic() - t0, 1),
                   "nodes": dict((name, "captured" if ip in parts else
                                  "no part within %d s (its Ray watchdog did not answer)" % a.incident_wait)
                                 for name, ip in nodes),
                   "stacks_by": sorted(set(str(c.get("spy")) for p in parts.values()
                                           for c in (p.get("containers") or {}).values() if "spy" in c))}
        write_text(os.path.join(d, "incident.json"), json.dumps(summary, indent=2, sort_keys=True) + "\n")
        write_text(os.path.join(d, "cause.txt"), cause + "\n")
    except OSError as e:
        sys.stderr.write("sparkfleet-watchdog: incident %s not written (%s); restarting anyway\n" % (d, e))
        return None, cause
    prune_incidents(a.incidents_keep)
    return d, cause


# --------------------------------------------------------------------------- ExecStopPost
def record(a):
    """Why the unit's main process ended (systemd sets SERVICE_RESULT, EXIT_CODE, EXIT_STATUS for ExecStopPost)."""
    result = os.environ.get("SERVICE_RESULT", "?")
    code, status = os.environ.get("EXIT_CODE", ""), os.environ.get("EXIT_STATUS", "")
    if result == "success" and code in ("", "exited") and status == "1":
        # Ray's `ray start --block` exits 1 both when a stop drains it and when the start itself failed
        cause = "exited 1 (a stop, or a failed `ray start`: see the unit's journal)"
    elif result == "success" and code in ("", "exited") and status in ("", "0", "143"):
        cause = "stopped (exit %s)" % (status or "0")
    elif code == "exited" and status == "3":
        # sparkfleet-ray-guard's refusal or sparkfleet-wait's timeout (never 1: the Ray unit counts 1 as success)
        cause = "start refused or timed out (exit 3: the head-identity guard or the bounded wait; see the journal)"
    elif result in ("exit-code", "timeout") and not code and not status:
        # systemd sets no exit code when a start job's ExecStartPre fails: the engine never ran
        cause = ("start refused before it ran (an ExecStartPre: vLLM's memory gate or GPU wait, Ray's guard or wait;"
                 " see the unit's journal)")
    elif code == "killed":
        cause = "killed by signal %s" % status
    elif code == "dumped":
        cause = "crashed (signal %s, core dumped)" % status
    elif status == "137":
        cause = "container killed (exit 137: SIGKILL)"
    else:
        cause = "%s (%s %s)" % (result, code or "-", status or "-")
    log_event(a.unit, "stopped", cause, by="systemd", result=result, exit_code=code, exit_status=status)
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="sparkfleet-watchdog")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("ray")
    r.add_argument("--unit", required=True)
    r.add_argument("--container", required=True)
    r.add_argument("--address", required=True)
    r.add_argument("--node-ip", required=True)
    r.add_argument("--head", action="store_true")
    r.add_argument("--grace", type=int, default=60, help="seconds after a start before the node is judged")
    r.add_argument("--checks", type=int, default=2, help="bad checks in a row before a restart")
    r.add_argument("--timeout", type=int, default=20, help="seconds the GCS may take to answer")
    r.add_argument("--pg-stuck", type=int, default=60,
                   help="head: seconds a placement group may stay pending while the free GPUs would hold it (0: never)")
    r.add_argument("--pg-stuck-leak", type=int, default=10,
                   help="head: the same once the GCS logged a failed removal of a dead node's bundles (0: no shortcut)")
    v = sub.add_parser("vllm")
    v.add_argument("--unit", required=True)
    v.add_argument("--container", required=True)
    v.add_argument("--url", required=True)
    v.add_argument("--model", required=True)
    v.add_argument("--env-file", required=True)
    v.add_argument("--timeout", type=int, default=20, help="seconds a one-token completion may take")
    v.add_argument("--failures", type=int, default=2, help="failed probes in a row before a restart")
    v.add_argument("--ray-unit", default="sparkfleet-ray", help="the head's Ray unit (vLLM requires it)")
    v.add_argument("--start-grace", type=int, default=1800,
                   help="seconds a start that has not served yet is left alone (weight loading)")
    v.add_argument("--incidents-keep", type=int, default=0,
                   help="save an incident before restarting an engine whose processes are alive; keep the newest N"
                        " (0: none)")
    v.add_argument("--incident-wait", type=int, default=45,
                   help="seconds to wait for the other nodes' parts of an incident")
    v.add_argument("--incident-node", action="append", default=[],
                   help="NAME=FABRIC_IP of every node, the head first (when --node is not given)")
    for p in (v, sub.add_parser("gate")):
        p.add_argument("--node", action="append", default=[], help="NAME=FABRIC_IP of every node, the head first")
        p.add_argument("--ray-container", default="sparkfleet-ray", help="the head's Ray container (its GCS client)")
        p.add_argument("--address", default="", help="the head's GCS (HEAD:PORT)")
        p.add_argument("--gcs-timeout", type=int, default=20, help="seconds the GCS may take to answer")
        p.add_argument("--model-dir", default="", help="the model's directory (its page cache is dropped)")
        p.add_argument("--utilization", type=float, default=0.80, help="vLLM's gpu_memory_utilization")
        p.add_argument("--margin", type=float, default=0.02, help="fraction of a node's memory free beyond it")
        p.add_argument("--tolerance", type=float, default=0.05,
                       help="fraction of a node's memory it may hold above its baseline (its last healthy start)")
        p.add_argument("--max-age", type=int, default=60, help="seconds a node's memory report counts")
        if p is not v:
            p.add_argument("--unit", required=True)
            p.add_argument("--wait", dest="timeout", type=int, default=120,
                           help="seconds to wait for every node's memory before escalating")
            p.add_argument("--poll", type=float, default=5, help="seconds between two reads")
            p.add_argument("--starts", type=int, default=3, help="starts that did not serve before escalating")
            p.add_argument("--window", type=int, default=3600, help="the window those starts are counted in")
            p.add_argument("--notify-file", default="", help="file holding the command run once per escalation")
            p.add_argument("--gpu-wait", nargs=3, default=None, metavar=("CONTAINER", "COUNT", "TIMEOUT"),
                           help="first wait (sparkfleet-wait gpus) until Ray's cluster has the engine's GPUs; a wait"
                                " that ends short counts as a refusal")
    r.add_argument("--model-dir", default="", help="publish this node's memory; drop this model's page cache")
    c = sub.add_parser("record")
    c.add_argument("--unit", required=True)
    a = ap.parse_args(argv)
    return {"ray": check_ray, "vllm": check_vllm, "gate": gate, "record": record}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
