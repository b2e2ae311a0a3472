# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure helpers for ray_cluster_check: the probe program sent to Ray's Python, and the
comparison of what Ray registered with what the inventory expects.

Nothing here touches the network or runs a command; the module does that.
"""

from __future__ import annotations

import json
import math

from ansible_collections.sparkfleet.vllm.plugins.module_utils._settings import render_text
from ansible_collections.sparkfleet.vllm.plugins.module_utils import _json

# The probe program prints exactly one line starting with this marker, followed by JSON.
# A marker (rather than "the whole stdout is JSON") survives Ray's own chatter on stdout.
PROBE_MARKER = "SPARKFLEET_RAY_CHECK "

# Exit codes of the probe program (the JSON line is printed in every case).
PROBE_RC_OK = 0
PROBE_RC_ERROR = 2
PROBE_RC_DEADLINE = 3

# Ray's head node carries this resource; node:<ip> is added for every node.
HEAD_RESOURCE = "node:__internal_head__"

FIX_PIN = "check that every node runs ray start --node-ip-address <fabric ip>"

# Sent on stdin to `python3 - '<config json>'` where Ray is installed (venv or vLLM container).
# It must run on the Python that ships with Ray (3.9+), be self-contained, bound every wait,
# and end with os._exit so a stuck fetch cannot keep the process (or `docker exec`) alive.
PROBE_PROGRAM = r'''
import json
import os
import sys
import threading
import time

MARKER = "SPARKFLEET_RAY_CHECK "
CFG = json.loads(sys.argv[1])
RESULT = {"ray_version": None, "address": CFG["address"], "connected": False,
          "phase": "import ray", "driver_node_id": None, "nodes": [], "probes": [],
          "error": None}
_LOCK = threading.Lock()


def emit(code):
    with _LOCK:
        sys.stdout.write(MARKER + json.dumps(RESULT, default=str) + "\n")
        sys.stdout.flush()
        # No ray.shutdown(): it can block behind a stuck object fetch.
        os._exit(code)


def on_deadline():
    RESULT["error"] = {"phase": RESULT["phase"], "kind": "deadline",
                       "detail": "the probe program hit its deadline of %s s" % CFG["deadline"]}
    emit(3)


_WATCHDOG = threading.Timer(CFG["deadline"], on_deadline)
_WATCHDOG.daemon = True
_WATCHDOG.start()


def describe(exc):
    cause = getattr(exc, "cause", None)
    kind = "error"
    for e in (exc, cause):
        if e is not None and isinstance(e, TimeoutError):
            kind = "timeout"
        elif e is not None and type(e).__name__ == "ObjectFetchTimedOutError":
            kind = "timeout"
    text = str(cause if cause is not None else exc).strip().splitlines()
    return kind, "%s: %s" % (type(cause if cause is not None else exc).__name__,
                             text[-1] if text else "")


try:
    import ray
except Exception as exc:
    RESULT["error"] = {"phase": "import ray", "kind": "import",
                       "detail": "%s: %s (python %s)" % (type(exc).__name__, exc, sys.executable)}
    emit(2)

RESULT["ray_version"] = getattr(ray, "__version__", None)
RESULT["phase"] = "connect"
# ray.init() retries an unreachable GCS for minutes: refuse fast, and bound the rest.
if ":" in CFG["address"]:
    import socket
    gcs_host, gcs_port = CFG["address"].rsplit(":", 1)
    try:
        socket.create_connection((gcs_host, int(gcs_port)), timeout=5).close()
    except Exception as exc:
        RESULT["error"] = {"phase": "connect", "kind": "unreachable",
                           "detail": "no Ray GCS answers at %s (%s)" % (CFG["address"], exc)}
        emit(2)


def on_connect_deadline():
    RESULT["error"] = {"phase": "connect", "kind": "timeout",
                       "detail": "ray.init() did not return within %s s" % CFG["connect_timeout"]}
    emit(2)


_CONNECT_WATCHDOG = threading.Timer(CFG["connect_timeout"], on_connect_deadline)
_CONNECT_WATCHDOG.daemon = True
_CONNECT_WATCHDOG.start()
try:
    ray.init(address=CFG["address"], logging_level="ERROR", log_to_driver=False,
             namespace="sparkfleet_ray_check")
except Exception as exc:
    RESULT["error"] = {"phase": "connect", "kind": describe(exc)[0], "detail": describe(exc)[1]}
    emit(2)
_CONNECT_WATCHDOG.cancel()
RESULT["connected"] = True

RESULT["phase"] = "list nodes"
RESULT["nodes"] = ray.nodes()
RESULT["driver_node_id"] = ray.get_runtime_context().get_node_id()
# probe_if_ips: probe only a cluster that is whole (exactly these nodes alive); probing one still forming can hang.
if not CFG["probe"] and sorted(CFG.get("probe_if_ips") or [None]) != sorted(
        n.get("NodeManagerAddress") for n in RESULT["nodes"] if n.get("Alive")):
    emit(0)
RESULT["probed"] = True

SIZE = int(CFG["object_size_mb"] * 1024 * 1024)
TIMEOUT = float(CFG["timeout"])
PATTERN = b"sparkfleet"


def payload(n):
    return (PATTERN * (n // len(PATTERN) + 1))[:n]


def intact(data, n):
    return len(data) == n and bytes(data[:10]) == PATTERN[:10] and bytes(data[-7:]) == payload(n)[-7:]


# num_cpus=0: the probes must run even while vLLM's workers hold every CPU slot.
@ray.remote(num_cpus=0, max_retries=0)
def where():
    import socket
    return {"node_id": ray.get_runtime_context().get_node_id(), "hostname": socket.gethostname()}


@ray.remote(num_cpus=0, max_retries=0)
def make(n):
    return payload(n)


@ray.remote(num_cpus=0, max_retries=0)
def pull(refs, n, timeout):
    # The worker fetches an object that lives in the head's object store: the direction a
    # driver or a vLLM rank on the worker needs, proven from the head's single driver.
    start = time.monotonic()
    data = ray.get(refs[0], timeout=timeout)
    return {"seconds": time.monotonic() - start, "intact": intact(data, n)}


def pinned(node_id):
    try:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)}
    except ImportError:
        return {"resources": {"node:" + NODE_IP[node_id]: 0.01}}


NODE_IP = dict((n.get("NodeID"), n.get("NodeManagerAddress")) for n in RESULT["nodes"])
workers = [n for n in RESULT["nodes"]
           if n.get("Alive") and n.get("NodeID") != RESULT["driver_node_id"]]
source = None
for node in workers:
    nid = node["NodeID"]
    probe = {"node_id": nid, "ip": node.get("NodeManagerAddress"), "schedule_s": None,
             "from_worker_s": None, "to_worker_s": None, "errors": []}
    RESULT["probes"].append(probe)
    opts = pinned(nid)

    RESULT["phase"] = "schedule on " + probe["ip"]
    start = time.monotonic()
    try:
        seen = ray.get(where.options(**opts).remote(), timeout=TIMEOUT)
        probe["schedule_s"] = round(time.monotonic() - start, 3)
        probe["hostname"] = seen.get("hostname")
    except Exception as exc:
        kind, detail = describe(exc)
        probe["errors"].append({"phase": "schedule", "kind": kind, "detail": detail})
        continue

    RESULT["phase"] = "fetch from " + probe["ip"]
    ref = make.options(**opts).remote(SIZE)
    ready, _ = ray.wait([ref], timeout=TIMEOUT, fetch_local=False)
    if not ready:
        probe["errors"].append({"phase": "from_worker", "kind": "timeout",
                                "detail": "the object was not created on the worker in time"})
    else:
        start = time.monotonic()
        try:
            data = ray.get(ref, timeout=TIMEOUT)
            if intact(data, SIZE):
                probe["from_worker_s"] = round(time.monotonic() - start, 3)
            else:
                probe["errors"].append({"phase": "from_worker", "kind": "corrupt",
                                        "detail": "received %d bytes that do not match" % len(data)})
            del data
        except Exception as exc:
            kind, detail = describe(exc)
            probe["errors"].append({"phase": "from_worker", "kind": kind, "detail": detail})
    del ref

    if CFG["reverse_from"] == "task":
        RESULT["phase"] = "fetch by " + probe["ip"]
        if source is None:
            source = ray.put(payload(SIZE))
        # The list keeps Ray from resolving the ref before the task starts, so the
        # fetch happens inside pull() under its own timeout.
        try:
            got = ray.get(pull.options(**opts).remote([source], SIZE, TIMEOUT), timeout=TIMEOUT + 10)
            if got["intact"]:
                probe["to_worker_s"] = round(got["seconds"], 3)
            else:
                probe["errors"].append({"phase": "to_worker", "kind": "corrupt",
                                        "detail": "the worker received bytes that do not match"})
        except Exception as exc:
            kind, detail = describe(exc)
            probe["errors"].append({"phase": "to_worker", "kind": kind, "detail": detail})

RESULT["phase"] = "done"
emit(0)
'''


def probe_config(address, probe=True, object_size_mb=16, timeout=20, reverse_from="task",
                 deadline=None, workers=1, probe_if_ips=None):
    """The JSON argument for PROBE_PROGRAM and the hard deadline (seconds) it runs under.

    Connecting (ray.init, with or without an address) waits at most timeout seconds, like every other wait.
    ``probe_if_ips`` (with probe false): probe anyway when exactly these IPs are Ray's alive nodes.
    """
    if deadline is None:
        deadline = probe_deadline(timeout, workers if probe or probe_if_ips else 0)
    cfg = {"address": address, "probe": bool(probe), "object_size_mb": float(object_size_mb),
           "timeout": float(timeout), "reverse_from": reverse_from, "deadline": float(deadline),
           "connect_timeout": float(min(timeout, deadline))}
    if probe_if_ips and not probe:
        cfg["probe_if_ips"] = sorted(probe_if_ips)
    return json.dumps(cfg, sort_keys=True), deadline


def probe_deadline(timeout, workers, connect=None):
    """Worst case of the probe program: connect (timeout), then per worker schedule + wait + fetch + pull."""
    connect = timeout if connect is None else connect
    return int(math.ceil(connect + max(workers, 0) * (4 * timeout + 10) + 15))


def parse_probe_output(stdout):
    """Return the probe program's JSON document, or None when stdout carries no marker line."""
    doc = None
    for line in (stdout or "").splitlines():
        if line.startswith(PROBE_MARKER):
            doc = line[len(PROBE_MARKER):]
    if doc is None:
        return None
    try:
        return _json.loads(doc, "the probe's document")
    except ValueError:
        return None


