"""`hf` (huggingface_hub >= 1.0's CLI) of the lab image: `hf download REPO --local-dir DIR` writes the lab's
generated model (lab/standin/make_model.py) as if downloaded; the lab has no network. Anything else fails as the
real CLI does for an unknown command. `huggingface-cli` is not in the image: huggingface_hub 1.0 removed it."""

from __future__ import annotations

import argparse
import os
import sys

try:
    from . import make_model  # in the image (build.sh installs it into the package)
except ImportError:  # lab/standin on sys.path (unit tests)
    import make_model


def main(argv=None):
    parser = argparse.ArgumentParser(prog="hf", description="Hugging Face Hub CLI [sparklab stand-in]")
    sub = parser.add_subparsers(dest="command", required=True)
    dl = sub.add_parser("download", help="Download files from the Hub")
    dl.add_argument("repo_id")
    dl.add_argument("--local-dir", required=True)
    dl.add_argument("--revision", default=None)
    dl.add_argument("--token", default=None)
    a = parser.parse_args(argv)
    shards = int(os.environ.get("SPARKLAB_HF_SHARDS", "8"))
    shard_mb = float(os.environ.get("SPARKLAB_HF_SHARD_MB", "32"))
    sys.stderr.write("Fetching %d files from %s (sparklab stand-in: generated, no network)\n" % (shards + 5, a.repo_id))
    make_model.make_model(a.local_dir, shards, shard_mb, name=a.repo_id)
    sys.stdout.write(os.path.abspath(a.local_dir) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
