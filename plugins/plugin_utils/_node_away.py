# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A node that went away during a run (rebooted, powered off, lost its ssh), told apart from the errors it causes.

When a worker reboots under site.yml the run fails late and elsewhere: the head's Ray check or vLLM's start ends with
Ray's TaskUnschedulableError or a node "marked dead", or the worker's own task ends UNREACHABLE. The run's one
failure should be the cause, the node, and the next step. Pure functions: the report callback feeds them every
failed or unreachable result and prints the verdict.
"""

from __future__ import annotations

import re
import time

# A connection that a task on one node made to another (the model transfer's ssh from the head to a worker) dropped
# or was refused: the other node went away. What OpenSSH prints, naming the address.
SSH_PEER_GONE = re.compile(
    r"ssh: connect to host (?P<ip>[0-9a-fA-F.:]+) port \d+: (?:Connection refused|Connection timed out|"
    r"No route to host|Host is down|Network is unreachable)|"
    r"Connection to (?P<ip2>[0-9a-fA-F.:]+) closed by remote host|"
    r"(?:Connection reset by|Connection closed by) (?P<ip3>[0-9a-fA-F.:]+) port \d+")

# Ray saying a node left the cluster. The GCS (and the driver relaying it) names the node's address; Ray's
# TaskUnschedulableError for a task pinned to a node does not (ray_cluster_check's pinned probes end that way).
RAY_NODE_DEAD = re.compile(
    r"node id: (?P<node>[0-9a-f]{16,}) and address: (?P<ip>[0-9a-fA-F.:]+).{0,200}?has been marked dead")
RAY_NODE_GONE = re.compile(
    r"(?:TaskUnschedulableError|ActorUnschedulableError|is not schedulable).{0,300}?"
    r"NodeAffinitySchedulingStrategy doesn't exist any more|"
    r"NodeAffinitySchedulingStrategy doesn't exist any more|"
    r"has been marked dead because the detector has missed too many heartbeats|NodeDiedError")

# ray_cluster_check's sentence for a pinned probe that failed (plugins/module_utils/ray/_ray.py, probe_error_text).
PINNED = re.compile(r"a task pinned to (?P<host>\S+) \(registered (?P<ip>[0-9a-fA-F.:]+)\) failed")

# The head's fabric check (plugins/module_utils/fabric/_reach.py) naming a worker whose sshd no longer answers. Before anything
# ran on that worker in this run it is a worker that never came up (preflight's words say so); after, it went away.
FABRIC_LOST = re.compile(
    r"(?P<me>\S+) cannot reach (?P<peer>\S+) \((?P<ip>[0-9a-fA-F.:]+)\) over the fabric: .{0,200}?"
    r"(?:nothing listens on port \d+ \(sshd\)|does not answer on port \d+)")

NEXT_STEP = "when it is back, run site.yml again"


def _first_line(text, pattern):
    for line in (text or "").splitlines():
        if pattern.search(line):
            return line.strip()[:300]
    return None


def _clock(ts):
    return time.strftime("%H:%M", time.localtime(ts))


def result_text(result):
    """Everything a failed result says, in one string (msg, module output, the evidence vllm_wait quotes)."""
    parts = []
    for key in ("msg", "module_stderr", "module_stdout", "stderr", "stdout", "summary", "error"):
        value = result.get(key)
        if isinstance(value, str):
            parts.append(value)
    failure = result.get("failure")
    if isinstance(failure, dict):
        for key in ("evidence", "line", "lines"):
            value = failure.get(key)
            if isinstance(value, str):
                parts.append(value)
            elif isinstance(value, list):
                parts.extend(str(v) for v in value)
    for problem in result.get("problems") or ():
        parts.append(str(problem))
    return "\n".join(parts)


def ip_hosts(result):
    """{ip: inventory host} from what a result reports (ray_cluster_check's expected nodes and registered nodes)."""
    found = {}
    for key in ("expected", "nodes", "missing", "mismatched"):
        for entry in result.get(key) or ():
            if not isinstance(entry, dict) or not entry.get("host"):
                continue
            for ip_key in ("ip", "expected_ip"):
                if entry.get(ip_key):
                    found.setdefault(str(entry[ip_key]), str(entry["host"]))
    return found


def classify(status, host, result, hosts_by_ip=None, answered=()):
    """A verdict when a failed (``status`` failed) or unreachable result shows a node went away, else None.

    The verdict is ``{host, how, evidence}``: ``host`` the node that went away (None when Ray names no node this
    run knows), ``how`` "stopped answering ssh" or "left the Ray cluster", ``evidence`` the line that shows it.
    ``answered``: the nodes that ran a task of this run (a fabric check that no longer reaches one names it gone).
    """
    result = result if isinstance(result, dict) else {}
    text = result_text(result)
    if status == "unreachable":
        return {"host": host, "how": "stopped answering ssh", "evidence": _first_line(text, re.compile(".")) or ""}
    if result.get("unreachable"):
        return {"host": host, "how": "stopped answering ssh", "evidence": _first_line(text, re.compile(".")) or ""}
    ssh = _first_line(text, re.compile(r"Shared connection to \S+ closed|Connection to \S+ closed by remote host"))
    if ssh and "MODULE FAILURE" in str(result.get("msg", "")):
        # the node's sshd went down under the running module (a reboot): the task never finished there
        return {"host": host, "how": "stopped answering ssh", "evidence": ssh}
    hosts_by_ip = hosts_by_ip or {}
    lost = FABRIC_LOST.search(text)
    if lost and lost.group("peer") in answered and lost.group("peer") != host:
        return {"host": lost.group("peer"), "how": "stopped answering ssh", "ip": lost.group("ip"),
                "evidence": _first_line(text, FABRIC_LOST) or lost.group(0)}
    peer = SSH_PEER_GONE.search(text)
    if peer:
        ip = peer.group("ip") or peer.group("ip2") or peer.group("ip3")
        if hosts_by_ip.get(ip) and hosts_by_ip[ip] != host:
            return {"host": hosts_by_ip[ip], "how": "stopped answering ssh", "ip": ip,
                    "evidence": _first_line(text, SSH_PEER_GONE) or peer.group(0)}
    dead = RAY_NODE_DEAD.search(text)
    if dead:
        return {"host": hosts_by_ip.get(dead.group("ip")) or None, "how": "left the Ray cluster",
                "evidence": _first_line(text, RAY_NODE_DEAD) or dead.group(0), "ip": dead.group("ip")}
    gone = _first_line(text, RAY_NODE_GONE)
    if gone:
        pinned = PINNED.search(gone)
        missing = [m.get("host") for m in result.get("missing") or () if isinstance(m, dict) and m.get("host")]
        if pinned:
            named = hosts_by_ip.get(pinned.group("ip")) or pinned.group("host")
        else:
            named = missing[0] if len(missing) == 1 else None
        return {"host": named, "how": "left the Ray cluster", "evidence": gone}
    return None


def merge(verdicts):
    """The run's one verdict from every one it gathered, in order: a named node over an unnamed one, the first
    seen of each. A node that stopped answering ssh and also left Ray is the same event."""
    named = [v for v in verdicts if v.get("host")]
    if named:
        first = dict(named[0])
        for v in named[1:]:
            if v["host"] == first["host"] and v["how"] != first["how"]:
                first["also"] = v["how"]
        return first
    return dict(verdicts[0]) if verdicts else None


def message(verdict, at=None):
    """One sentence: the node, what happened and when, and the next step."""
    when = " at %s" % _clock(at) if at is not None else ""
    how = verdict["how"] + when
    if verdict.get("also"):
        how += "; it also %s" % verdict["also"]
    if verdict.get("host"):
        return "%s went away during the run (%s): %s" % (verdict["host"], how, NEXT_STEP)
    where = " (Ray's node %s)" % verdict["ip"] if verdict.get("ip") else ""
    return ("a node of the cluster went away during the run%s (%s): find which with status.yml; %s"
            % (where, how, NEXT_STEP))
