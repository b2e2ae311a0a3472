"""Make the checkout importable as ansible_collections.sparkfleet.vllm for plain pytest runs."""

from __future__ import annotations

import os
import sys

_COLLECTIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "collections")
if _COLLECTIONS not in sys.path:
    sys.path.insert(0, _COLLECTIONS)
