"""sparklab stand-in for vLLM: lab only, never a real inference engine.

It behaves like `vllm serve --distributed-executor-backend ray` as far as sparkfleet.vllm can observe: the
same arguments, log lines, Ray placement group, torch.distributed (gloo) rendezvous between ranks, real reads of
the safetensors shards, the same HTTP endpoints. Generated text is deterministic filler.
"""

from __future__ import annotations

# The vLLM release whose formats the stand-in writes (logs, /version, `vllm --version`).
__version__ = "0.13.0"
STANDIN_MARKER = "SPARKLAB STAND-IN"
