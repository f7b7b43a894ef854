"""The multimodal encoder's part of vLLM's profile pass (v1/worker/gpu_model_runner.py profile_run):
before the language model's dummy forward, vLLM encodes `items` dummy items of the modality with the
most tokens per item and keeps their outputs in the encoder cache until that forward is done; its log
says "Encoder cache will be initialized with a budget of B tokens, and profiled with N <modality> items".

- The budget (v1/core/encoder_cache_manager.py compute_mm_encoder_budget): the larger of
  max_num_batched_tokens (SchedulerConfig's max_num_encoder_input_tokens and encoder_cache_size) and
  one item's tokens.
- The items (multimodal/encoder_budget.py MultiModalBudget._get_max_items): budget // tokens per item,
  at most max_num_seqs × max(1, min(limit per prompt, max_model_len // tokens per item)), at least 1.
- Memory: the outputs stay through the dummy forward (items × tokens × the language model's hidden
  size in the model dtype), and the encoder's own forward peaks at one vision block's working set over
  every item's patches (the residual, its norm, and the MLP's two intermediates: Qwen3_VisionBlock;
  SigLIP, Gemma 3's tower, also holds the encoder's input embeddings and the layer's input) beside the
  dummy batch's pixel values, fp32 as the image processor makes them (Gemma 3: siglip.py
  SiglipVisionEmbeddings casts a copy for the patch embedding, freed after it). That block estimate is
  read from the code, not measured on a GPU.
"""

from __future__ import annotations

from sparktui.core.modelspec.encoder import Encoder
from sparktui.core.record import record

DEFAULT_LIMIT = 999  # vllm/config/multimodal.py: a modality's default count per prompt
# Hidden-size tensors live at a SigLIP encoder layer's MLP peak (models/siglip.py, 0.13 to 0.32):
# SiglipEncoder.forward keeps its input embeddings (inputs_embeds, hidden_states_pool) and the layer's
# input (its loop variable) through every layer, and the layer holds its residual and normed input
# beside fc1's output and the activation's
SIGLIP_HELD_HIDDEN = 4


@record
class EncoderPass:
    modality: str
    tokens_per_item: int
    budget: int
    items: int
    outputs: int  # bytes the encoder cache holds through the language model's dummy forward
    forward: int  # bytes of the encoder's own forward at its peak (0 when not modelled)

    def describe(self) -> str:
        how = (
            f"encoder forward {self.forward / 2**30:.2f} GiB"
            if self.forward
            else "encoder forward not modelled (vLLM chunks it by free memory)"
        )
        return (
            f"encoder profile: {self.items} {self.modality} item{'s' if self.items != 1 else ''} of "
            f"{self.tokens_per_item:,} tokens (budget {self.budget:,}); outputs kept {self.outputs / 2**30:.2f} GiB, "
            f"{how}"
        )


def encoder_pass(
    encoder: Encoder,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    max_model_len: int,
    dtype_bytes: int,
    limit: int | None = None,
    tp: int = 1,
) -> EncoderPass | None:
    """What vLLM's profile run encodes; None when the modality is limited to 0 items."""
    per_prompt_limit = DEFAULT_LIMIT if limit is None else limit
    if per_prompt_limit <= 0:
        return None
    tokens = encoder.tokens_per_item
    budget = max(max_num_batched_tokens, tokens)
    per_prompt = max(1, min(per_prompt_limit, max_model_len // tokens))
    items = max(1, min(budget // tokens, max_num_seqs * per_prompt))
    outputs = items * tokens * encoder.out_hidden * dtype_bytes
    forward = 0
    if encoder.batched:
        patches = items * encoder.patches_per_item
        held = SIGLIP_HELD_HIDDEN if encoder.family == "gemma3" else 2
        forward = patches * (held * encoder.hidden + 2 * encoder.intermediate // tp) * dtype_bytes
        forward += items * encoder.pixels_per_item * 4  # the dummy batch's pixel_values, fp32
    return EncoderPass(encoder.modality, tokens, budget, items, outputs, forward)
