# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter: sparkfleet.vllm.stale_stack (documented in stale_stack.yml)."""

from __future__ import annotations

import json

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _json
from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._checks import fail

_WHERE = "stale_stack"

# systemd states in which a unit runs (or is about to), docker states in which a container does
UNIT_UP = ("active", "activating", "reloading")
CONTAINER_UP = ("running", "restarting", "paused")
SHOWN = 3   # holders named one by one; the rest are counted


def parse_record(text):
    """gpu_cleanup_record's content (gpu_release's ``record``) -> {units, containers}, each a sorted list of names.
    Missing, empty or unreadable: both empty (nothing is known, nothing is named)."""
    if isinstance(text, dict):
        text = text.get("stdout", "") if "stdout" in text or "rc" in text else json.dumps(text)
    try:
        record = _json.loads(str(text or "").strip() or "{}", "the stale-stack record")
    except ValueError:
        record = {}
    if not isinstance(record, dict):
        record = {}
    out = {}
    for key in ("units", "containers"):
        names = record.get(key)
        out[key] = sorted({str(n) for n in names if isinstance(n, str) and n.strip()}) if isinstance(names, list) else []
    return out


def _mib(value):
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _holder_text(holder):
    where = (holder.get("container") or {}).get("name") if isinstance(holder.get("container"), dict) else None
    where = ("container " + where) if where else ("unit " + holder["unit"]) if holder.get("unit") else "no unit"
    mib = _mib(holder.get("used_memory_mib"))
    return "pid %s %s in %s%s" % (holder.get("pid", "?"), holder.get("name") or "?", where,
                                  (", %d MiB" % mib) if mib is not None else "")


def stale_stack(record, host=None, holders=None, ray_unit="sparkfleet-ray"):
    """Without holders: the record's {units, containers}, for gpu_holders' stale_units and stale_containers. With a
    gpu_holders result (run with those): one sentence naming the stale units and containers that run now beside ours,
    what they hold and when they stop, or an empty list."""
    known = parse_record(record)
    if holders is None:
        return known
    if not isinstance(holders, dict):
        fail(_WHERE, "holders= expects a sparkfleet.vllm.gpu_holders result, got %s" % type(holders).__name__)
    if not isinstance(host, str) or not host:
        fail(_WHERE, "host must be the node's inventory name, got %r" % (host,))
    if not isinstance(ray_unit, str) or not ray_unit:
        fail(_WHERE, "ray_unit must be a unit name, got %r" % (ray_unit,))
    if holders.get("failed") or not isinstance(holders.get("stale"), list):
        return []
    units, containers = [], []
    for entry in holders["stale"]:
        if not isinstance(entry, dict):
            continue
        if entry.get("kind") == "unit" and entry.get("active") in UNIT_UP:
            units.append(entry)
        elif entry.get("kind") == "container" and entry.get("state") in CONTAINER_UP:
            containers.append(entry)
    if not units and not containers:
        return []
    unit_names = {u["name"] for u in units}
    container_names = {c["name"] for c in containers}
    held = []
    for holder in holders.get("holders") or []:
        if not isinstance(holder, dict):
            continue
        name = (holder.get("container") or {}).get("name") if isinstance(holder.get("container"), dict) else None
        if holder.get("unit") in unit_names or name in container_names:
            held.append(holder)
    what = ["unit %s (%s/%s, %s)" % (u["name"], u.get("active"), u.get("sub") or "?", u.get("enabled") or "?")
            for u in units]
    what += ["container %s (%s%s)" % (c["name"], c.get("state"),
                                      (", restart policy " + c["restart_policy"]) if c.get("restart_policy") else "")
             for c in containers]
    if held:
        total = sum(_mib(h.get("used_memory_mib")) or 0 for h in held)
        holds = "it holds the GPU: %s%s%s" % (
            "; ".join(_holder_text(h) for h in held[:SHOWN]),
            "; %d more" % (len(held) - SHOWN) if len(held) > SHOWN else "",
            (" (%d MiB of GPU memory in all)" % total) if total and len(held) > 1 else "")
    else:
        holds = "it holds no GPU now"
    gpu = holders.get("gpu") if isinstance(holders.get("gpu"), dict) else {}
    avail, total_mem = _mib(gpu.get("mem_available_mib")), _mib(gpu.get("mem_total_mib"))
    memory = ""
    if avail is not None and total_mem:
        memory = "; %d of %d MiB of %s memory free on the node" % (
            avail, total_mem, "unified" if gpu.get("unified_memory") else "host")
    return ["%s: an old stack runs beside ours: %s; %s%s; our engine's next start may not get the memory it needs. "
            "It will stop at the next site.yml (gpu_cleanup) and before %s's next start (sparkfleet-stale-stop): "
            "run site.yml to stop it now" % (host, ", ".join(what), holds, memory, ray_unit)]


class FilterModule:
    """The old stack back beside ours, named per node."""

    def filters(self):
        return {"stale_stack": stale_stack}
