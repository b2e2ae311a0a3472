# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter: sparkfleet.vllm.download_failure (documented in download_failure.yml)."""

from __future__ import annotations

import re

# (pattern in the output of `hf download`, why, what to do); the first that matches names the cause. The texts are
# huggingface_hub's: its CLI (1.x, `hf`) prints a known error as "Error: <message>" (cli/hf.py, cli/_output.py) with the
# message of cli/_errors.py ("Access denied. Model 'x' requires approval.", "Model 'x' not found.", "Local entry not
# found. ..."); the library's own (utils/_http.py hf_raise_for_status: "Cannot access gated repo for url", "Repository
# Not Found for url", "403 Forbidden: ... Make sure your token has the correct permissions", "429 Too Many Requests",
# httpx's "Client error '401 Unauthorized'" with the Hub's "Invalid credentials in Authorization header") come in
# tracebacks and in 0.x's huggingface-cli; file_download.py warns "Not enough free disk space to download the file"
# before the kernel's "[Errno 28] No space left on device".
_CAUSES = (
    (re.compile(r"Cannot access gated repo|is gated\.|GatedRepoError|awaiting a review|not in the authorized list|"
                r"requires approval", re.I),
     "the model is gated and this token has no access to it",
     "accept the model's licence on huggingface.co with the account of model_sync_hf_token (a gated model may wait "
     "for its owner's review), then run again"),
    (re.compile(r"\b403 Forbidden|Make sure your token has the correct permissions", re.I),
     "the token may not read this model (403)",
     "give model_sync_hf_token read access (a fine-grained token needs 'Read access to contents of all public gated "
     "repos you can access', or this repository named), or use a read token"),
    (re.compile(r"\b429 Too Many Requests|rate limit", re.I),
     "Hugging Face limited the rate of requests (429)",
     "wait for the time the message names and run site.yml again (the download resumes); a token "
     "(model_sync_hf_token) gets a higher limit than an anonymous download"),
    (re.compile(r"\b401\b|Invalid credentials|Invalid user token|Unauthorized", re.I),
     "Hugging Face refused the token (401)",
     "set model_sync_hf_token to a valid token with read access (huggingface.co/settings/tokens), or to '' for a "
     "public model"),
    (re.compile(r"RepositoryNotFoundError|Repository Not Found|\b404\b|\bModel '[^']+' not found", re.I),
     "there is no such model (or it is private)",
     "check model_sync_model_id (sparkfleet_model_id), for example Qwen/Qwen3-235B-A22B-FP8"),
    (re.compile(r"No space left on device|Errno 28|Disk quota exceeded|Not enough free disk space", re.I),
     "the head's disk is full",
     "free space on the filesystem of model_sync_src (the model needs its full size there), then run again: the "
     "download resumes"),
    (re.compile(r"Temporary failure in name resolution|Name or service not known|Failed to resolve|"
                r"Connection refused|Network is unreachable|timed out|ConnectTimeout|ReadTimeout|LocalEntryNotFound|"
                r"Local entry not found|ConnectError|check your internet connection",
                re.I),
     "the head cannot reach huggingface.co",
     "give the head a route and DNS to huggingface.co (and HTTPS_PROXY where one is needed), or copy the model to "
     "model_sync_src yourself and leave model_sync_download off"),
)
_SECRET = re.compile(r"\bhf_[A-Za-z0-9]{8,}\b")


def download_failure(output, model_id="", path=""):
    """{cause, hint, lines} for the output of a failed `hf download`; cause 'unknown' when no known cause shows."""
    if isinstance(output, (list, tuple)):
        output = "\n".join(str(line) for line in output)
    text = output if isinstance(output, str) else ""
    lines = [ln.strip() for ln in _SECRET.sub("hf_(hidden)", text).splitlines() if ln.strip()]
    for pattern, cause, hint in _CAUSES:
        shown = [ln for ln in lines if pattern.search(ln)]
        if shown:
            return {"cause": cause, "hint": hint, "lines": shown[-3:]}
    hint = "read the lines above (hf download's own words) for %s into %s" % (model_id or "the model",
                                                                              path or "model_sync_src")
    return {"cause": "unknown", "lines": lines[-5:], "hint": hint}


class FilterModule:
    """Name why a model download failed."""

    def filters(self):
        return {"download_failure": download_failure}
