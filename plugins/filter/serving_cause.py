# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter: sparkfleet.vllm.serving_cause (documented in serving_cause.yml)."""

from __future__ import annotations

import time

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _json
from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._checks import fail

_WHERE = "serving_cause"


def parse_units(text):
    """`date +%s; systemctl show --timestamp=unix -p ... UNIT...` -> (now, {unit Id: {property: value}})."""
    lines = str(text or "").splitlines()
    now = None
    if lines and lines[0].strip().isdigit():
        now = int(lines.pop(0).strip())
    units, current = {}, {}
    for line in lines + [""]:
        if not line.strip():
            if current.get("Id"):
                units[current["Id"]] = current
            current = {}
            continue
        key, sep, value = line.partition("=")
        if sep:
            current[key] = value
    return now, units


def sections(text):
    """A node's read: the `systemctl show` blocks, then optional sections each opened by a line `@@ NAME`
    (journal, events, scheduler, model) -> {"units": text, NAME: text, ...}."""
    out, name, lines = {}, "units", []
    for line in str(text or "").splitlines():
        if line.startswith("@@ "):
            out[name] = "\n".join(lines)
            name, lines = line[3:].strip(), []
        else:
            lines.append(line)
    out[name] = "\n".join(lines)
    return out


def _stamp(value):
    """'@1796095028' (systemctl --timestamp=unix) -> 1796095028; '' or 'n/a' -> None."""
    value = str(value or "").strip()
    if value.startswith("@") and value[1:].replace(".", "", 1).isdigit():
        return float(value[1:])
    return None


def _state(props):
    state = "%s/%s" % (props.get("ActiveState", "?"), props.get("SubState", "?"))
    restarts = props.get("NRestarts", "")
    if restarts and restarts != "0":
        state += ", restarted %s time(s) by systemd" % restarts
    return state


def _ago(now, when):
    return "" if now is None or when is None else " %d s ago" % max(0, now - when)


# Ray's words for a token the head does not accept (raylet, GCS client, gRPC interceptor), in the node's Ray journal.
TOKEN_REJECTED = ("InvalidAuthToken", "Authentication token is missing or incorrect",
                  "Invalid or missing authentication token", "UNAUTHENTICATED")


def _text(value):
    """A registered command result's stdout, or the text itself."""
    if isinstance(value, dict):
        return str(value.get("stdout") or "")
    return str(value or "")


def _token_rejected(journal):
    for line in reversed(_text(journal).splitlines()):
        for word in TOKEN_REJECTED:
            if word in line:
                return " ".join(line.split())[:200]
    return None


def _guard_refusal(journal):
    """The Ray unit's journal -> what its head-identity guard last refused (sparkfleet-ray-guard: port held by X), or
    None. Such a start is refused at every retry while the holder stays: nothing comes back by itself."""
    for line in reversed(_text(journal).splitlines()):
        at = line.find("sparkfleet-ray-guard: ")
        if at >= 0 and " taken by " in line:
            return " ".join(line[at + len("sparkfleet-ray-guard: "):].split())[:240]
    return None


DISK_FLOOR_MB = 100     # below it the supervision log and the deploy's state files stop being written


def _disk_free_mb(text):
    """`df -P -B1M PATH | tail -n 1` -> (MB available, mount point), or None."""
    parts = _text(text).split()
    if len(parts) >= 6 and parts[3].isdigit():
        return int(parts[3]), parts[5]
    return None


def _model_copy(state):
    """`cat DEST/.sparkfleet-model` (model_sync's key=value copy state) -> the reason when the copy is incomplete."""
    props = {}
    for line in _text(state).splitlines():
        key, sep, value = line.partition("=")
        if sep:
            props[key.strip()] = value.strip()
    if props.get("copy") == "incomplete":
        return props.get("reason") or "a sync did not finish"
    return None


def _model_manifest(text, host):
    """sparkfleet_model.py status's JSON -> sentences: the model changed since the sync (stat), the last scrub found a
    file whose content is not the head's; [] when neither (or nothing was recorded yet)."""
    try:
        data = _json.loads(_text(text).strip() or "{}", "the model status")
    except ValueError:
        return []
    if not isinstance(data, dict):
        return []
    out = []
    if data.get("state") == "changed" and data.get("msg"):
        out.append("%s: %s" % (host, data["msg"]))
    scrub = data.get("scrub")
    if isinstance(scrub, dict) and scrub.get("state") == "bad" and scrub.get("msg"):
        when = scrub.get("time")
        out.append("%s: %s%s" % (host, scrub["msg"], (" (scrub of %s)" % time.strftime(
            "%Y-%m-%d %H:%M UTC", time.gmtime(when))) if isinstance(when, (int, float)) else ""))
    return out


