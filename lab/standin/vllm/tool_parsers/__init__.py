"""vllm.tool_parsers.ToolParserManager of the stand-in: the tool-call parsers its release registers."""

from sparklab_vllm.parsers import ToolParserManager  # noqa: F401
