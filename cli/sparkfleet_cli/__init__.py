"""sparkfleet: the sparkfleet.vllm collection's playbooks from one command, with a live view."""

__version__ = "0.3.0"