def _events(text):
    """The supervision log's JSON lines (sparkfleet-watchdog), oldest first; lines that do not parse are skipped."""
    out = []
    for line in _text(text).splitlines():
        try:
            entry = _json.loads(line, "a supervision log line")
        except ValueError:
            continue
        if isinstance(entry, dict) and "time" in entry:
            out.append(entry)
    return out


def _scheduler_stuck(text, now):
    """The head's Ray watchdog state (sparkfleet-watchdog's JSON) -> (what is pending, after how many seconds it restarts
    Ray) while a placement group waits with its GPUs free; None otherwise, or when the state is older than 5 minutes
    (the watchdog no longer runs)."""
    try:
        state = _json.loads(_text(text).strip() or "{}", "the watchdog state")
    except ValueError:
        return None
    if not isinstance(state, dict) or "pg_pending_since" not in state or not state.get("cause"):
        return None
    checked = state.get("pg_checked")
    if now is not None and (not isinstance(checked, (int, float)) or now - checked > 300):
        return None
    return state["cause"], state.get("pg_restart_after", "?")


def _escalation(text, now):
    """The head's /run/sparkfleet/escalated-UNIT (sparkfleet-watchdog's gate) -> what the report says of it, or None."""
    try:
        entry = _json.loads(_text(text).strip() or "null", "the escalation marker")
    except ValueError:
        return None
    if not isinstance(entry, dict) or not entry.get("reason"):
        return None
    when = entry.get("time") if isinstance(entry.get("time"), (int, float)) else None
    nodes = [str(n)[:300] for n in entry.get("nodes") or []][:4]
    back = ("; once every node's memory is back at its baseline the liveness timer starts it once"
            if entry.get("memory") and not entry.get("returned") else "")
    return "its supervision escalated%s (%s)%s%s. Human step: %s" % (
        _ago(now, when), str(entry["reason"])[:200], (": " + "; ".join(nodes)) if nodes else "", back,
        str(entry.get("step") or "run site.yml")[:300])


def _restart_log(events, parsed, limit):
    """The latest restarts and stops of every node, newest first: 'host: unit what, N s ago: cause'."""
    rows = []
    for host, text in (events or {}).items():
        now = (parsed.get(host) or (None, {}))[0]
        for e in _events(text):
            what = {"restart": "restarted by its watchdog", "stopped": "stopped",
                    "escalated": "ESCALATED (not started again)",
                    "return": "started once (memory back)"}.get(e.get("event"), str(e.get("event")))
            rows.append((float(e["time"]), "%s: %s %s%s: %s" % (
                host, e.get("unit", "?"), what, _ago(now, float(e["time"])) or "", e.get("cause", "?"))))
    rows.sort(key=lambda r: -r[0])
    return [r[1] for r in rows[:limit]]


def _history(parsed, head, ray_id, vllm_id, ray_unit, vllm_unit):
    """Every unit systemd restarted by itself since it was last started on purpose (NRestarts counts those)."""
    lines = []
    for host in sorted(parsed, key=lambda h: (h == head, h)):
        now, units = parsed[host]
        for uid, what in ((ray_id, "Ray (%s)" % ray_unit), (vllm_id, "vLLM (%s)" % vllm_unit)):
            props = units.get(uid) or {}
            if props.get("NRestarts", "0") not in ("", "0"):
                lines.append("%s: %s was restarted %s time(s) by systemd, the last start%s" % (
                    host, what, props["NRestarts"], _ago(now, _stamp(props.get("ExecMainStartTimestamp"))) or " unknown"))
    return lines


