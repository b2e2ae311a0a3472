"""Stand-in package path (vllm.entrypoints.openai)."""
