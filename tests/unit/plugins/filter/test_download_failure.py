"""download_failure (issue 41.7): a failed `hf download` is named, not censored. The outputs are huggingface_hub's
error texts as users have posted them (gated repo, 401, not found) and the kernel's for a full disk."""

from __future__ import annotations

import pytest

from ansible_collections.sparkfleet.vllm.plugins.filter.download_failure import download_failure

GATED = """Cannot access gated repo for url https://huggingface.co/api/models/meta-llama/Llama-2-7b-hf.
Repo model meta-llama/Llama-2-7b-hf is gated. You must be authenticated to access it."""
UNAUTHORIZED = """401 Client Error. (Request ID: Root=1-679e8edb-76a958d232c2fd1a473745c7)

Repository Not Found for url: https://huggingface.co/openai/clip-vit-base-patch32/resolve/main/model.safetensors.
Please make sure you specified the correct `repo_id` and `repo_type`.
If you are trying to access a private or gated repo, make sure you are authenticated.
Invalid credentials in Authorization header"""
NOT_FOUND = """huggingface_hub.errors.RepositoryNotFoundError: 404 Client Error. (Request ID: Root=1-6)

Repository Not Found for url: https://huggingface.co/api/models/Qwen/Qwen3-235B-A22B-FP9/revision/main."""
FULL = """Downloading 'model-00017-of-00024.safetensors' to '/srv/models/.cache/huggingface/download/x.incomplete'
OSError: [Errno 28] No space left on device"""
DNS = "requests.exceptions.ConnectionError: Failed to resolve 'huggingface.co' ([Errno -3] Temporary failure in name resolution)"


@pytest.mark.parametrize("output, cause", [
    (GATED, "the model is gated and this token has no access to it"),
    (UNAUTHORIZED, "Hugging Face refused the token (401)"),
    (NOT_FOUND, "there is no such model (or it is private)"),
    (FULL, "the head's disk is full"),
    (DNS, "the head cannot reach huggingface.co"),
])
def test_each_cause_is_named_with_its_fix(output, cause):
    got = download_failure(output, "m", "/srv/models/m")
    assert got["cause"] == cause
    assert got["hint"] and got["lines"]


def test_unknown_output_keeps_its_last_lines_and_hides_a_token():
    got = download_failure("a\nb\nusing token hf_abcdefghijklmnop\nboom", "org/m", "/srv/m")
    assert got["cause"] == "unknown" and got["lines"][-1] == "boom"
    assert "hf_abcdefghijklmnop" not in repr(got) and "org/m" in got["hint"]
    assert download_failure(None)["cause"] == "unknown"
    assert download_failure(GATED.splitlines())["cause"] == "the model is gated and this token has no access to it"
