"""sparklab stand-in for vLLM: lab only, never a real inference engine.

It behaves like `vllm serve --distributed-executor-backend ray` as far as sparkfleet.vllm can observe: the
same arguments, log lines, Ray placement group, torch.distributed (gloo) rendezvous between ranks, real reads of
the safetensors shards, the same HTTP endpoints. Generated text is deterministic filler.
"""

from __future__ import annotations

from .releases import current as _current_release

# The vLLM release the stand-in plays (logs, /version, `vllm --version`, registry, serve flags): releases.py.
__version__, RELEASE = _current_release()
STANDIN_MARKER = "SPARKLAB STAND-IN"