def _short(name):
    return (name or "").split(".")[0].lower()


def normalize_nodes(raw_nodes):
    """ray.nodes() entries -> the module's node records (stable keys, floats for resources)."""
    nodes = []
    for raw in raw_nodes or []:
        resources = dict((k, v) for k, v in (raw.get("Resources") or {}).items())
        alive = raw.get("Alive", raw.get("alive", False))
        nodes.append({
            "node_id": raw.get("NodeID"),
            "ip": raw.get("NodeManagerAddress"),
            "hostname": raw.get("NodeManagerHostname"),
            "alive": bool(alive),
            "head": HEAD_RESOURCE in resources,
            "gpus": resources.get("GPU", 0.0),
            "cpus": resources.get("CPU", 0.0),
            "resources": resources,
            "death_reason": (raw.get("DeathReasonMessage") or None) if not alive else None,
        })
    return nodes


def normalize_expected(expected):
    """Inventory list -> [{host, ip, head}]; the entry flagged head, else the first, is the head."""
    out = [{"host": e["host"], "ip": e["ip"], "head": bool(e.get("head"))} for e in expected or []]
    if out and not any(e["head"] for e in out):
        out[0]["head"] = True
    return out


def compare(nodes, expected):
    """Match registered nodes to expected hosts.

    Pairing order: same IP (correct), then same hostname, then the Ray head to the expected
    head, then a single leftover on each side; those later pairings are mismatches.
    Returns dict(matched=[{host, ip, node_id}], mismatched=[{host, registered_ip, expected_ip,
    node_id}], missing=[{host, expected_ip, reason}], extra=[{node_id, ip, hostname}],
    dead=[{node_id, ip, hostname, reason}], host_of={node_id: host}).
    """
    alive = [n for n in nodes if n["alive"]]
    free_nodes = list(alive)
    free_expected = list(expected)
    matched, mismatched = [], []

    def take(exp, node, correct):
        free_expected.remove(exp)
        free_nodes.remove(node)
        if correct:
            matched.append({"host": exp["host"], "ip": node["ip"], "node_id": node["node_id"]})
        else:
            mismatched.append({"host": exp["host"], "registered_ip": node["ip"],
                               "expected_ip": exp["ip"], "node_id": node["node_id"]})

    for exp in list(free_expected):
        same_ip = [n for n in free_nodes if n["ip"] == exp["ip"]]
        if same_ip:
            take(exp, same_ip[0], True)
    for exp in list(free_expected):
        same_name = [n for n in free_nodes if _short(n["hostname"]) == _short(exp["host"])]
        if len(same_name) == 1:
            take(exp, same_name[0], False)
    for exp in list(free_expected):
        heads = [n for n in free_nodes if n["head"]]
        if exp["head"] and len(heads) == 1:
            take(exp, heads[0], False)
    if len(free_expected) == 1 and len(free_nodes) == 1:
        take(free_expected[0], free_nodes[0], False)

    dead = [{"node_id": n["node_id"], "ip": n["ip"], "hostname": n["hostname"],
             "reason": n["death_reason"]} for n in nodes if not n["alive"]]
    missing = []
    for exp in free_expected:
        gone = [d for d in dead if d["ip"] == exp["ip"] or _short(d["hostname"]) == _short(exp["host"])]
        if gone:
            reason = "registered at %s but dead" % gone[-1]["ip"]
            if gone[-1]["reason"]:
                reason += " (%s)" % gone[-1]["reason"]
        else:
            reason = "not registered"
        missing.append({"host": exp["host"], "expected_ip": exp["ip"], "reason": reason})
    # Without an inventory nothing is extra: the check is then about the probes alone.
    extra = [{"node_id": n["node_id"], "ip": n["ip"], "hostname": n["hostname"]}
             for n in free_nodes] if expected else []

    host_of = {}
    for m in matched:
        host_of[m["node_id"]] = m["host"]
    for m in mismatched:
        host_of[m["node_id"]] = m["host"]
    return {"matched": matched, "mismatched": mismatched, "missing": missing, "extra": extra,
            "dead": dead, "host_of": host_of}


