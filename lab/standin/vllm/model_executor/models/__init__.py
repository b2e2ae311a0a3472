"""vllm.model_executor.models.ModelRegistry of the stand-in: the architectures its release registers."""

from sparklab_vllm import RELEASE


class _ModelRegistry:
    def get_supported_archs(self):
        return set(RELEASE["architectures"])


ModelRegistry = _ModelRegistry()
