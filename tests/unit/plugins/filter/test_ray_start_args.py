"""ray_start_args: every node pinned to its fabric IP, the dashboard never exposed."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkfleet.vllm.plugins.filter.ray_start_args import ray_start_args


def test_head_is_pinned_with_the_dashboard_off():
    assert ray_start_args("192.168.200.12", True, "192.168.200.12") == [
        "--head", "--port", "6379", "--include-dashboard=false",
        "--node-ip-address", "192.168.200.12", "--num-gpus", "1", "--disable-usage-stats", "--block"]


def test_worker_joins_the_head_on_the_fabric():
    args = ray_start_args("192.168.200.13", False, "192.168.200.12", port=6380, num_gpus="1", num_cpus=20)
    assert args[:2] == ["--address", "192.168.200.12:6380"]
    assert args[args.index("--node-ip-address") + 1] == "192.168.200.13"
    assert args[args.index("--num-cpus") + 1] == "20"
    assert not any(a.startswith("--include-dashboard") or a == "--head" for a in args)


def test_dashboard_only_on_loopback():
    args = ray_start_args("10.99.1.11", True, "10.99.1.11", dashboard=True)
    assert "--dashboard-host=127.0.0.1" in args and "--include-dashboard=true" in args


def test_extra_arguments_come_last_and_cannot_unpin():
    assert ray_start_args("10.99.1.12", False, "10.99.1.11", extra=["--object-store-memory", 1000])[-2:] == [
        "--object-store-memory", "1000"]
    with pytest.raises(AnsibleFilterError, match="--node-ip-address is pinned by this deployment; set sparkfleet_fabric_ip"):
        ray_start_args("10.99.1.12", False, "10.99.1.11", extra=["--node-ip-address=10.99.0.11"])


@pytest.mark.parametrize("kwargs, message", [
    (dict(node_ip="spark-2"), "node_ip 'spark-2' is not an IP address"),
    (dict(head_ip=""), "head_ip '' is not an IP address"),
    (dict(num_gpus=-1), "num_gpus must be at least 0"),
    (dict(num_gpus=True), "num_gpus must be a whole number"),
    (dict(num_cpus="many"), "num_cpus must be a whole number"),
    (dict(port=70000), "port 70000 is out of range"),
])
def test_bad_values_fail_naming_them(kwargs, message):
    args = dict(node_ip="10.99.1.12", head=False, head_ip="10.99.1.11")
    args.update(kwargs)
    with pytest.raises(AnsibleFilterError, match=message):
        ray_start_args(**args)


PORTS = {"node_manager_port": 6380, "object_manager_port": "6381", "runtime_env_agent_port": 6382,
         "dashboard_agent_grpc_port": 6383, "dashboard_agent_listen_port": 6384, "metrics_export_port": 6385,
         "min_worker_port": 10002, "max_worker_port": 19999, "ray_client_server_port": 10001, "dashboard_port": 8265}


def _flag(args, name):
    return args[args.index(name) + 1]


def test_ports_are_pinned_so_a_firewall_can_name_them():
    head = ray_start_args("10.99.1.11", True, "10.99.1.11", ports=PORTS)
    assert _flag(head, "--node-manager-port") == "6380" and _flag(head, "--object-manager-port") == "6381"
    assert _flag(head, "--min-worker-port") == "10002" and _flag(head, "--max-worker-port") == "19999"
    assert _flag(head, "--ray-client-server-port") == "10001"
    assert "--dashboard-port" not in head  # the dashboard is off
    assert head[-2:] == ["--disable-usage-stats", "--block"]
    worker = ray_start_args("10.99.1.12", False, "10.99.1.11", ports=PORTS)
    assert "--ray-client-server-port" not in worker and _flag(worker, "--runtime-env-agent-port") == "6382"
    assert _flag(ray_start_args("10.99.1.11", True, "10.99.1.11", dashboard=True, ports=PORTS), "--dashboard-port") == "8265"


@pytest.mark.parametrize("ports, message", [
    ({"gcs_port": 1}, "unknown port name(s) gcs_port"),
    ({"node_manager_port": "x"}, "node_manager_port must be a whole number"),
    ({"node_manager_port": 70000}, "out of range"),
    ({"min_worker_port": 10002}, "set min_worker_port and max_worker_port together"),
    ({"min_worker_port": 20000, "max_worker_port": 10000}, "above max_worker_port"),
    ([6380], "must be a dict"),
])
def test_bad_ports_are_refused(ports, message):
    import re as _re
    with pytest.raises(AnsibleFilterError, match=_re.escape(message)):
        ray_start_args("10.99.1.11", True, "10.99.1.11", ports=ports)
