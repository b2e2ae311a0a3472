"""Preflight refuses an image pinned by a placeholder digest (inventories/sparks ships one until the operators paste
the digest of the image they run), naming the command that prints the real one; a real digest or a tag passes."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_preflight import _inventory, _preflight  # noqa: E402

import yaml  # noqa: E402

SPARKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "inventories", "sparks",
                      "group_vars", "spark", "settings.yml")


def test_the_sparks_inventory_ships_a_placeholder_digest_with_the_tag_as_a_comment():
    with open(SPARKS) as handle:
        text = handle.read()
    image = yaml.safe_load(text)["sparkfleet_image"]
    assert image.startswith("hellohal2064/vllm-qwen3.5-gb10@sha256:") and "# tag: latest" in text


@pytest.mark.parametrize("image, ok", [
    ("hellohal2064/vllm-qwen3.5-gb10@sha256:REPLACE-WITH-THE-DIGEST-OF-YOUR-IMAGE", False),
    ("hellohal2064/vllm-qwen3.5-gb10@sha256:" + "0123abcd" * 8, True),
])
def test_a_placeholder_digest_is_refused_with_the_command_that_prints_the_real_one(tmp_path, image, ok):
    rc, out = _preflight(_inventory(tmp_path, {"sparkfleet_image": image}))
    assert (rc == 0) is ok, out
    if not ok:
        assert "not a pinned digest" in out
        assert ("docker image inspect --format '{{index .RepoDigests 0}}' hellohal2064/vllm-qwen3.5-gb10:TAG"
                in out.replace("\\n", " ").replace("\n", " ").replace("  ", " ")), out
