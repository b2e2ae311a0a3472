"""`hf` (huggingface_hub >= 1.0's CLI) of the lab image: `hf download REPO --local-dir DIR` writes the lab's
generated model (lab/standin/make_model.py) as if downloaded; the lab has no network. Anything else fails as the
real CLI does for an unknown command. `huggingface-cli` is not in the image: huggingface_hub 1.0 removed it.

Failure knob: the file `.sparklab-hf-fail` in the directory above --local-dir (the role mounts that directory into
the container, so a test writes it on the head), or SPARKLAB_HF_FAIL in the environment, names one of FAILURES; `hf`
then prints what huggingface_hub's CLI prints for that failure on stderr and exits 1, as the real one does. The texts
are huggingface_hub's (main at ee0a4510, 1.29.0.dev0): the CLI prints a known error as `Error: <message>` and a hint
(cli/hf.py main, cli/_output.py error and hint), the message made by cli/_errors.py (gated repo, repository not
found, local entry not found) or the HTTP error's own text (utils/_http.py hf_raise_for_status and _format, httpx's
raise_for_status for the 401 of a wrong token); an unknown error (a full disk: OSError) ends in Python's traceback.
A line `delay_s=SECONDS` in the knob file waits that long before each shard (the role's byte progress per poll).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

try:
    from . import make_model  # in the image (build.sh installs it into the package)
except ImportError:  # lab/standin on sys.path (unit tests)
    import make_model

KNOB = ".sparklab-hf-fail"
_HINT = "Hint: set HF_DEBUG=1 as environment variable for full traceback.\n"
_REQ = "Root=1-6750a1b2-0c1d2e3f4a5b6c7d8e9f0a1b"


def _texts(repo):
    api = "https://huggingface.co/api/models/%s/revision/main" % repo
    return {
        # cli/_errors.py _format_gated_repo (repo_type "model")
        "gated": "Error: Access denied. Model '%s' requires approval.\n" % repo + _HINT,
        # cli/_errors.py _format_repo_not_found: a missing repo, or a private one without access
        "not_found": ("Error: Model '%s' not found.\nIf the repo is private, make sure you are authenticated and your "
                      "token has the required permissions.\nIf the repo does not exist, create it with: hf repos create "
                      "%s\n" % (repo, repo)) + _HINT,
        # utils/_http.py: a wrong token is not RepoNotFound; HfHubHTTPError(str(httpx error)) + the server's message
        "unauthorized": ("Error: Client error '401 Unauthorized' for url '%s' (Request ID: %s)\nFor more information "
                         "check: https://developer.mozilla.org/en-US/docs/Web/HTTP/Status/401\n\nInvalid credentials in "
                         "Authorization header\n" % (api, _REQ)) + _HINT,
        # _snapshot_download.py: no connection and nothing cached; cli/_errors.py _format_local_entry_not_found
        "offline": ("Error: Local entry not found. Got: ConnectError: [Errno -3] Temporary failure in name resolution\n"
                    "An error happened while trying to locate the files on the Hub, and we cannot find the appropriate "
                    "snapshot folder for the specified revision on the local disk. Please check your internet "
                    "connection and try again.\n") + _HINT,
        # file_download.py _check_disk_space's warning, then the write's OSError (not a known CLI error: traceback)
        "disk_full": ("/opt/venv/lib/python3.12/site-packages/huggingface_hub/file_download.py:746: UserWarning: Not "
                      "enough free disk space to download the file. The expected file size is: 5368.71 MB. The target "
                      "location /models/.cache/huggingface/download only has 1024.00 MB free disk space.\n"
                      "  warnings.warn(\nTraceback (most recent call last):\n"
                      '  File "/opt/venv/bin/hf", line 8, in <module>\n    sys.exit(main())\n'
                      "OSError: [Errno 28] No space left on device\n"),
    }


FAILURES = tuple(sorted(_texts("x")))


def _knob(local_dir):
    """(failure or None, seconds before each shard) from the knob file, else SPARKLAB_HF_FAIL."""
    fail, delay = os.environ.get("SPARKLAB_HF_FAIL") or None, 0.0
    try:
        with open(os.path.join(os.path.dirname(os.path.abspath(local_dir)), KNOB)) as handle:
            for line in handle.read().split():
                key, _, value = line.partition("=")
                if key == "delay_s":
                    delay = float(value)
                elif key:
                    fail = key
    except (OSError, ValueError):
        pass
    return fail, delay


def main(argv=None):
    parser = argparse.ArgumentParser(prog="hf", description="Hugging Face Hub CLI [sparklab stand-in]")
    sub = parser.add_subparsers(dest="command", required=True)
    dl = sub.add_parser("download", help="Download files from the Hub")
    dl.add_argument("repo_id")
    dl.add_argument("--local-dir", required=True)
    dl.add_argument("--revision", default=None)
    dl.add_argument("--token", default=None)
    a = parser.parse_args(argv)
    fail, delay = _knob(a.local_dir)
    if fail:
        texts = _texts(a.repo_id)
        if fail not in texts:
            sys.stderr.write("sparklab stand-in hf: unknown failure %r in %s (one of %s)\n" % (fail, KNOB, FAILURES))
            return 2
        sys.stderr.write(texts[fail])
        return 1
    shards = int(os.environ.get("SPARKLAB_HF_SHARDS", "8"))
    shard_mb = float(os.environ.get("SPARKLAB_HF_SHARD_MB", "32"))
    sys.stderr.write("Fetching %d files from %s (sparklab stand-in: generated, no network)\n" % (shards + 5, a.repo_id))
    if delay:
        make_model.write_shard = _slowly(make_model.write_shard, delay)
    make_model.make_model(a.local_dir, shards, shard_mb, name=a.repo_id)
    sys.stdout.write(os.path.abspath(a.local_dir) + "\n")
    return 0


def _slowly(write, delay):
    def wrapped(*args, **kwargs):
        time.sleep(delay)
        return write(*args, **kwargs)
    return wrapped


if __name__ == "__main__":
    sys.exit(main())
