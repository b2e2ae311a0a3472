"""`import vllm` in the lab image: the sparklab stand-in (sparklab_vllm) behind the few Python APIs of vLLM that
sparkfleet.vllm's image check asks (version, model registry, `serve` argument parser). Lab only."""

from sparklab_vllm import __version__  # noqa: F401
