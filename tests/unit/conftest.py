"""Shared unit-test harness: run a module's main() in-process and capture its result."""

from __future__ import annotations

import json

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args


class _ModuleExit(Exception):
    def __init__(self, result):
        super().__init__(result)
        self.result = result


def _exit_json(self, **kwargs):
    kwargs.setdefault("changed", False)
    raise _ModuleExit(kwargs)


def _fail_json(self, msg, **kwargs):
    kwargs["failed"] = True
    kwargs["msg"] = msg
    raise _ModuleExit(kwargs)


@pytest.fixture
def run_module(monkeypatch):
    """Return a callable: run_module(module, args, check_mode=False) -> result dict.

    The result is what the module passed to exit_json/fail_json; failures carry failed=True.
    The result is round-tripped through JSON so tests see what Ansible would see.
    """
    monkeypatch.setattr(basic.AnsibleModule, "exit_json", _exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", _fail_json)

    def _run(module, args, check_mode=False):
        args = dict(args)
        if check_mode:
            args["_ansible_check_mode"] = True
        with patch_module_args(args):
            try:
                module.main()
            except _ModuleExit as exc:
                return json.loads(json.dumps(exc.result, default=str))
        raise AssertionError("module returned without calling exit_json or fail_json")

    return _run
