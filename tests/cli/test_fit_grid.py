"""`sparktui fit --grid`: the tuning guide's users × context grid, each cell a direct fit."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sparktui.cli import main

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "model-configs"
# the shape of a ModelOpt NVFP4 checkpoint of Llama 3.3 70B (nvidia/Llama-3.3-70B-Instruct-FP4):
# 4-bit weights with fp8 scales per 16, the KV cache left to --kv-cache-dtype
NVFP4_QUANT = {
    "producer": {"name": "modelopt", "version": "0.23.0"},
    "quantization": {
        "quant_algo": "NVFP4",
        "kv_cache_quant_algo": None,
        "group_size": 16,
        "exclude_modules": ["lm_head"],
    },
}


@pytest.fixture
def llama70_nvfp4(tmp_path: Path) -> str:
    folder = tmp_path / "Llama-3.3-70B-Instruct-NVFP4"
    folder.mkdir()
    shutil.copy(FIXTURES / "meta-llama__Llama-3.3-70B-Instruct.json", folder / "config.json")
    (folder / "hf_quant_config.json").write_text(json.dumps(NVFP4_QUANT))
    return str(folder)


def fit_json(capsys, *argv: str) -> dict:
    code = main(["fit", "--json", *argv])
    out, err = capsys.readouterr()
    assert err == "" and code in (0, 1), err
    return json.loads(out)


def test_the_guides_four_cells_for_fp16_and_fp8_each_agree_with_a_direct_fit(capsys, llama70_nvfp4):
    base = ("--model", llama70_nvfp4, "--gpu-memory-utilization", "0.85")
    grid = fit_json(capsys, *base, "--grid")["grid"]
    assert {c["kv_cache_dtype"] for c in grid} == {"auto", "fp8"}
    assert {c["kv_cache_dtype_name"] for c in grid} == {"bfloat16", "fp8"}
    cells = {(c["max_num_seqs"], c["max_model_len"], c["kv_cache_dtype"]): c for c in grid}
    for seqs in (5, 10):
        for length in (4096, 8192):
            for dtype in ("auto", "fp8"):
                cell = cells[(seqs, length, dtype)]
                direct = fit_json(
                    capsys,
                    *base,
                    "--max-num-seqs",
                    str(seqs),
                    "--max-model-len",
                    str(length),
                    "--kv-cache-dtype",
                    dtype,
                )
                assert cell["verdict"] == direct["verdict"], (seqs, length, dtype)
                assert cell["kv_bytes_needed"] == seqs * direct["kv_bytes_per_request"]
    # 320 KiB per token at 16 bits (80 layers × 8 KV heads × 128 × 2 B × K,V): 5 × 4k is 6.25 GiB
    assert cells[(5, 4096, "auto")]["kv_bytes_needed"] == 5 * 4096 * 327_680
    assert cells[(5, 4096, "fp8")]["kv_bytes_needed"] == 5 * 4096 * 163_840


def test_every_cell_agrees_with_a_direct_fit_where_the_verdicts_change(capsys, llama70_nvfp4):
    """Across the grid, a cell where users × context outgrow the KV cache is tight, as a direct fit says."""
    base = (
        "--model",
        llama70_nvfp4,
        "--gpu-memory-utilization",
        "0.85",
        "--max-num-seqs",
        "10",
        "--max-model-len",
        "8192",
    )
    grid = fit_json(capsys, *base, "--grid")["grid"]
    verdicts = {c["verdict"] for c in grid}
    assert {"fits", "tight"} <= verdicts
    assert [c for c in grid if c["current"]] == [
        c for c in grid if (c["max_num_seqs"], c["max_model_len"], c["kv_cache_dtype"]) == (10, 8192, "auto")
    ]
    lens = sorted({c["max_model_len"] for c in grid})
    assert lens == [4096, 8192, 16384, 32768, 65536, 131072]  # Llama 3.3's limit is 131,072
    assert sorted({c["max_num_seqs"] for c in grid}) == [1, 2, 5, 10, 20, 50]
    for c in grid[:: max(1, len(grid) // 12)]:
        direct = fit_json(
            capsys,
            "--model", llama70_nvfp4, "--gpu-memory-utilization", "0.85",
            "--max-num-seqs", str(c["max_num_seqs"]), "--max-model-len", str(c["max_model_len"]),
            "--kv-cache-dtype", c["kv_cache_dtype"],
        )  # fmt: skip
        assert c["verdict"] == direct["verdict"], c


def test_a_cell_whose_users_outgrow_the_kv_cache_is_tight_with_the_reason(capsys, llama70_nvfp4):
    direct = fit_json(
        capsys, "--model", llama70_nvfp4, "--gpu-memory-utilization", "0.85",
        "--max-num-seqs", "50", "--max-model-len", "32768",
    )  # fmt: skip
    assert direct["verdict"] == "tight"
    assert any("fewer than --max-num-seqs 50" in r for r in direct["reasons"])


def test_the_grid_as_text_marks_the_current_cell_and_follows_the_models_limit(capsys):
    code = main(["fit", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "12000", "--grid"])
    out = capsys.readouterr().out
    assert code == 0
    grid = out[out.index("trade-off grid") :]
    assert "KV cache auto (bfloat16)" in grid and "KV cache fp8" in grid
    header = next(line for line in grid.splitlines() if line.strip().startswith("users"))
    assert header.split()[1:] == ["4k", "8k", "12,000", "16k", "32k", "64k", "128k"]
    assert sum(line.count("*") for line in grid.splitlines() if not line.strip().startswith("users =")) == 1


def test_an_fp8_kv_checkpoint_gets_one_set_of_cells(capsys):
    grid = fit_json(capsys, "--model", "nvidia/Llama-3.1-70B-Instruct-FP8", "--max-num-seqs", "5", "--grid")["grid"]
    assert {c["kv_cache_dtype_name"] for c in grid} == {"fp8"}


def test_the_grid_estimates_no_speed_beside_the_fits_own(capsys, speed_estimates):
    # each of the grid's fits estimated a decode speed the grid does not show: 84 more for this one
    flags = ("--model", "meta-llama/Llama-3.1-8B-Instruct", "--machine", "dgx-spark")
    alone = fit_json(capsys, *flags)
    assert alone["predicted_decode_tok_s"] and len(speed_estimates) == 1
    speed_estimates.clear()
    with_grid = fit_json(capsys, *flags, "--grid")
    assert len(with_grid["grid"]) > 1 and with_grid["predicted_decode_tok_s"] == alone["predicted_decode_tok_s"]
    assert len(speed_estimates) == 1, len(speed_estimates)
