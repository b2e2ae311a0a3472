# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter: sparkfleet.vllm.serving_cause (documented in serving_cause.yml)."""

from __future__ import annotations

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


def serving_cause(nodes, head, engine=None, ray_unit="sparkfleet-ray", vllm_unit="sparkfleet-vllm", history=False):
    """Why the cluster does not serve, most telling first: a list of sentences, each naming the node and unit.
    With history=True, instead: every unit systemd restarted by itself (it may have healed since)."""
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
    for host in sorted(nodes):
        value = nodes[host]
        if isinstance(value, dict):
            if value.get("unreachable") or value.get("failed") and not value.get("stdout"):
                unreachable.append("%s: cannot be reached to read its units (%s)"
                                   % (host, str(value.get("msg") or "unreachable").strip()[:200]))
                continue
            value = value.get("stdout", "")
        parsed[host] = parse_units(value)
    if history:
        return _history(parsed, head, ray_id, vllm_id, ray_unit, vllm_unit)
    causes = list(unreachable)
    head_now, head_units = parsed.get(head, (None, {}))
    vllm = head_units.get(vllm_id, {})
    vllm_start = _stamp(vllm.get("ExecMainStartTimestamp"))
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
        if ray.get("ActiveState") != "active":
            coming = ray.get("ActiveState") == "activating" or ray.get("SubState") == "auto-restart"
            causes.append("%s: %s (%s) is %s%s" % (
                host, role, ray_unit, _state(ray),
                "; systemd is bringing it back, and vLLM restarts once every GPU is back" if coming
                else "; run site.yml to start it"))
        elif vllm_start is not None and started is not None and started > vllm_start:
            causes.append("%s: %s (%s) restarted%s, after the engine started%s: the engine's rank(s) there died "
                          "with it (%s)" % (host, role, ray_unit, _ago(now, started), _ago(head_now, vllm_start),
                                            _state(ray)))
    if vllm and vllm.get("ActiveState") != "active":
        coming = vllm.get("ActiveState") == "activating" or vllm.get("SubState") == "auto-restart"
        causes.append("%s: vLLM (%s) is %s%s" % (
            head, vllm_unit, _state(vllm),
            "; systemd restarts it (it serves again after loading the model)" if coming
            else "; run site.yml to start it"))
    elif head in parsed and not vllm:
        causes.append("%s: vLLM (%s) is not installed; run site.yml" % (head, vllm_unit))
    failure = (engine or {}).get("failure") if isinstance(engine, dict) else None
    if isinstance(failure, dict) and failure.get("class"):
        evidence = [str(e) for e in failure.get("evidence") or []]
        causes.append("engine log: %s%s" % (failure["class"], (": " + evidence[0][:240]) if evidence else ""))
    return causes


class FilterModule:
    """What keeps the cluster from serving, named per node and unit."""

    def filters(self):
        return {"serving_cause": serving_cause}
