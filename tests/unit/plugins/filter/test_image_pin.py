"""Issue 39.3: prepare pins sparkfleet_image by the registry digest the head's docker reports (RepoDigests as
`docker image inspect --format '{{json .RepoDigests}}'` prints them), or says why it cannot."""

from __future__ import annotations

import json

import pytest

from ansible_collections.sparkfleet.vllm.plugins.filter.image_pin import image_pin

D = "sha256:" + "ab" * 32
# What docker 28 printed for a pulled Hub image, and for an image built or loaded on the node (no registry digest).
PULLED = json.loads('["hellohal2064/vllm-qwen3.5-gb10@%s"]' % D)
LOADED = json.loads("[]")


def test_a_tag_is_pinned_by_the_heads_digest():
    got = image_pin("hellohal2064/vllm-qwen3.5-gb10:latest", PULLED)
    assert got["pin"] == "hellohal2064/vllm-qwen3.5-gb10@" + D
    assert got["ref"] == "hellohal2064/vllm-qwen3.5-gb10:latest"


def test_the_sparks_placeholder_reads_the_tag_it_stands_for():
    placeholder = "hellohal2064/vllm-qwen3.5-gb10@sha256:REPLACE-WITH-THE-DIGEST-OF-YOUR-IMAGE"
    assert image_pin(placeholder, [])["ref"] == "hellohal2064/vllm-qwen3.5-gb10:latest"
    assert image_pin(placeholder, [], "26.03")["ref"] == "hellohal2064/vllm-qwen3.5-gb10:26.03"
    assert image_pin(placeholder, PULLED)["pin"] == "hellohal2064/vllm-qwen3.5-gb10@" + D


def test_a_pinned_image_is_left_alone():
    pinned = "hellohal2064/vllm-qwen3.5-gb10@" + D
    got = image_pin(pinned, ["hellohal2064/vllm-qwen3.5-gb10@sha256:" + "cd" * 32])
    assert got["pin"] == "" and "pinned by digest already" in got["why"] and got["ref"] == pinned


def test_an_image_without_a_registry_digest_is_named_not_pinned():
    got = image_pin("sparklab/vllm-runtime:46169ea6b799", LOADED)
    assert got["pin"] == ""
    assert "sparklab/vllm-runtime:46169ea6b799 has no registry digest on the head" in got["why"]


@pytest.mark.parametrize("image, digests, pin", [
    # a registry with a port is not a tag
    ("registry.local:5000/team/vllm:v1", ["registry.local:5000/team/vllm@" + D], "registry.local:5000/team/vllm@" + D),
    # Docker Hub's implied prefixes (RepoDigests leave them out)
    ("docker.io/vllm/vllm-openai:v0.17.1", ["vllm/vllm-openai@" + D], "docker.io/vllm/vllm-openai@" + D),
    ("nvcr.io/nvidia/vllm:26.03-py3", ["nvcr.io/nvidia/vllm@" + D], "nvcr.io/nvidia/vllm@" + D),
    # another name's digest (a retag of the same content) is not this image's
    ("team/vllm:v1", ["other/vllm@" + D], ""),
    # something that is not a digest
    ("team/vllm:v1", ["team/vllm@sha256:short", None], ""),
])
def test_the_digest_of_this_name_only(image, digests, pin):
    assert image_pin(image, digests)["pin"] == pin
