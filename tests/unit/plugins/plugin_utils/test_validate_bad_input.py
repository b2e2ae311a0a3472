"""Issue 17: bad input refused before anything changes (defects 1, 2, 3, 5, 7, 13), by the controller's checks.

Each case is a row of the "Bad input" section of docs/fault-table.md (marker bad_input, fixture observe). The preflight
play runs these checks on every host through the settings_errors filter; the node-side half (where links lead, what
exists) is tests/unit/plugins/modules/test_path_guard.py.
"""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkfleet.vllm.plugins.filter.ray_start_args import ray_start_args
from ansible_collections.sparkfleet.vllm.plugins.filter.vllm_serve_args import vllm_serve_args
from ansible_collections.sparkfleet.vllm.plugins.plugin_utils import _validate as v
from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._inventory import inventory_errors

HOST = "spark-1"
SUBNET = "192.168.200.0/24"


def _errors(settings, head=True):
    return v.settings_errors(dict(settings, sparkfleet_fabric_subnet=SUBNET), HOST, head=head)


def _one(settings, name, *words, head=True):
    """The one message about `name`, which must hold every word; returns it."""
    errors = [e for e in _errors(settings, head) if e.startswith("%s: %s" % (HOST, name))]
    assert len(errors) == 1, errors
    for word in words:
        assert word in errors[0], errors[0]
    return errors[0]


# --- 1. system paths pass the path checks ------------------------------------------------------------------------

@pytest.mark.bad_input(name="a written path under a system directory or in a home's dot-directory",
                       expected="preflight refuses it naming host, variable, path and the fix")
@pytest.mark.parametrize("name, path, why", [
    pytest.param("sparkfleet_model_state_file", "/etc/passwd", "under the system directory /etc",
                 id="sparkfleet_model_state_file=/etc/passwd"),
    pytest.param("sparkfleet_config_dir", "/etc/ssl", "under the system directory /etc", id="sparkfleet_config_dir=/etc/ssl"),
    pytest.param("sparkfleet_ray_tmp_dir", "/home/aurora/.ssh", "dot-directory /home/aurora/.ssh",
                 id="sparkfleet_ray_tmp_dir=/home/aurora/.ssh"),
    pytest.param("sparkfleet_cache_dir", "/home/aurora/.docker/x", "dot-directory /home/aurora/.docker",
                 id="sparkfleet_cache_dir=~/.docker/x"),
    pytest.param("sparkfleet_cache_dir", "/var/lib/mysql", "under the system directory /var",
                 id="sparkfleet_cache_dir=/var/lib/mysql"),
    pytest.param("sparkfleet_ray_tmp_dir", "/tmp/ray", "every local user can write", id="sparkfleet_ray_tmp_dir=/tmp/ray"),
    pytest.param("sparkfleet_model_dir", "/boot/m", "under /boot", id="sparkfleet_model_dir=/boot/m"),
    pytest.param("model_sync_dest", "/root/models", "under /root", id="model_sync_dest=/root/models"),
    pytest.param("model_sync_key", "/usr/bin/ssh", "under /usr/bin", id="model_sync_key=/usr/bin/ssh"),
    pytest.param("ray_cluster_auth_token_path", "/etc/shadow", "under the system directory /etc",
                 id="ray_cluster_auth_token_path=/etc/shadow"),
    pytest.param("runtime_image_progress_file", "/proc/sys/kernel/x", "under /proc",
                 id="runtime_image_progress_file=/proc/sys/kernel/x"),
    pytest.param("model_sync_forced_command", "/usr/local/bin/sync", "under the system directory /usr",
                 id="model_sync_forced_command=/usr/local/bin/sync"),
    pytest.param("sparkfleet_config_dir", "/srv/x/../../etc/ssh", "under the system directory /etc",
                 id="sparkfleet_config_dir=/srv/x/../../etc/ssh"),
    pytest.param("model_sync_known_hosts", "~/.ssh/authorized_keys", "never ssh's own files",
                 id="model_sync_known_hosts=~/.ssh/authorized_keys"),
])
def test_written_paths_under_system_or_dot_directories_are_refused(name, path, why, observe):
    message = _one({name: path}, name, path, why)
    assert "use " in message or "must be " in message  # the fix
    observe(message)


