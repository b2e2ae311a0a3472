"""Rendering the collection's unit templates the way the template module does (trim_blocks), with the filters they
use, for the unit tests that parse or run what a node would get (issue 40.4 and 40.5)."""

from __future__ import annotations

import functools
import shlex
import socket
from pathlib import Path

import jinja2

REPO = Path(__file__).resolve().parents[3]


def _bool(value):
    return value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes", "on")


def _flatten(values):
    out = []
    for value in values:
        out.extend(_flatten(value) if isinstance(value, list) else [value])
    return out


_ENV = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True, keep_trailing_newline=True)
_ENV.filters["bool"] = _bool
_ENV.filters["quote"] = shlex.quote
_ENV.filters["flatten"] = _flatten


@functools.lru_cache(maxsize=None)
def _template(role, name):
    return _ENV.from_string((REPO / "roles" / role / "templates" / name).read_text())


def render(role, name, **variables):
    return _template(role, name).render(**dict(dict(ansible_managed="Ansible managed"), **variables))


def ray_unit(head, tmp, live_restore=False, **over):
    return render("ray_cluster", "sparkfleet-ray.service.j2", **dict(dict(
                  sparkfleet_fabric_ip="192.168.200.12" if head else "192.168.200.13", _ray_cluster_is_head=head,
                  _ray_cluster_live_restore=live_restore, ray_cluster_firewall=True,
                  ray_cluster_firewall_allow=["192.168.200.0/24"], ray_cluster_firewall_nft="/usr/sbin/nft",
                  _ray_cluster_firewall_file=str(tmp / "ray-firewall.nft"), sparkfleet_head_fabric_ip="127.0.0.1",
                  sparkfleet_ray_port=_free_port(), ray_cluster_gcs_wait_timeout=2, sparkfleet_head_host="spark-1",
                  sparkfleet_ray_unit="sparkfleet-ray", _ray_cluster_image_ref="sha256:" + "a" * 64,
                  sparkfleet_config_dir=str(tmp / "etc"), _ray_cluster_docker_args=["--name", "sparkfleet-ray"],
                  ray_cluster_watchdog=True, ray_cluster_restart_sec=5, _ray_cluster_node={"systemd_version": 255},
                  ray_cluster_restart_max_delay=60), **over))


def vllm_unit(tmp, **over):
    return render("vllm_serve", "sparkfleet-vllm.service.j2", **dict(dict(
                  sparkfleet_vllm_unit="sparkfleet-vllm", vllm_serve_served_model_name="qwen",
                  vllm_serve_tensor_parallel_size=2, vllm_serve_pipeline_parallel_size=1,
                  _vllm_serve_live_restore=False, sparkfleet_ray_unit="sparkfleet-ray", vllm_serve_memory_gate=True,
                  vllm_serve_cluster_wait_timeout=2, vllm_serve_memory_gate_timeout=2,
                  _vllm_serve_memory_args="--node spark-1=127.0.0.1 --ray-container sparkfleet-ray --address "
                  "127.0.0.1:%d --model-dir %s --utilization 0.8 --margin 0.02 --tolerance 0.05"
                  % (_free_port(), tmp / "model"),
                  vllm_serve_escalate_after=3, vllm_serve_escalate_window=1800, sparkfleet_config_dir=str(tmp / "etc"),
                  _vllm_serve_docker_args=["--name", "sparkfleet-vllm"], vllm_serve_liveness=True,
                  vllm_serve_restart_sec=10, _vllm_serve_model_state={"systemd_version": 255},
                  vllm_serve_restart_max_delay=300), **over))


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
