"""runtime.download.vllm_files: the files of a repo vLLM 0.32 loads (DefaultModelLoader._prepare_weights,
weight_utils.download_weights_from_hf), so a download leaves out what it never reads."""

from __future__ import annotations

from sparktui.runtime.download import vllm_files

SMALL = ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"]


def test_the_index_names_the_shards_and_original_is_left_out() -> None:
    paths = [*SMALL, "model.safetensors.index.json", "model-00001-of-00002.safetensors",
             "model-00002-of-00002.safetensors", "original/consolidated.00.pth", "original/params.json",
             "original/tokenizer.model"]  # fmt: skip
    shards = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}
    assert vllm_files(paths, shards) == {*SMALL, "model.safetensors.index.json", *shards}


def test_mistral_consolidated_wins_over_hf_shards() -> None:
    paths = [
        "params.json",
        "tekken.json",
        "consolidated.safetensors",
        "model-00001-of-00001.safetensors",
        "config.json",
    ]
    assert vllm_files(paths, {"model-00001-of-00001.safetensors"}) == {
        "params.json",
        "tekken.json",
        "consolidated.safetensors",
        "config.json",
    }


def test_the_first_format_present_without_an_index() -> None:
    assert vllm_files(["config.json", "pytorch_model.bin", "model.safetensors"], None) == {
        "config.json",
        "model.safetensors",
    }
    assert vllm_files(["config.json", "pytorch_model.bin", "extra.pt"], None) == {"config.json", "pytorch_model.bin"}
    assert vllm_files(["config.json", "model.gguf"], None) == {"config.json"}  # vLLM's default loader takes no GGUF