@pytest.mark.parametrize("name, path", [
    ("sparkfleet_model_state_file", "/etc/sparkfleet/model.state"), ("sparkfleet_config_dir", "/etc/sparkfleet"),
    ("sparkfleet_ray_tmp_dir", "/var/lib/sparkfleet/ray"), ("sparkfleet_cache_dir", "/var/cache/sparkfleet/vllm"),
    ("model_sync_forced_command", "/usr/local/lib/sparkfleet/sync_shell.py"),
    ("runtime_image_progress_file", "/run/sparkfleet/image-sync.progress"),
    ("sparkfleet_model_dir", "/home/nvidia/models/Qwen3.5-122B-A10B-FP8"), ("sparkfleet_model_dir", "/models/m"),
    ("sparkfleet_cache_dir", "/srv/cache/vllm"), ("model_sync_known_hosts", "~/.ssh/sparkfleet_known_hosts"),
])
def test_the_defaults_and_ordinary_places_pass(name, path):
    assert _errors({name: path}) == []


# --- 2. pinned flags bypassed through a list value --------------------------------------------------------------

@pytest.mark.bad_input(name="a flag inside a list-valued serving option",
                       expected="refused: each element is a value, never a flag")
@pytest.mark.parametrize("names", [
    pytest.param(["qwen", "--host=0.0.0.0", "--trust-remote-code"], id="served_model_name=[qwen, --host=0.0.0.0, ...]"),
    pytest.param(["qwen", "-tp", "1"], id="served_model_name=[qwen, -tp, 1]"),
    pytest.param(["qwen", "a\x1bb"], id="served_model_name=[qwen, <ESC>]"),
])
def test_a_list_value_is_never_read_as_a_flag(names, observe):
    message = _one({"vllm_serve_served_model_name": names}, "vllm_serve_served_model_name", "has the element")
    with pytest.raises(AnsibleFilterError, match="served_model_name"):
        vllm_serve_args({"model": "/models/m", "served_model_name": names})
    observe(message)


def test_extra_args_list_values_follow_the_same_rule():
    with pytest.raises(AnsibleFilterError, match="would be read as a flag"):
        vllm_serve_args({"model": "/models/m", "extra_args": {"allowed-origins": ["a", "--host=0.0.0.0"]}})


# --- 3. security turned off through env dicts -------------------------------------------------------------------

@pytest.mark.bad_input(name="an env dict overriding what the collection owns or weakening security",
                       expected="refused naming the variable and what to set instead; values never shown")
@pytest.mark.parametrize("name, env, words", [
    pytest.param("vllm_serve_env", {"VLLM_API_KEY": ""}, ["VLLM_API_KEY", "vllm_serve_api_key"],
                 id="vllm_serve_env={VLLM_API_KEY: ''}"),
    pytest.param("ray_cluster_env", {"RAY_AUTH_MODE": "disabled"}, ["RAY_AUTH_MODE", "ray_cluster_auth"],
                 id="ray_cluster_env={RAY_AUTH_MODE: disabled}"),
    pytest.param("ray_cluster_env", {"RAY_AUTH_TOKEN": "x"}, ["RAY_AUTH_TOKEN"], id="ray_cluster_env={RAY_AUTH_TOKEN}"),
    pytest.param("vllm_serve_env", {"VLLM_HOST_IP": "0.0.0.0"}, ["VLLM_HOST_IP", "sparkfleet_fabric_ip"],
                 id="vllm_serve_env={VLLM_HOST_IP}"),
    pytest.param("ray_cluster_env", {"NCCL_SOCKET_IFNAME": "enP7s7"}, ["NCCL_SOCKET_IFNAME", "rdma_facts"],
                 id="ray_cluster_env={NCCL_SOCKET_IFNAME: mgmt NIC}"),
    pytest.param("vllm_serve_env", {"GLOO_SOCKET_IFNAME": "eth0"}, ["GLOO_SOCKET_IFNAME"], id="vllm_serve_env={GLOO_...}"),
    pytest.param("vllm_serve_env", {"VLLM_SERVER_DEV_MODE": "1"}, ["VLLM_SERVER_DEV_MODE", "sparkfleet_allow_unsafe_env"],
                 id="vllm_serve_env={VLLM_SERVER_DEV_MODE: 1}"),
    pytest.param("ray_cluster_env", {"VLLM_ALLOW_INSECURE_SERIALIZATION": "1"}, ["pickles"],
                 id="ray_cluster_env={VLLM_ALLOW_INSECURE_SERIALIZATION: 1}"),
])
def test_env_dicts_may_not_override_what_the_collection_owns(name, env, words, observe):
    message = _one({name: dict(env, HF_TOKEN="hf_secret_value")}, name, *words)
    assert "hf_secret_value" not in message and "disabled" not in message.split("may not")[0]
    observe(message)


