"""download_failure (issue 41.7): a failed `hf download` is named, not censored. The outputs are huggingface_hub's
error texts as users have posted them (gated repo, 401, not found) and the kernel's for a full disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.sparkfleet.vllm.plugins.filter.download_failure import download_failure

ROOT = Path(__file__).resolve().parents[4]

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


# huggingface_hub's own texts (main at ee0a4510, 1.29.0.dev0), as `hf download` (1.x) prints them on stderr: a known
# error as "Error: <message>" then a hint (cli/hf.py main, cli/_output.py error/hint), the message from
# cli/_errors.py; an HTTP error keeps the text utils/_http.py hf_raise_for_status made (_format adds the request id
# after the first line and the Hub's own message after a blank line).
HINT = "Hint: set HF_DEBUG=1 as environment variable for full traceback."
HF1_TEXTS = [
    # cli/_errors.py _format_gated_repo (repo_type "model")
    ("gated (hf 1.x)", "Error: Access denied. Model 'meta-llama/Llama-3.1-8B' requires approval.\n" + HINT,
     "the model is gated and this token has no access to it"),
    # cli/_errors.py _format_repo_not_found
    ("not found (hf 1.x)", "Error: Model 'Qwen/Qwen3-235B-A22B-FP9' not found.\nIf the repo is private, make sure you "
     "are authenticated and your token has the required permissions.\nIf the repo does not exist, create it with: hf "
     "repos create Qwen/Qwen3-235B-A22B-FP9\n" + HINT, "there is no such model (or it is private)"),
    # utils/_http.py: a wrong token is not RepoNotFound; HfHubHTTPError(str(httpx.HTTPStatusError)) + server message
    ("wrong token (hf 1.x)", "Error: Client error '401 Unauthorized' for url 'https://huggingface.co/api/models/Qwen/"
     "Qwen3-8B/revision/main' (Request ID: Root=1-6750a1b2-0c1d)\nFor more information check: https://developer."
     "mozilla.org/en-US/docs/Web/HTTP/Status/401\n\nInvalid credentials in Authorization header\n" + HINT,
     "Hugging Face refused the token (401)"),
    # utils/_http.py, the 403 branch (a fine-grained token without access to gated repos)
    ("403 (library)", "huggingface_hub.errors.HfHubHTTPError: (Request ID: Root=1-2)\n\n403 Forbidden: Please enable "
     "access to public gated repositories in your fine-grained token settings to view this repository..\nCannot "
     "access content at: https://huggingface.co/api/models/meta-llama/Llama-3.1-8B/revision/main.\nMake sure your "
     "token has the correct permissions.", "the token may not read this model (403)"),
    # utils/_http.py, the 429 branch without rate-limit headers
    ("429 (library)", "Error: \n\n429 Too Many Requests for url: https://huggingface.co/api/models/Qwen/Qwen3-8B/"
     "revision/main.", "Hugging Face limited the rate of requests (429)"),
    # _snapshot_download.py (no connection, nothing cached) through cli/_errors.py _format_local_entry_not_found
    ("offline (hf 1.x)", "Error: Local entry not found. Got: ConnectError: [Errno -3] Temporary failure in name "
     "resolution\nAn error happened while trying to locate the files on the Hub, and we cannot find the appropriate "
     "snapshot folder for the specified revision on the local disk. Please check your internet connection and try "
     "again.\n" + HINT, "the head cannot reach huggingface.co"),
    # file_download.py _check_disk_space's warning alone (the traceback's OSError cut off by the output's bound)
    ("disk warning", "UserWarning: Not enough free disk space to download the file. The expected file size is: "
     "5368.71 MB. The target location /models/.cache/huggingface/download only has 1024.00 MB free disk space.",
     "the head's disk is full"),
]


@pytest.mark.parametrize("output, cause", [(t[1], t[2]) for t in HF1_TEXTS], ids=[t[0] for t in HF1_TEXTS])
def test_huggingface_hub_1x_texts_are_named(output, cause):
    got = download_failure(output.splitlines(), "m", "/models/m")
    assert got["cause"] == cause, got
    assert got["lines"] and all(HINT not in line for line in got["lines"])


def test_the_lab_stand_in_prints_texts_each_named(monkeypatch, capsys, tmp_path):
    """The lab's `hf` (lab/standin/sparklab_vllm/hf.py) fails with the same texts, each knob named as meant."""
    import importlib
    import sys

    standin = str(ROOT / "lab" / "standin")
    monkeypatch.syspath_prepend(standin)
    hf = importlib.import_module("sparklab_vllm.hf")
    expected = {"gated": "the model is gated and this token has no access to it",
                "not_found": "there is no such model (or it is private)",
                "unauthorized": "Hugging Face refused the token (401)",
                "offline": "the head cannot reach huggingface.co",
                "disk_full": "the head's disk is full"}
    assert set(hf.FAILURES) == set(expected)
    for knob, cause in expected.items():
        monkeypatch.setenv("SPARKLAB_HF_FAIL", knob)
        assert hf.main(["download", "org/m", "--local-dir", str(tmp_path / "m")]) == 1
        err = capsys.readouterr().err
        assert download_failure(err, "org/m")["cause"] == cause, (knob, err)
    assert not (tmp_path / "m").exists()   # a failed download wrote nothing
    sys.modules.pop("sparklab_vllm.hf", None)