def serving_cause(nodes, head, engine=None, ray_unit="sparkfleet-ray", vllm_unit="sparkfleet-vllm", history=False,
                  ray=None, api=None, journals=None, models=None, events=None, watchdogs=None, limit=8):
    """Why the cluster does not serve, most telling first: a list of sentences, each naming the node and unit.
    With history=True, instead: the latest restarts and why (the supervision log of each node in events), and every
    unit systemd restarted by itself (it may have healed since)."""
    if not isinstance(nodes, dict):
        fail(_WHERE, "expects a dict of host: `date +%%s; systemctl show` output, got %s" % type(nodes).__name__)
    for name, value in (("ray_unit", ray_unit), ("vllm_unit", vllm_unit)):
        if not isinstance(value, str) or not value:
            fail(_WHERE, "%s must be a unit name, got %r" % (name, value))
    if not isinstance(history, bool):
        fail(_WHERE, "history must be true or false, got %r" % (history,))
    if not isinstance(head, str):
        fail(_WHERE, "head must be the head's inventory name, got %r" % (head,))
    ray_id, vllm_id = ray_unit + ".service", vllm_unit + ".service"
    parsed, unreachable = {}, []
    found = {"journal": {}, "events": {}, "model": {}, "scheduler": {}, "escalated": {}, "disk": {}, "manifest": {}}
    for host in sorted(nodes):
        value = nodes[host]
        if isinstance(value, dict):
            if value.get("unreachable") or value.get("failed") and not value.get("stdout"):
                unreachable.append("%s: cannot be reached to read its units (%s)"
                                   % (host, str(value.get("msg") or "unreachable").strip()[:200]))
                continue
            value = value.get("stdout", "")
        parts = sections(value)
        parsed[host] = parse_units(parts["units"])
        for name in found:
            if name in parts:
                found[name][host] = parts[name]
    # what the node reads carried, unless given on their own
    journals = found["journal"] if journals is None and found["journal"] else journals
    events = found["events"] if events is None and found["events"] else events
    models = found["model"] if models is None and found["model"] else models
    if history:
        logged = _restart_log(events, parsed, limit)
        counted = _history(parsed, head, ray_id, vllm_id, ray_unit, vllm_unit)
        return logged + [c for c in counted if c.split(":", 1)[0] not in (events or {}) or not logged]
    for name, value in (("ray", ray), ("api", api), ("journals", journals), ("models", models), ("events", events),
                        ("watchdogs", watchdogs)):
        if value is not None and not isinstance(value, dict):
            fail(_WHERE, "%s= expects a dict, got %s" % (name, type(value).__name__))
    ray = ray or {}
    # Ray's own view (ray_cluster_check on the head): expected nodes with no alive node. None when it could not be read.
    in_ray_missing = None
    if ray.get("missing") is not None and not ray.get("error"):
        in_ray_missing = {m.get("host"): m.get("reason", "not registered") for m in ray.get("missing") or []
                          if isinstance(m, dict)}
    watchdogs = watchdogs or {}

    def guarded(host, unit):
        """Whether the node's watchdog timer for unit runs (it repairs what systemd cannot see)."""
        _n, units = parsed.get(host, (None, {}))
        timer = units.get(unit + "-watchdog.timer") or {}
        return timer.get("ActiveState") == "active" or bool((watchdogs.get(host) or {}).get(unit))

    causes = list(unreachable)
    head_now, head_units = parsed.get(head, (None, {}))
    vllm = head_units.get(vllm_id, {})
    vllm_start = _stamp(vllm.get("ExecMainStartTimestamp"))
    # A real token just now proves every rank of the engine alive: a node's Ray that restarted after the engine started
    # did so while the engine was still placing its ranks (it placed them on the new raylet), not under them.
    answers = isinstance(api, dict) and str(api.get("completion_ok")).lower() == "true"
    # A Ray node down, restarting, or started again after the engine started (its ranks there died with it). The
    # workers first: the head's own Ray restarting takes the whole cluster with it, which the next line says.
    for host in sorted(parsed, key=lambda h: (h == head, h)):
        now, units = parsed[host]
        ray = units.get(ray_id)
        if ray is None:
            causes.append("%s: Ray (%s) is not installed; run site.yml" % (host, ray_unit))
            continue
        role = "the head's Ray" if host == head else "Ray"
        started = _stamp(ray.get("ExecMainStartTimestamp"))
        dead_in_ray = in_ray_missing is not None and host in in_ray_missing
        rejected = _token_rejected((journals or {}).get(host)) if (dead_in_ray or ray.get("ActiveState") != "active") \
            else None
        if rejected:
            # systemd restarts it forever, and it never joins: only writing the head's token again repairs it
            causes.append("%s: %s (%s) is %s: Ray token rejected by the head (%s); it cannot join until site.yml "
                          "writes the head's token on it: run site.yml" % (host, role, ray_unit, _state(ray), rejected))
        elif ray.get("ActiveState") != "active" and _guard_refusal((journals or {}).get(host)):
            # systemd retries it, but the guard refuses every start while the holder stays: no recovery is coming
            causes.append("%s: %s (%s) is %s: every start is refused while the port is held (%s): stop what holds it"
                          " (run site.yml: its gpu_cleanup stops an older deployment)" % (
                              host, role, ray_unit, _state(ray), _guard_refusal((journals or {}).get(host))))
        elif ray.get("ActiveState") != "active":
            coming = ray.get("ActiveState") == "activating" or ray.get("SubState") == "auto-restart"
            causes.append("%s: %s (%s) is %s%s" % (
                host, role, ray_unit, _state(ray),
                "; systemd is bringing it back, and vLLM restarts once every GPU is back" if coming
                else "; systemd gave up (%s): run site.yml to start it" % ray.get("Result", "?")
                if ray.get("ActiveState") == "failed" else "; run site.yml to start it"))
        elif dead_in_ray:
            causes.append("%s: %s (%s) is alive in systemd, dead in Ray (%s)%s" % (
                host, role, ray_unit, in_ray_missing[host],
                "; its watchdog restarts it" if guarded(host, ray_unit) else
                "; no watchdog runs here: run site.yml"))
        elif vllm_start is not None and started is not None and started > vllm_start and not answers:
            causes.append("%s: %s (%s) restarted%s, after the engine started%s: the engine's rank(s) there died "
                          "with it (%s)" % (host, role, ray_unit, _ago(now, started), _ago(head_now, vllm_start),
                                            _state(ray)))
        for watchdog in (ray_unit + "-watchdog.service", vllm_unit + "-watchdog.service"):
            props = units.get(watchdog) or {}
            if props.get("ActiveState") == "failed" and props.get("Result") not in (None, "", "success"):
                causes.append("%s: its watchdog %s failed at its last run (%s): what it supervises is not repaired"
                              " while it fails; read journalctl -u %s there" % (host, watchdog, props["Result"], watchdog))
        disk = _disk_free_mb(found["disk"].get(host))
        if disk and disk[0] < DISK_FLOOR_MB:
            causes.append("%s: %d MB free on %s, where the supervision log and the deploy's state are written: free"
                          " space there" % (host, disk[0], disk[1]))
        incomplete = _model_copy((models or {}).get(host))
        if incomplete:
            causes.append("%s: model copy on this node incomplete (%s): run site.yml to finish the sync"
                          % (host, incomplete))
        causes.extend(_model_manifest(found["manifest"].get(host), host))
    stuck = _scheduler_stuck(found["scheduler"].get(head), head_now)
    if stuck:
        causes.append("%s: Ray's scheduler: %s; the head's Ray watchdog restarts Ray (%s) once it has been pending %s s"
                      " (the workers' Ray and vLLM follow)" % (head, stuck[0], ray_unit, stuck[1]))
    blocked = any("run site.yml" in c for c in causes)
    escalated = _escalation(found["escalated"].get(head), head_now)
    if escalated and vllm.get("ActiveState") != "active":
        causes.insert(0, "%s: vLLM (%s) is %s and not started again: %s" % (head, vllm_unit, _state(vllm), escalated))
    elif vllm and vllm.get("ActiveState") != "active":
        coming = vllm.get("ActiveState") == "activating" or vllm.get("SubState") == "auto-restart"
        if vllm.get("ActiveState") == "failed":
            tail = "; systemd gave up (%s): run site.yml to start it" % vllm.get("Result", "?")
        elif coming and blocked:
            tail = "; it waits for the cluster's GPUs, which the cause above keeps away"
        elif coming:
            tail = "; systemd restarts it (it serves again after loading the model)"
        else:
            tail = "; run site.yml to start it"
        causes.append("%s: vLLM (%s) is %s%s" % (head, vllm_unit, _state(vllm), tail))
    elif head in parsed and not vllm:
        causes.append("%s: vLLM (%s) is not installed; run site.yml" % (head, vllm_unit))
    elif vllm and isinstance(api, dict) and str(api.get("completion_ok")).lower() == "false":
        # active in systemd, yet no token: a hung engine (or one still loading its weights)
        why = str(api.get("completion_msg") or "no token")[:160]
        if why.startswith("HTTP 404"):
            # the engine answers, but not to the name asked: restarting it changes nothing
            causes.append("%s: vLLM (%s) answers, but serves no model by the name asked (%s): it serves another"
                          " name (a model switch not deployed yet, or a list of served names); run site.yml" % (
                              head, vllm_unit, why))
        elif str(api.get("health")) == "200":
            causes.append("%s: vLLM (%s) answers /health, generates nothing (%s)%s" % (
                head, vllm_unit, why, "; its liveness timer restarts it" if guarded(head, vllm_unit)
                else "; no liveness timer runs: restart it (playbooks/restart.yml)"))
        elif api.get("phase") and api.get("phase") not in ("ready", "failed"):
            causes.append("%s: vLLM (%s) is active and still starting (phase %s); requests fail until it serves"
                          % (head, vllm_unit, api["phase"]))
        else:
            causes.append("%s: vLLM (%s) is active but the API does not answer (%s)%s" % (
                head, vllm_unit, why, "; its liveness timer restarts it" if guarded(head, vllm_unit) else
                "; no liveness timer runs: restart it (playbooks/restart.yml)"))
    failure = (engine or {}).get("failure") if isinstance(engine, dict) else None
    if isinstance(failure, dict) and failure.get("class"):
        evidence = [str(e) for e in failure.get("evidence") or []]
        causes.append("engine log: %s%s" % (failure["class"], (": " + evidence[0][:240]) if evidence else ""))
    return causes


class FilterModule:
    """What keeps the cluster from serving, named per node and unit."""

    def filters(self):
        return {"serving_cause": serving_cause}