def test_an_unsafe_env_variable_passes_when_named_in_the_opt_in():
    env = {"vllm_serve_env": {"VLLM_SERVER_DEV_MODE": "1"}, "sparkfleet_allow_unsafe_env": ["VLLM_SERVER_DEV_MODE"]}
    assert _errors(env) == []
    assert "sparkfleet_allow_unsafe_env" in _errors({"sparkfleet_allow_unsafe_env": ["VLLM_API_KEY"]})[0]
    # what the collection owns has no opt-in
    assert _errors(dict(env, vllm_serve_env={"VLLM_API_KEY": "x"}))


# --- 5. Ray exposed on the management side ----------------------------------------------------------------------

@pytest.mark.bad_input(name="Ray or its dashboard exposed beyond the fabric",
                       expected="refused unless sparkfleet_allow_ray_exposure: true; pinned flags refused always")
@pytest.mark.parametrize("settings, name, words", [
    pytest.param({"ray_cluster_firewall_allow": ["0.0.0.0/1", "128.0.0.0/1"]}, "ray_cluster_firewall_allow",
                 ["0.0.0.0/1, 128.0.0.0/1 reaches beyond the fabric subnet"], id="firewall allow 0.0.0.0/1 + 128.0.0.0/1"),
    pytest.param({"ray_cluster_firewall_allow": ["10.0.0.0/8"]}, "ray_cluster_firewall_allow", ["10.0.0.0/8"],
                 id="firewall allow wider than the fabric"),
    pytest.param({"ray_cluster_extra_args": ["--dashboard-host=0.0.0.0"]}, "ray_cluster_extra_args",
                 ["--dashboard-host", "sparkfleet_allow_ray_exposure"], id="extra args --dashboard-host=0.0.0.0"),
    pytest.param({"ray_cluster_extra_args": ["--include-dashboard=true"]}, "ray_cluster_extra_args",
                 ["--include-dashboard", "ray_cluster_dashboard"], id="extra args --include-dashboard=true"),
    pytest.param({"ray_cluster_extra_args": ["--address=10.1.230.180:6379"]}, "ray_cluster_extra_args",
                 ["--address is pinned"], id="extra args re-pinned --address="),
    pytest.param({"ray_cluster_extra_args": ["--node-ip-address", "10.1.230.180"]}, "ray_cluster_extra_args",
                 ["--node-ip-address is pinned", "sparkfleet_fabric_ip"], id="extra args --node-ip-address"),
    pytest.param({"ray_cluster_extra_args": ["--dashboard-port=80"]}, "ray_cluster_extra_args",
                 ["ray_cluster_dashboard_port"], id="extra args --dashboard-port"),
])
def test_ray_exposure_is_refused_without_the_opt_in(settings, name, words, observe):
    message = _one(settings, name, *words)
    observe(message)


