"""vllm.reasoning.ReasoningParserManager of the stand-in: the reasoning parsers its release registers."""

from sparklab_vllm.parsers import ReasoningParserManager  # noqa: F401