def _name(node_id, ip, host_of, hostname=None):
    return host_of.get(node_id) or hostname or ip or node_id


def probe_reports(raw_probes, host_of, head_name, head_ip, timeout, reverse):
    """Probe program records -> per-worker reports with one sentence per failure."""
    reports = []
    for raw in raw_probes or []:
        host = _name(raw.get("node_id"), raw.get("ip"), host_of, raw.get("hostname"))
        ip = raw.get("ip")
        errors = []
        for err in raw.get("errors") or []:
            errors.append(probe_error_text(err, host, ip, head_name, head_ip, timeout))
        # A probe cut off by the deadline has neither a time nor an error for a direction.
        if not errors and (raw.get("from_worker_s") is None
                           or (reverse and raw.get("to_worker_s") is None)):
            errors.append("the probe of %s (registered %s) did not finish" % (host, ip))
        reports.append({
            "host": host, "node_id": raw.get("node_id"), "ip": ip,
            "schedule_s": raw.get("schedule_s"),
            "to_worker_s": raw.get("to_worker_s"), "from_worker_s": raw.get("from_worker_s"),
            "ok": not errors, "error": "; ".join(errors) or None,
        })
    return reports


def probe_error_text(err, host, ip, head_name, head_ip, timeout):
    phase, kind, detail = err.get("phase"), err.get("kind"), err.get("detail")
    wait = "timed out after %s s" % _fmt_s(timeout)
    if phase == "schedule":
        if kind == "timeout":
            return ("a task pinned to %s (registered %s) did not run within %s s: the node accepts no "
                    "work from the head; %s" % (host, ip, _fmt_s(timeout), FIX_PIN))
        return "a task pinned to %s (registered %s) failed: %s" % (host, ip, detail)
    if phase == "from_worker":
        if kind == "timeout":
            return ("object fetch from %s (registered %s) %s: the node's raylet is not reachable from "
                    "the head; %s" % (host, ip, wait, FIX_PIN))
        return "object fetch from %s (registered %s) failed: %s" % (host, ip, detail)
    if phase == "to_worker":
        if kind == "timeout":
            return ("object fetch by %s (registered %s) from the head %s (registered %s) %s: the head's "
                    "raylet is not reachable from the worker; %s" % (host, ip, head_name, head_ip, wait, FIX_PIN))
        return ("object fetch by %s (registered %s) from the head %s (registered %s) failed: %s"
                % (host, ip, head_name, head_ip, detail))
    return "probe of %s (registered %s) failed: %s" % (host, ip, detail)