def test_the_exposure_opt_in_accepts_exposure_but_never_a_pinned_flag():
    opt = {"sparkfleet_allow_ray_exposure": True}
    assert _errors(dict(opt, ray_cluster_firewall_allow=["0.0.0.0/0"])) == []
    assert _errors(dict(opt, ray_cluster_extra_args=["--dashboard-host=0.0.0.0"])) == []
    assert _errors(dict(opt, ray_cluster_extra_args=["--address=1.2.3.4:6379"]))
    assert _errors({"ray_cluster_firewall_allow": ["192.168.200.0/25"]}) == []  # a part of the fabric


@pytest.mark.bad_input(name="fabric subnet equal to or holding the management address",
                       expected="the inventory check refuses it unless sparkfleet_allow_ray_exposure: true")
@pytest.mark.parametrize("subnet", [pytest.param("10.1.230.0/24", id="fabric subnet = management network"),
                                    pytest.param("10.0.0.0/8", id="fabric subnet holding the management network")])
def test_a_fabric_subnet_overlapping_the_management_network_is_refused(subnet, observe):
    hv = {"h": {"sparkfleet_fabric_subnet": subnet, "sparkfleet_fabric_ip": "10.1.230.11", "ansible_host": "10.1.230.180",
                "sparkfleet_mgmt_ip": "10.1.230.180"},
          "w": {"sparkfleet_fabric_subnet": subnet, "sparkfleet_fabric_ip": "10.1.230.12", "ansible_host": "10.1.230.12"}}
    groups = {"spark": ["h", "w"], "spark_head": ["h"], "spark_workers": ["w"]}
    errors = inventory_errors(hv, groups)
    assert len(errors) == 1 and "h: sparkfleet_mgmt_ip 10.1.230.180 lies inside sparkfleet_fabric_subnet" in errors[0]
    observe(errors[0])
    hv["h"]["sparkfleet_allow_ray_exposure"] = True
    assert inventory_errors(hv, groups) == []


@pytest.mark.bad_input(name="ray_start_args: node IP 0.0.0.0 or a re-pinned address",
                       expected="the filter refuses, naming the argument")
@pytest.mark.parametrize("node_ip, extra, words", [
    pytest.param("0.0.0.0", [], "node_ip 0.0.0.0 is not a node's own address", id="node_ip=0.0.0.0"),
    pytest.param("127.0.0.1", [], "node_ip 127.0.0.1", id="node_ip=127.0.0.1"),
    pytest.param("10.99.1.12", ["--address=10.1.230.180:6379"], "--address is pinned", id="extra --address="),
])
def test_ray_start_args_refuses_unpinned_addresses(node_ip, extra, words, observe):
    with pytest.raises(AnsibleFilterError, match="ray_start_args") as exc:
        ray_start_args(node_ip, False, "10.99.1.11", extra=extra)
    assert words in str(exc.value)
    observe(exc.value)


# --- 7. variables of the later roles validated late --------------------------------------------------------------

@pytest.mark.bad_input(name="a later role's variable out of range",
                       expected="preflight names it with the others, before the GPU play")
