# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The monitoring role's variables: what each may be.

Every option of roles/monitoring/meta/argument_specs.yml has its check here (CHECKS: variable -> check, None where
_validate.settings_errors checks it with its context); tests/unit/plugins/plugin_utils/test_validate_specs.py holds
the two together. Private to the collection, pure functions, no I/O.
"""

from __future__ import annotations

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._validate_values import (
    SECONDS_MAX,
    check_bool,
    check_cidr_list_or_empty,
    check_nft_table,
    check_number_between,
    check_optional_url,
    check_port,
    check_whole,
)


CHECKS = {
    "monitoring_exporters_only": check_bool,
    "monitoring_prometheus_port": check_port,
    "monitoring_alertmanager_port": check_port,
    "monitoring_node_exporter_port": check_port,
    "monitoring_allow": check_cidr_list_or_empty,
    "monitoring_firewall_table": check_nft_table,
    "monitoring_scrape_interval": check_whole(1, "a whole number of seconds", 300),
    "monitoring_retention_days": check_whole(1, "a whole number of days", 90),
    "monitoring_retention_size_mb": check_whole(64, "a whole number of MiB", 65536),
    "monitoring_webhook_url": check_optional_url,
    "monitoring_alert_memory_above_baseline_mb": check_whole(1, "a whole number of MiB", 1 << 20),
    "monitoring_alert_page_cache_fraction": check_number_between(0, 1, "a share of a node's memory"),
    "monitoring_alert_kv_cache_fraction": check_number_between(0, 1, "a share of the KV cache"),
    "monitoring_alert_queue_time_seconds": check_number_between(0, SECONDS_MAX, "seconds"),
    "monitoring_alert_disk_free_fraction": check_number_between(0, 1, "a share of the filesystem"),
    "monitoring_textfile_interval": check_whole(5, "a whole number of seconds", 300),
}
