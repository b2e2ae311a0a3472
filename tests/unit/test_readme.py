"""README's Troubleshooting table is generated from the collection's cause table (issue 19.4): it cannot drift."""

from __future__ import annotations

import importlib.util
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _generator():
    spec = importlib.util.spec_from_file_location("readme_troubleshooting",
                                                  os.path.join(ROOT, "scripts", "readme_troubleshooting.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_troubleshooting_table_is_the_generated_one():
    gen = _generator()
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    assert gen.section() in text, "README's troubleshooting table is stale: run scripts/readme_troubleshooting.py --write"
    assert text.index("## Troubleshooting") < text.index(gen.BEGIN) < text.index("## Topology")


def test_one_row_per_failure_class_with_meaning_and_fix():
    from ansible_collections.sparkfleet.vllm.plugins.module_utils.engine._vllm_causes import CAUSES
    rows = _generator().table().splitlines()[2:]
    assert [r.split("`")[1] for r in rows] == [c.name for c in sorted(CAUSES, key=lambda c: c.priority)]
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split(" | ")]
        assert len(cells) == 3 and all(cells), row
        assert not re.search(r"\{[a-z_]+\}", cells[1] + cells[2]), row   # every {setting} named by its variable
    # The variables a user changes, not the generic setting names.
    assert "vllm_serve_gpu_memory_utilization" in _generator().table()