@pytest.mark.parametrize("name, value, words", [
    pytest.param("ray_cluster_extra_args", ["--node-ip-address=10.1.230.180"], "--node-ip-address is pinned",
                 id="ray_cluster_extra_args=[--node-ip-address=...]"),
    pytest.param("model_sync_bwlimit", -1, "at least 0", id="model_sync_bwlimit=-1"),
    pytest.param("gpu_cleanup_grace", -1, "at least 1", id="gpu_cleanup_grace=-1"),
    pytest.param("gpu_cleanup_grace", 0, "at least 1", id="gpu_cleanup_grace=0"),
    pytest.param("model_sync_streams", 0, "between 1 and 64", id="model_sync_streams=0"),
    pytest.param("runtime_image_sync_timeout", "soon", "whole number of seconds", id="runtime_image_sync_timeout=soon"),
    pytest.param("model_sync_user", "-oProxyCommand=sh", "not starting with '-'", id="model_sync_user=-oProxyCommand"),
    pytest.param("ray_cluster_gpu_args", ["--privileged"], "not a docker run argument for the GPU",
                 id="ray_cluster_gpu_args=[--privileged]"),
    pytest.param("sparkfleet_container_gpu_args", ["-v", "/:/host"], "not a docker run argument for the GPU",
                 id="sparkfleet_container_gpu_args=[-v, /:/host]"),
    pytest.param("ray_cluster_node_manager_port", 70000, "between 1 and 65535", id="ray_cluster_node_manager_port=70000"),
    pytest.param("healthcheck_url", "file:///etc/passwd", "http://", id="healthcheck_url=file:///etc/passwd"),
    pytest.param("runtime_image_load_command", 'docker load" ; sh', "plain command",
                 id="runtime_image_load_command with a quote"),
    pytest.param("gpu_cleanup_stale_containers", ["-v"], "not a unit or container name",
                 id="gpu_cleanup_stale_containers=[-v]"),
    # issue 40.5, found by rendering every template with hostile values (test_templates_hostile.py)
    pytest.param("monitoring_webhook_url", 'http://10.1.2.3/hook"x', "percent-encoded",
                 id="monitoring_webhook_url with a quote (it ended alertmanager.yml's string)"),
    pytest.param("monitoring_webhook_url", "http://10.1.2.3/\\x41", "percent-encoded",
                 id="monitoring_webhook_url with a backslash (YAML unescaped it)"),
    pytest.param("sparkfleet_ray_unit", "r" * 240, "at most 238",
                 id="sparkfleet_ray_unit of 240 characters (systemd refuses the watchdog's name)"),
    pytest.param("model_sync_scrub_interval", "every night", "calendar expression",
                 id="model_sync_scrub_interval=every night (systemd drops it: the timer refuses to load)"),
    pytest.param("model_sync_scrub_interval", "030", "calendar expression", id="model_sync_scrub_interval=030"),
    pytest.param("ray_cluster_auth_min_ray_version", "2.52.0rc1", "dotted whole numbers",
                 id="ray_cluster_auth_min_ray_version=2.52.0rc1 (the version test then turned auth off on 2.52.0)"),
    pytest.param("ray_cluster_auth_min_ray_version", " 2.52", "dotted whole numbers",
                 id="ray_cluster_auth_min_ray_version with a blank (the version test failed with a Python error)"),
    pytest.param("vllm_serve_load_format", "", "not ''",
                 id="vllm_serve_load_format='' (vllm_serve_args refused it after preflight passed it)"),
])
def test_every_role_variable_is_checked_in_preflight(name, value, words, observe):
    message = _one({name: value}, name, words)
    observe(message)


@pytest.mark.parametrize("expression", ["weekly", "daily", "Sun *-*-* 03:00:00", "*-*-01 04:00", "Mon..Fri 02:00",
                                        "Sat,Sun *-*-* 03:00:00 UTC", "*-*-* 00/4:00", "2026-01-01"])
def test_calendar_expressions_systemd_reads_still_pass(expression):
    assert v.check_calendar(expression) == (expression, None)


def test_a_quote_in_ansible_user_is_refused_by_the_inventory_check(observe):
    hostvars = {HOST: {"sparkfleet_fabric_subnet": SUBNET, "sparkfleet_fabric_ip": "192.168.200.12",
                       "ansible_host": "10.1.230.180", "ansible_user": "x'; id; echo '"}}
    errors = inventory_errors(hostvars, {"spark": [HOST], "spark_head": [HOST], "spark_workers": []})
    assert [e for e in errors if e.startswith("spark-1: ansible_user ") and "e.g. spark" in e], errors
    observe(errors[0])


def test_all_problems_come_at_once():
    errors = _errors({"ray_cluster_extra_args": ["--node-ip-address=1.2.3.4"], "model_sync_bwlimit": -1,
                      "gpu_cleanup_grace": -1, "vllm_serve_gpu_memory_utilization": 1.5})
    assert len(errors) == 4