def _fmt_s(seconds):
    return ("%g" % float(seconds)) if seconds is not None else "?"


def problems_of(comparison, nodes, expected, probes):
    """Every problem as one sentence a person can act on, in the order worth reading."""
    problems = []
    for m in comparison["mismatched"]:
        problems.append("%s registered with Ray as %s, expected its fabric IP %s"
                        % (m["host"], m["registered_ip"], m["expected_ip"]))
    for m in comparison["missing"]:
        problems.append("%s (expected %s) is missing from the Ray cluster: %s"
                        % (m["host"], m["expected_ip"], m["reason"]))
    for x in comparison["extra"]:
        problems.append("unexpected Ray node %s (hostname %s, node id %s) is not in the inventory"
                        % (x["ip"], x["hostname"], (x["node_id"] or "")[:12]))
    heads = [n for n in nodes if n["alive"] and n["head"]]
    want = [e for e in expected if e["head"]]
    if heads and want:
        head_host = comparison["host_of"].get(heads[0]["node_id"])
        if head_host and head_host != want[0]["host"]:
            problems.append("the Ray head runs on %s (%s), the inventory expects %s to be the head"
                            % (head_host, heads[0]["ip"], want[0]["host"]))
    for p in probes:
        if not p["ok"]:
            problems.append(p["error"])
    return problems


