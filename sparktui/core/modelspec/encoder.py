"""A multimodal model's encoder as vLLM's profile pass sees it: the modality it profiles (the one with
the most tokens per item), the tokens one item of it yields, and the patches the vision tower runs
for that item. Read from config.json as each model's processing info in vLLM 0.32 computes it:

- Qwen3-VL / Qwen3.5 / Qwen3.6 (`qwen3_vl.py` Qwen3VLProcessingInfo.get_image_size_with_most_features):
  the image processor's largest image, 16,777,216 pixels (preprocessor_config.json size.longest_edge,
  the same in every Qwen3-VL-family checkpoint read), in patch_size² patches merged
  spatial_merge_size² to a token: 16,384 tokens from 65,536 patches at patch 16, merge 2.
- Gemma 3 (`gemma3_mm.py`): mm_tokens_per_image tokens (256) from (image_size / patch_size)² patches.
- Gemma 4 (`gemma4_mm.py` get_mm_max_tokens_per_item): a video of 32 frames × (70 soft tokens + 2 + 6
  timestamp tokens) = 2,496 tokens beats an image's default_output_length (280); each frame runs
  70 × pooling_kernel_size² patches.
- LLaVA-1.5 (`llava.py`): (image_size / patch_size)² tokens, one more patch for the class token.
Other multimodal models: None (their encoder profile is not modelled)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparktui.core.record import record

QWEN_VL_MAX_PIXELS = 16_777_216  # Qwen3-VL image processor size.longest_edge (pixels)
GEMMA4_VIDEO_FRAMES = 32  # gemma4_mm.py _VIDEO_MAX_FRAMES
GEMMA4_VIDEO_SOFT_TOKENS = 70  # _VIDEO_MAX_SOFT_TOKENS per frame; + boi + eoi + ~6 timestamp tokens
GEMMA4_FRAME_EXTRA_TOKENS = 8


@record
class Encoder:
    """A multimodal model's encoder, as vLLM profiles it: its modality, tokens per item and widths."""

    family: str  # qwen_vl | gemma3 | gemma4 | llava
    modality: str  # what vLLM profiles the encoder with
    tokens_per_item: int  # tokens one item of it puts in the prompt (and in the encoder cache)
    patches_per_item: int  # patches the vision tower runs for one item
    hidden: int  # the vision tower's width
    intermediate: int  # its MLP's width
    out_hidden: int  # width of one output token (the language model's hidden size)
    batched: bool = True  # one forward over every item's patches (Gemma 4 chunks frames by free memory)
    # the next modality vLLM would profile when --limit-mm-per-prompt sets this one to 0:
    # (modality, tokens per item, patches per item)
    fallback: tuple[str, int, int] | None = None
    pixels_per_item: int = 0  # values of one item's pixel_values (channels × height × width), fp32 (Gemma 3)


def _int(mapping: Mapping[str, Any], *keys: str) -> int:
    for key in keys:
        value = mapping.get(key)
        if isinstance(value, (int, float)) and value:
            return int(value)
    return 0


def encoder_of(config: Mapping[str, Any], text: Mapping[str, Any]) -> Encoder | None:
    """The encoder vLLM profiles for this model, or None when the model has none we model."""
    vision = config.get("vision_config")
    if not isinstance(vision, Mapping):
        return None
    model_type = str(config.get("model_type") or "")
    vision_type = str(vision.get("model_type") or "")
    lm_hidden = _int(text, "hidden_size")
    hidden = _int(vision, "hidden_size")
    inter = _int(vision, "intermediate_size") or 4 * hidden
    patch = _int(vision, "patch_size")
    if not (hidden and patch and lm_hidden):
        return None
    if model_type.startswith(("qwen3_vl", "qwen3_5")) or vision_type.startswith(("qwen3_vl", "qwen3_5")):
        merge = _int(vision, "spatial_merge_size") or 2
        patches = QWEN_VL_MAX_PIXELS // (patch * patch)
        return Encoder("qwen_vl", "image", patches // (merge * merge), patches, hidden, inter, lm_hidden)
    if model_type == "gemma3":
        size = _int(vision, "image_size")
        tokens = _int(config, "mm_tokens_per_image") or 256
        if not size:
            return None
        return Encoder(
            "gemma3", "image", tokens, (size // patch) ** 2, hidden, inter, lm_hidden, pixels_per_item=3 * size**2
        )
    if model_type == "gemma4" or vision_type == "gemma4_vision":
        pool = _int(vision, "pooling_kernel_size") or 3
        frame = GEMMA4_VIDEO_SOFT_TOKENS + GEMMA4_FRAME_EXTRA_TOKENS
        video = GEMMA4_VIDEO_FRAMES * frame
        image = _int(vision, "default_output_length") or 280
        if image >= video:
            return Encoder("gemma4", "image", image, image * pool * pool, hidden, inter, lm_hidden, batched=False)
        patches = GEMMA4_VIDEO_FRAMES * GEMMA4_VIDEO_SOFT_TOKENS * pool * pool
        return Encoder(
            "gemma4", "video", video, patches, hidden, inter, lm_hidden, False, ("image", image, image * pool * pool)
        )
    if model_type in ("llava",):
        size = _int(vision, "image_size")
        if not size:
            return None
        tokens = (size // patch) ** 2
        return Encoder("llava", "image", tokens, tokens + 1, hidden, inter, lm_hidden)
    return None