def test_ports_on_one_number_are_refused():
    errors = _errors({"ray_cluster_node_manager_port": 6379, "sparkfleet_ray_port": 6379})
    assert any("sparkfleet_ray_port and ray_cluster_node_manager_port are both 6379" in e for e in errors), errors


def test_every_default_of_every_role_has_a_check():
    """A variable without a check would pass preflight whatever its value (defect 7): name one for each, for every
    role site.yml runs (roles/preflight/vars/main.yml lists them; every other role has its own playbook)."""
    from pathlib import Path

    import yaml

    repo = Path(__file__).resolve().parents[4]
    roles = yaml.safe_load((repo / "roles/preflight/vars/main.yml").read_text())["_preflight_checked_roles"]
    site = (repo / "playbooks/site.yml").read_text()
    assert all(role in ("sparkfleet", "preflight") or role in site for role in roles)
    names = set()
    for role in roles:
        names |= set(yaml.safe_load((repo / "roles" / role / "defaults/main.yml").read_text()) or {})
    unchecked = sorted(n for n in names if n not in v.ROLE_CHECKS and n not in v.SERVING_CHECKS)
    assert not unchecked, "give these variables a check in _validate.ROLE_CHECKS: %s" % unchecked


def test_the_role_defaults_pass_their_own_checks():
    from pathlib import Path

    import yaml

    repo = Path(__file__).resolve().parents[4]
    values = {}
    for defaults in (repo / "roles").glob("*/defaults/main.yml"):
        values.update((k, val) for k, val in (yaml.safe_load(defaults.read_text()) or {}).items()
                      if not (isinstance(val, str) and "{{" in val) and not (isinstance(val, list) and "{{" in str(val)))
    assert _errors(dict(values, vllm_serve_api_key="k")) == []


# --- 13. accepted, then broken later ------------------------------------------------------------------------------

@pytest.mark.bad_input(name="input accepted before and broken later (IPv6 fabric, quote in the model dir, non-ASCII key,"
                            " host with a shell word)", expected="refused in preflight naming host, variable, fix")
@pytest.mark.parametrize("settings, name, words", [
    pytest.param({"sparkfleet_model_dir": '/models/qwen"x'}, "sparkfleet_model_dir", "holds '\"'", id='model dir with "'),
    pytest.param({"sparkfleet_model_dir": "/models/q;rm -rf"}, "sparkfleet_model_dir", "whitespace",
                 id="model dir with ; and a space"),
    pytest.param({"sparkfleet_model_dir": "/models/qwén"}, "sparkfleet_model_dir", "only ASCII", id="model dir non-ASCII"),
    pytest.param({"vllm_serve_api_key": "clé-secrète"}, "vllm_serve_api_key", "printable ASCII", id="API key non-ASCII"),
    pytest.param({"vllm_serve_api_key": "k\x07ey"}, "vllm_serve_api_key", "printable ASCII", id="API key with BEL"),
    pytest.param({"healthcheck_api_key": "k\x00"}, "healthcheck_api_key", "printable ASCII", id="healthcheck key NUL"),
    pytest.param({"sparkfleet_api_host": "0.0.0.0;rm"}, "sparkfleet_api_host", "IP address or a host name",
                 id="sparkfleet_api_host=0.0.0.0;rm"),
])
def test_inputs_that_broke_later_are_refused_now(settings, name, words, observe):
    message = _one(settings, name, words)
    assert "clé" not in message and "secrète" not in message
    observe(message)


@pytest.mark.bad_input(name="inventory: IPv6 fabric, a host with a shell word",
                       expected="the inventory check refuses it naming host and variable")
