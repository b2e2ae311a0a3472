"""DGX OS system services that touch the GPU (issue 39, item 5): the GPU cleanup never stops one unless the inventory
names it.

A DGX OS install runs services that may open /dev/nvidia0 (the DGX Dashboard, whose port 11000 also falls inside
Ray's worker range, DCGM, the persistence daemon, the desktop). Before, any unprotected service holding the GPU was
stopped once gpu_cleanup_stop_foreign was set. Now gpu_cleanup_system_services protects them by default: preflight
names each one it leaves running and why, and only a unit named in gpu_cleanup_stale_units is stopped. Needs a
serving lab (the `serving` fixture); a stand-in dgx-dashboard.service holds the head's GPU for the test's length.

Run as root: SPARKLAB_NAME=x SPARKLAB_KEEP_LAB=1 lab/labctl ctl -- .venv/bin/pytest tests/integration/test_dgx_os_services.py -m lab
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.lab

HEAD = "spark-1"
UNIT = "dgx-dashboard.service"
# A stand-in for the DGX Dashboard's service: a system unit whose process keeps the GPU's device file open.
UNIT_FILE = """[Unit]
Description=sparklab stand-in for DGX OS's DGX Dashboard (holds /dev/nvidia0)
[Service]
ExecStart=/usr/bin/python3 -c "import time; f = open('/dev/nvidia0', 'rb'); time.sleep(100000)"
[Install]
WantedBy=multi-user.target
"""


def _debug_lines(r, host, prefix):
    """The lines of the debug messages (lists) a run showed for host that start with prefix."""
    out = []
    for e in r["events"]:
        msg = (e.get("res") or {}).get("msg")
        if e["host"] == host and isinstance(msg, list) and msg and msg[0] == prefix:
            out.extend(msg[1:])
    return out


@pytest.fixture
def dashboard(lab):
    lab.sh(HEAD, "cat > /etc/systemd/system/%s <<'EOF'\n%sEOF\nsystemctl daemon-reload && systemctl enable --now %s"
           % (UNIT, UNIT_FILE, UNIT))
    def main_pid():
        return lab.systemctl(HEAD, "show", "-p", "MainPID", "--value", UNIT)
    assert lab.wait_for(lambda: main_pid() not in ("", "0"), 30, 1) is not None, \
        lab.sh(HEAD, "systemctl status %s" % UNIT).stdout
    pid = main_pid()
    assert lab.wait_for(lambda: pid in lab.sh(HEAD, "fuser /dev/nvidia0 2>&1").stdout.split(), 20, 1) is not None
    yield pid
    lab.sh(HEAD, "systemctl disable --now %s; rm -f /etc/systemd/system/%s; systemctl daemon-reload" % (UNIT, UNIT))


# CI: the policy in tests/unit/plugins/module_utils/test_gpu_system_services.py (left running and named with
# stop_foreign, stopped once named stale, the gpu_holders module's message), a unit holding the GPU found and stopped on
# the lab by test_site.py::test_stale_unit_holding_the_gpu_is_stopped_and_disabled; two more site.yml runs: long.
@pytest.mark.long
@pytest.mark.fault(name="a DGX OS system service (the DGX Dashboard's unit) holds the head's GPU, "
                        "gpu_cleanup_stop_foreign: true",
                   expected="preflight names it as left running (a DGX OS system service, gpu_cleanup_system_services)"
                            " and site.yml leaves it running; named in gpu_cleanup_stale_units, site.yml stops it")
def test_a_dgx_os_service_is_left_running_and_named_unless_the_inventory_names_it(lab, serving, dashboard, tmp_path,
                                                                                   observe):
    pid = dashboard
    r, failures = lab.play(tmp_path / "left", "site.yml", extravars={"gpu_cleanup_stop_foreign": True})
    assert r["status"] == "successful" and not failures, lab.messages(failures)
    left = [line for line in _debug_lines(r, HEAD, "leaves running:") if line.startswith("pid %s " % pid)]
    assert left, json.dumps([e for e in r["events"] if e["host"] == HEAD and "leaves" in json.dumps(e)])[:3000]
    assert "(unit %s)" % UNIT in left[0], left
    assert "a DGX OS system service (gpu_cleanup_system_services)" in left[0], left
    assert "add dgx-dashboard to gpu_cleanup_stale_units to stop it" in left[0], left
    observe(left[0])
    # gpu_cleanup left it: the same process, the unit still active
    assert lab.systemctl(HEAD, "show", "-p", "MainPID", "--value", UNIT) == pid
    assert lab.systemctl(HEAD, "is-active", UNIT) == "active"
    assert not [a for e in r["events"] if e["host"] == HEAD
                for a in (e.get("res") or {}).get("actions") or [] if UNIT in json.dumps(a)]
    assert lab.serves(timeout=60)

    # the inventory names it: stopped and disabled like an old deployment's unit
    stale = ["vllm-cluster", "vllm-proxy", "vllm-embeddings", "vllm-reranker", "sglang*", "dgx-dashboard"]
    r, failures = lab.play(tmp_path / "named", "site.yml", extravars={"gpu_cleanup_stale_units": stale})
    assert r["status"] == "successful" and not failures, lab.messages(failures)
    assert lab.systemctl(HEAD, "is-active", UNIT) in ("inactive", "failed")
    assert lab.systemctl(HEAD, "is-enabled", UNIT) == "disabled"
    assert lab.serves(timeout=60)
