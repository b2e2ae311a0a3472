"""Make lab/standin (the vLLM stand-in and the model generator) importable for its unit tests."""

from __future__ import annotations

import os
import sys

_STANDIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lab", "standin")
_STANDIN = os.path.normpath(_STANDIN)
if _STANDIN not in sys.path:
    sys.path.insert(0, _STANDIN)
