"""The architectures whose layers sparktui reads as vLLM builds them, checked by building a real config
of each on the meta device in vLLM 0.32 and comparing every layer's KV spec (kind, KV heads, K and V
head sizes, window, Mamba state shapes) with the fit's reading: bench/vllm_layer_oracle.py over
tests/fixtures/model-configs and its unseen/ folder, and, where no checkpoint's own config was found
(Granite-4.0-H, Falcon-H1, Seed-OSS-36B, OLMo-3-32B, Laguna-S-2.1), configs at a released model's geometry
(tests/support/architecture_configs.py); tests/core/test_fit_vs_vllm.py runs it. Any other
architecture is read as a generic decoder, and the fit says so (`unchecked_note`)."""

from __future__ import annotations

LAYERS_CHECKED = frozenset(
    {
        "DeciLMForCausalLM",
        "DeepseekV3ForCausalLM",
        "FalconH1ForCausalLM",
        "Gemma3ForCausalLM",
        "Gemma3ForConditionalGeneration",
        "Gemma4ForCausalLM",
        "Gemma4ForConditionalGeneration",
        "Glm4MoeForCausalLM",
        "Glm4MoeLiteForCausalLM",
        "GptOssForCausalLM",
        "GraniteMoeHybridForCausalLM",
        "KimiLinearForCausalLM",
        "LagunaForCausalLM",
        "Llama4ForCausalLM",
        "Llama4ForConditionalGeneration",
        "LlamaForCausalLM",
        "MiMoV2FlashForCausalLM",
        "MiniMaxM2ForCausalLM",
        "Mistral3ForConditionalGeneration",
        "MixtralForCausalLM",
        "NemotronHForCausalLM",
        "Olmo3ForCausalLM",
        "Phi3ForCausalLM",
        "Qwen2ForCausalLM",
        "Qwen3ForCausalLM",
        "Qwen3MoeForCausalLM",
        "Qwen3NextForCausalLM",
        "Qwen3VLForConditionalGeneration",
        "Qwen3VLMoeForConditionalGeneration",
        "Qwen3_5ForCausalLM",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForCausalLM",
        "Qwen3_5MoeForConditionalGeneration",
        "SeedOssForCausalLM",
    }
)
# Read by rules of their own, each with its own note or check: DeepSeek V4 (modelspec/deepseek_v4.py,
# checked against a real start-up), and the drafters, which vLLM builds only with their target
# (their layers as built: modelspec/drafters.py dflash_as_built, asked of vLLM by bench/vllm_oracle.py;
# Laguna's DFlash drafter's full-KV layers read from laguna_dflash.py, as a real start-up's KV need shows)
OWN_RULES = frozenset(
    {"DeepseekV4ForCausalLM", "DFlashDraftModel", "DFlashLagunaForCausalLM", "LlamaForCausalLMEagle3"}
)


def unchecked_note(architecture: str) -> str | None:
    if not architecture or architecture in LAYERS_CHECKED or architecture in OWN_RULES:
        return None
    return (
        f"{architecture}: this architecture's layers are not checked against vLLM's model code; the KV cache is "
        "read from the config's common fields (KV heads and head size, layer_types / sliding_window, MLA's "
        "kv_lora_rank, Gated-DeltaNet and Mamba2 state fields): right when the model lays out its layers as the "
        "checked architectures do; one with a layout of its own (other heads or head sizes on some layers, "
        "layers without attention) gets wrong KV figures and weights"
    )
