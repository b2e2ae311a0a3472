"""Stand-in package path (vllm.model_executor)."""
