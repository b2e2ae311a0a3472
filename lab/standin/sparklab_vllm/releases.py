"""Which vLLM release the stand-in plays: its version, the model architectures it registers and the `serve` flags
(and choices) that release accepts.

The lab picks the release per image (`SPARKLAB_VLLM_RELEASE` in the image's environment, set by lab/stage.sh), so a
"too old" runtime image answers a probe the way a real old vLLM would: older version, no Qwen3.5 architecture, no
`--safetensors-load-strategy`. Default: the release of the image proven for Qwen3.5 on GB10 (DOMAIN.md section 9).
"""

from __future__ import annotations

import os

DEFAULT = "0.17.1"

# Architectures both releases register (a representative subset of vLLM's registry; enough for the lab models).
_COMMON_ARCHS = (
    "LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM", "Qwen2ForCausalLM", "Qwen2MoeForCausalLM",
    "Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "Gemma3ForCausalLM", "DeepseekV3ForCausalLM", "GptOssForCausalLM",
)

RELEASES = {
    # NGC 25.10: no Qwen3-Next / Qwen3.5, no --safetensors-load-strategy yet.
    "0.10.2": {
        "architectures": _COMMON_ARCHS,
        "serve_flags_absent": ("--safetensors-load-strategy",),
        "safetensors_load_strategies": (),
    },
    # hellohal2064/vllm-qwen3.5-gb10 (0.17.1rc1), NGC 26.03: Qwen3.5; load strategies lazy/eager/torchao only.
    "0.17.1": {
        "architectures": _COMMON_ARCHS + ("Qwen3NextForCausalLM", "Qwen3_5ForConditionalGeneration",
                                          "Qwen3_5MoeForConditionalGeneration"),
        "serve_flags_absent": (),
        "safetensors_load_strategies": ("eager", "lazy", "torchao"),
    },
}


def current():
    """(version, release table entry) of the release this process plays."""
    version = os.environ.get("SPARKLAB_VLLM_RELEASE") or DEFAULT
    if version not in RELEASES:
        raise SystemExit("SPARKLAB_VLLM_RELEASE=%s: the stand-in plays %s" % (version, ", ".join(sorted(RELEASES))))
    return version, RELEASES[version]
