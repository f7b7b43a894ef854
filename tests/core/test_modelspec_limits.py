"""Absurd configs are refused at once, naming the field: never MemoryError, OverflowError,
OSError or minutes of arithmetic."""

from __future__ import annotations

import json
import time

import pytest

from sparktui.core.modelspec import load_model_spec, spec_from_config, spec_from_folder
from sparktui.errors import UserError

LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "num_hidden_layers": 32,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"num_hidden_layers": 10**12}, "num_hidden_layers"),
        ({"num_hidden_layers": -3}, "num_hidden_layers"),
        ({"hidden_size": -4096}, "hidden_size"),
        ({"hidden_size": float("inf")}, "hidden_size"),
        ({"num_key_value_heads": 2.5}, "num_key_value_heads"),
        ({"vocab_size": 10**30}, "vocab_size"),
        ({"max_position_embeddings": 10**15}, "max_position_embeddings"),
        ({"num_hidden_layers": "abc"}, "num_hidden_layers"),
        ({"num_hidden_layers": [32]}, "num_hidden_layers"),
        ({"head_dim": True}, "head_dim"),
        ({"layer_types": "full_attention"}, "layer_types"),
        ({"text_config": {"num_hidden_layers": 10**9}}, "text_config.num_hidden_layers"),
    ],
)
def test_absurd_numbers_are_refused_at_once_naming_the_field(change, field):
    start = time.monotonic()
    with pytest.raises(UserError) as info:
        spec_from_config({**LLAMA, **change}, name="x", source="folder /m")
    assert time.monotonic() - start < 1.0
    msg = str(info.value)
    assert msg.startswith("folder /m: ") and field in msg and "expected" in msg


def test_a_non_numeric_or_negative_total_size_in_the_index(tmp_path):
    for bad in ("lots", -5, 1.5, 10**20):
        (tmp_path / "config.json").write_text(json.dumps(LLAMA))
        (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": bad}}))
        with pytest.raises(UserError, match=r"metadata\.total_size .*expected the checkpoint's size in bytes"):
            spec_from_folder(tmp_path)


def test_a_damaged_safetensors_header(tmp_path):
    import struct

    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    header = json.dumps({"w": {"dtype": "BF16", "shape": [2], "data_offsets": [10, 2]}}).encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    with pytest.raises(UserError, match="data_offsets"):
        spec_from_folder(tmp_path)


def test_a_300_character_model_name():
    with pytest.raises(UserError, match=r"not usable as a folder path|characters"):
        load_model_spec("a" * 300)
    with pytest.raises(UserError, match="at most 96 characters"):
        load_model_spec("acme/" + "b" * 300)
    with pytest.raises(UserError, match="characters long"):
        load_model_spec("x" * 5000)


def test_a_config_that_is_not_an_object_or_not_json(tmp_path):
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(UserError, match="expected a JSON object"):
        spec_from_folder(tmp_path)
    (tmp_path / "config.json").write_bytes(b"\xff\xfe")
    with pytest.raises(UserError, match="not valid JSON"):
        spec_from_folder(tmp_path)
