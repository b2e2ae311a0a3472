"""Stand-in package path (vllm.utils); FlexibleArgumentParser lives in vllm.utils.argparse_utils since vLLM 0.11."""