def hint_for(comparison, probes, error=None, names=None, address=None):
    """One hint naming the fix for the first kind of problem found.

    names: how the hint names the settings to change ({setting: name}, module_utils/_settings); address: the
    head's GCS address the check used (host:port), shown in the command that starts a missing node.
    """
    if error:
        return None
    if comparison["mismatched"]:
        m = comparison["mismatched"][0]
        return ("start Ray on %s with --node-ip-address %s" % (m["host"], m["expected_ip"])
                + render_text(" ({fabric_ip}), then restart the Ray workers so every node registers its fabric IP",
                              names))
    if comparison["missing"]:
        m = comparison["missing"][0]
        gcs = address if address and address != "auto" else "<head fabric ip>:6379"
        return ("start Ray on %s: ray start --address %s --node-ip-address %s" % (m["host"], gcs, m["expected_ip"])
                + render_text(" ({ray_cluster})", names))
    if comparison["extra"]:
        return ("stop Ray on the unexpected node(s) or add them to the inventory with their fabric IP; "
                "stale containers with a restart policy are a common source")
    if any(not p["ok"] for p in probes):
        return render_text("every node must run ray start --node-ip-address <its fabric ip> ({fabric_ip}), and the "
                           "fabric IPs must reach each other on all ports (no firewall, same MTU on both ends)", names)
    return None


def summary_of(nodes, expected, comparison, probes, object_size_mb, probed):
    alive = [n for n in nodes if n["alive"]]
    gpus = sum(n["gpus"] for n in alive)
    text = "%d alive Ray node(s) with %g GPU(s)" % (len(alive), gpus)
    if expected:
        text += ", %d/%d expected on their fabric IP" % (len(comparison["matched"]), len(expected))
    if probed:
        good = [p for p in probes if p["ok"]]
        text += "; %g MiB object round trips ok for %d/%d worker(s)" % (object_size_mb, len(good), len(probes))
        for p in good:
            text += " (%s: to %s s, from %s s)" % (p["host"], _fmt_s(p["to_worker_s"]), _fmt_s(p["from_worker_s"]))
    return text
