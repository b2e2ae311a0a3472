# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter: sparkfleet.vllm.serving_errors (documented in serving_errors.yml)."""

from __future__ import annotations

import re

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._validate import serving_errors as _serving_errors

# Ansible's wording around a templating error of one loop item; the error itself follows it.
_PREFIX_RE = re.compile(r"^.*?Error while resolving value for '[^']*': ", re.S)


def _template_error(result):
    msg = str(result.get("msg") or result.get("exception") or "templating failed")
    return _PREFIX_RE.sub("", msg, count=1)


def serving_errors(data, host="head", fact="_vllm_serve_checked", gpus=None):
    """Problems with the serving variables: data is a dict of them, or the results of a loop that templated
    each variable into the fact `fact` (the failed items are Jinja errors in that variable)."""
    if isinstance(data, dict) and isinstance(data.get("results"), list):
        data = data["results"]
    if isinstance(data, list):
        settings, failed = {}, {}
        for result in data:
            if not isinstance(result, dict) or not isinstance(result.get("item"), str):
                continue
            if result.get("failed"):
                failed[result["item"]] = _template_error(result)
            else:
                settings[result["item"]] = (result.get("ansible_facts") or {}).get(fact)
        return _serving_errors(settings, host, failed, gpus)
    return _serving_errors(data, host, None, gpus)


class FilterModule:
    """Serving-settings validation for the preflight play and the vllm_serve role."""

    def filters(self):
        return {"serving_errors": serving_errors}