@pytest.mark.parametrize("host_vars, words", [
    pytest.param({"sparkfleet_fabric_ip": "fd00::11", "sparkfleet_fabric_subnet": "fd00::/64"}, "is IPv6",
                 id="sparkfleet_fabric_ip=fd00::11"),
    pytest.param({"ansible_host": "0.0.0.0;rm"}, "ansible_host '0.0.0.0;rm' is not an IP address or a host name",
                 id="ansible_host=0.0.0.0;rm"),
    pytest.param({"sparkfleet_mgmt_ip": "-oProxyCommand=x"}, "sparkfleet_mgmt_ip", id="sparkfleet_mgmt_ip=-oProxyCommand"),
    pytest.param({"sparkfleet_fabric_ip": "0.0.0.0", "sparkfleet_fabric_subnet": "0.0.0.0/24"}, "not an address of the node",
                 id="sparkfleet_fabric_ip=0.0.0.0"),
    pytest.param({"sparkfleet_fabric_interface": "eth0;reboot"}, "not an interface name", id="interface eth0;reboot"),
])
def test_inventory_refuses_what_broke_later(host_vars, words, observe):
    hv = {"h": dict({"sparkfleet_fabric_subnet": SUBNET, "sparkfleet_fabric_ip": "192.168.200.12",
                     "ansible_host": "10.1.230.180"}, **host_vars)}
    errors = inventory_errors(hv, {"spark": ["h"], "spark_head": ["h"], "spark_workers": []})
    assert any(words in e and e.startswith("h: ") for e in errors), errors
    observe(next(e for e in errors if words in e))


def test_ray_start_args_brackets_an_ipv6_head():
    assert ray_start_args("fd00::12", False, "fd00::11")[:2] == ["--address", "[fd00::11]:6379"]


def test_preflight_templates_every_written_path_for_the_node_check():
    from pathlib import Path

    import yaml

    repo = Path(__file__).resolve().parents[4]
    listed = yaml.safe_load((repo / "roles/preflight/vars/main.yml").read_text())["_preflight_path_vars"]
    users = {u for _kind, _where, u in v.WRITTEN_PATHS.values() if u}
    assert sorted(listed) == sorted(set(v.WRITTEN_PATHS) | users)


@pytest.mark.bad_input(name="the node firewall turned off without the exposure opt-in",
                       expected="refused: ray_cluster_firewall false needs sparkfleet_allow_ray_exposure too")
def test_turning_the_firewall_off_needs_the_exposure_opt_in(observe):
    message = _one({"ray_cluster_firewall": False}, "ray_cluster_firewall", "sparkfleet_allow_ray_exposure")
    assert _errors({"ray_cluster_firewall": False, "sparkfleet_allow_ray_exposure": True}) == []
    observe(message)


@pytest.mark.parametrize("path, ok", [("/root/work/sparkfleet-logs", True), ("/home/u/p/sparkfleet-logs", True),
                                      ("/runner/project/sparkfleet-logs", True), ("/etc/x", False),
                                      ("/home/u/.ssh/logs", False), ("/root/.ansible/x", False), ("logs", False)])
def test_the_controller_logs_directory(path, ok):
    assert (v.check_controller_dir(path)[1] is None) is ok


def test_a_worker_is_not_told_about_the_head_s_api():
    settings = {"sparkfleet_api_port": 0, "sparkfleet_api_host": "x;y", "sparkfleet_model_state_file": "/etc/passwd",
                "vllm_serve_gpu_memory_utilization": 2, "sparkfleet_ray_port": 0}
    assert [e.split(" ")[1] for e in _errors(settings, head=False)] == ["sparkfleet_ray_port"]
    assert len(_errors(settings, head=True)) == 5


def test_a_value_made_from_a_bad_variable_is_not_named_again():
    settings = {"sparkfleet_api_port": 0, "healthcheck_url": "http://10.99.0.11:0", "sparkfleet_fabric_subnet": SUBNET}
    both = v.settings_errors(settings, HOST)
    assert [e.split(" ")[1] for e in both] == ["sparkfleet_api_port", "healthcheck_url"]
    once = v.settings_errors(settings, HOST, sources={"healthcheck_url": ["sparkfleet_api_url", "sparkfleet_api_port"]})
    assert [e.split(" ")[1] for e in once] == ["sparkfleet_api_port"]
