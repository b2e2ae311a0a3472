"""ray_version: the Ray version out of `ray --version`, as captured from images."""

from __future__ import annotations

import pytest

from ansible_collections.sparkfleet.vllm.plugins.filter.ray_version import ray_version


@pytest.mark.parametrize("text, version", [
    ("ray, version 2.53.0\n", "2.53.0"),
    ("ray, version 2.60.0", "2.60.0"),
    ("ray, version 2.51.1\n", "2.51.1"),
    ("ray, version 3.0.0.dev0\n", "3.0.0.dev0"),
    ("2026-01-01 WARNING something\nray, version 2.52.0\n", "2.52.0"),
    ('docker: Error response from daemon: exec: "ray": executable file not found in $PATH', None),
    ("", None),
    (None, None),
])
def test_ray_version(text, version):
    assert ray_version(text) == version
