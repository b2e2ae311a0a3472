"""Make the checkout importable as ansible_collections.sparkfleet.vllm for plain pytest runs."""

from __future__ import annotations

import os
import sys

_COLLECTIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "collections")
if _COLLECTIONS not in sys.path:
    sys.path.insert(0, _COLLECTIONS)
# The checkout's CLI, not the one an editable install of another checkout (a worktree's shared .venv) points at.
_CLI = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cli")
if _CLI not in sys.path:
    sys.path.insert(0, _CLI)
