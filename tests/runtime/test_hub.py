"""Models not downloaded: only config files and safetensors headers are fetched (range requests)
from a Hub on loopback, cached, and HF_HUB_OFFLINE / --offline respected."""

from __future__ import annotations

import json
import os
import re
import struct

import pytest

from sparktui.core.modelspec import load_model_spec
from sparktui.errors import UserError
from sparktui.runtime.hub import HubFetcher
from tests.support import FIXTURES
from tests.support.fake_hub import serve_fake_hub

CONFIG = (FIXTURES / "model-configs" / "Qwen__Qwen3-32B.json").read_bytes()


def safetensors(tensors: dict[str, int], payload: int = 4096) -> bytes:
    """A safetensors file whose tensors have the given byte sizes (payload zeros after it)."""
    header, offset = {}, 0
    for name, size in tensors.items():
        header[name] = {"dtype": "BF16", "shape": [size // 2], "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + b"\0" * payload


def online_env(hub_url: str, tmp_path) -> dict[str, str]:
    return {"HF_ENDPOINT": hub_url, "HOME": str(tmp_path), "SPARKTUI_CACHE_DIR": str(tmp_path / "cache")}


def test_fetches_configs_and_headers_only_then_works_from_the_cache(tmp_path):
    shard1 = safetensors({"model.layers.0.mlp.up_proj.weight": 3_000_000}, payload=1 << 20)
    shard2 = safetensors({"lm_head.weight": 1_000_000, "mtp.layers.0.w": 500_000})
    index = {
        "metadata": {"total_size": 4_500_000},
        "weight_map": {"a": "model-1.safetensors", "b": "model-2.safetensors"},
    }
    with serve_fake_hub() as hub:
        hub.add("acme/qwen-32b", "config.json", CONFIG)
        hub.add("acme/qwen-32b", "model.safetensors.index.json", json.dumps(index).encode())
        hub.add("acme/qwen-32b", "model-1.safetensors", shard1)
        hub.add("acme/qwen-32b", "model-2.safetensors", shard2)
        env = online_env(hub.url, tmp_path)
        spec = load_model_spec("acme/qwen-32b", env=env, fetcher=HubFetcher(env))
        asked = list(hub.requests)
    assert "Hugging Face Hub" in spec.source
    rope_cache = 40960 * 128 * 2
    assert spec.weights_bytes - rope_cache == 4_000_000  # exact, MTP tensors apart
    assert spec.mtp_weights_bytes == 500_000
    assert "fetched from the Hub" in spec.weights_source
    # the weights themselves were never read: every shard request is a small range
    shard_requests = [r for r in asked if r[1].endswith(".safetensors")]
    assert shard_requests and all(r[2] and r[2].startswith("bytes=") for r in shard_requests)
    assert all(int(r[2].split("-")[1]) < 4096 for r in shard_requests)
    # the server is gone: a new fetcher (even offline) answers from sparktui's cache
    again = load_model_spec(
        "acme/qwen-32b", env={**env, "HF_HUB_OFFLINE": "1"}, fetcher=HubFetcher({**env, "HF_HUB_OFFLINE": "1"})
    )
    assert again.weights_bytes == spec.weights_bytes


def test_offline_asks_nothing_and_says_what_it_tried(tmp_path):
    with serve_fake_hub() as hub:
        hub.add("acme/tiny", "config.json", CONFIG)
        env = {**online_env(hub.url, tmp_path), "HF_HUB_OFFLINE": "1"}
        with pytest.raises(UserError) as info:
            load_model_spec("acme/tiny", env=env, fetcher=HubFetcher(env))
        assert hub.requests == []
    msg = str(info.value)
    assert "offline" in msg and "Hugging Face cache" in msg and "catalog" in msg
    env_flag = online_env("http://127.0.0.1:9", tmp_path)
    with pytest.raises(UserError, match="offline"):
        load_model_spec("acme/other", env=env_flag, fetcher=HubFetcher(env_flag, offline=True))


def test_a_repo_the_hub_does_not_have(tmp_path):
    with serve_fake_hub() as hub:
        env = online_env(hub.url, tmp_path)
        with pytest.raises(UserError) as info:
            load_model_spec("acme/no-such-model", env=env, fetcher=HubFetcher(env))
    msg = str(info.value)
    assert "'acme/no-such-model'" in msg and hub.url in msg and "no such repository" in msg


def test_a_gated_repo_says_how_to_get_access(tmp_path):
    with serve_fake_hub() as hub:
        hub.gated.add("acme/gated")
        env = online_env(hub.url, tmp_path)
        with pytest.raises(UserError, match=r"gated or private.*HF_TOKEN"):
            load_model_spec("acme/gated", env=env, fetcher=HubFetcher(env))


def test_no_network_is_a_clear_error(tmp_path):
    from tests.support import free_port

    env = online_env(f"http://127.0.0.1:{free_port()}", tmp_path)
    with pytest.raises(UserError, match=r"could not reach the Hugging Face Hub.*--offline"):
        load_model_spec("acme/unreachable", env=env, fetcher=HubFetcher(env))


def test_a_single_file_mistral_repo(tmp_path):
    params = MISTRAL_PARAMS
    with serve_fake_hub() as hub:
        hub.add("acme/mini-mistral", "params.json", json.dumps(params).encode())
        hub.add("acme/mini-mistral", "consolidated.safetensors", safetensors({"w": 2_000_000}))
        env = online_env(hub.url, tmp_path)
        spec = load_model_spec("acme/mini-mistral", env=env, fetcher=HubFetcher(env))
    assert spec.num_layers == 4
    assert spec.weights_bytes - 128_000 * 64 * 2 == 2_000_000


def test_a_missing_repo_is_asked_for_once(tmp_path):
    with serve_fake_hub() as hub:
        env = online_env(hub.url, tmp_path)
        fetcher = HubFetcher(env)
        assert fetcher("acme/typed-so-far") is None
        asked = len(hub.requests)
        assert HubFetcher(env)("acme/typed-so-far") is None
        assert len(hub.requests) == asked


@pytest.mark.parametrize("where", ["file", "folder"])
def test_a_headers_cache_others_may_write_is_fetched_again_or_not_believed(tmp_path, capsys, where):
    # The cached headers are figures a fit trusts: ones another user may write (or write beside)
    # may be planted. Online they are fetched again; offline they are not used (the index is)
    from sparktui.runtime.hub import HEADERS_FILE

    shard = safetensors({"model.layers.0.mlp.up_proj.weight": 3_000_000})
    index = {"metadata": {"total_size": 3_500_000}, "weight_map": {"a": "model-1.safetensors"}}
    with serve_fake_hub() as hub:
        hub.add("acme/qwen-32b", "config.json", CONFIG)
        hub.add("acme/qwen-32b", "model.safetensors.index.json", json.dumps(index).encode())
        hub.add("acme/qwen-32b", "model-1.safetensors", shard)
        env = online_env(hub.url, tmp_path)
        true = load_model_spec("acme/qwen-32b", env=env, fetcher=HubFetcher(env)).weights_bytes
        cached = tmp_path / "cache" / "hub" / "acme--qwen-32b" / HEADERS_FILE
        assert cached.stat().st_mode & 0o777 == 0o600 and cached.parent.stat().st_mode & 0o777 == 0o700
        planted = json.loads(cached.read_text())
        planted["model-1.safetensors"]["model.layers.0.mlp.up_proj.weight"]["data_offsets"] = [0, 6]
        cached.write_text(json.dumps(planted))
        (cached if where == "file" else cached.parent).chmod(0o666 if where == "file" else 0o777)
        offline = {**env, "HF_HUB_OFFLINE": "1"}
        if where == "file":
            spec = load_model_spec("acme/qwen-32b", env=offline, fetcher=HubFetcher(offline))
            # the index's total (500,000 over the header's), not the planted 6 bytes
            assert spec.weights_bytes == true + 500_000 and "index" in spec.weights_source, spec.weights_source
            err = capsys.readouterr().err
            assert err.count("warning") == 1 and "writable by other users" in err and str(cached.parent) in err, err
            assert "not used" in err, err
        else:  # a folder others may write in: none of its files, config.json included, is believed
            with pytest.raises(UserError, match=r"writable by other users.*chmod 700.*not used") as info:
                load_model_spec("acme/qwen-32b", env=offline, fetcher=HubFetcher(offline))
            assert str(cached.parent) in str(info.value)
        again = load_model_spec("acme/qwen-32b", env=env, fetcher=HubFetcher(env))
        assert again.weights_bytes == true and "fetched from the Hub" in again.weights_source
        err = capsys.readouterr().err
        assert err.count("warning") == 1 and "fetched again from the Hub" in err, err
    assert cached.stat().st_mode & 0o777 == 0o600 and cached.parent.stat().st_mode & 0o777 == 0o700


# Each file the Hub fetch caches, how a planted copy changes the fit, and the figure it changes
PLANTS = {
    "config.json": (lambda data: {**data, "num_hidden_layers": 2}, "num_layers"),
    "params.json": (lambda data: {**data, "n_layers": 2}, "num_layers"),
    "hf_quant_config.json": (lambda data: {"quantization": {"quant_algo": "NVFP4", "group_size": 16}}, "quantization"),
    "model.safetensors.index.json": (lambda data: {**data, "metadata": {"total_size": 6}}, "weights_bytes"),
}
MISTRAL_PARAMS = {
    "dim": 1024,
    "n_layers": 4,
    "head_dim": 64,
    "hidden_dim": 4096,
    "n_heads": 16,
    "n_kv_heads": 4,
    "vocab_size": 32000,
}


@pytest.mark.parametrize(
    ("name", "on_hub"),
    [(name, True) for name in PLANTS] + [("hf_quant_config.json", False), ("model.safetensors.index.json", False)],
    ids=lambda v: {True: "on-the-hub", False: "put-there"}.get(v, v) if isinstance(v, bool) else v,
)
def test_a_cached_file_others_may_write_is_fetched_again_or_not_used(tmp_path, capsys, name, on_hub):
    # A planted config (layers, heads, quantization, weights) makes a fit say "fits" for a server
    # that will not start: a cached file another user may write is fetched again online (one the
    # Hub does not serve is removed), and offline not used, with one warning naming it
    repo = "acme/mini-mistral" if name == "params.json" else "acme/qwen-32b"
    index = {"metadata": {"total_size": 3_500_000}, "weight_map": {"a": "model-1.safetensors"}}
    served = {"params.json": json.dumps(MISTRAL_PARAMS).encode()} if name == "params.json" else {"config.json": CONFIG}
    if name == "model.safetensors.index.json":  # no shard headers on the Hub: the index gives the weights
        served[name] = json.dumps(index).encode()
    if name == "hf_quant_config.json" and on_hub:
        served[name] = json.dumps({"quantization": {"quant_algo": "FP8"}}).encode()
    if name == "model.safetensors.index.json" and not on_hub:
        del served[name]
    with serve_fake_hub() as hub:
        for filename, data in served.items():
            hub.add(repo, filename, data)
        env = online_env(hub.url, tmp_path)
        true = load_model_spec(repo, env=env, fetcher=HubFetcher(env))
        cached = tmp_path / "cache" / "hub" / repo.replace("/", "--") / name
        before = json.loads(served.get(name, b"{}"))
        plant, figure = PLANTS[name]
        cached.write_text(json.dumps(plant(before)))
        cached.chmod(0o666)
        local = tmp_path / "local"  # the same files in a folder given as --model: the user's own, read as they are
        local.mkdir()
        for f in cached.parent.iterdir():
            (local / f.name).write_bytes(f.read_bytes())
            (local / f.name).chmod(0o666)
        planted = load_model_spec(str(local))
        assert getattr(planted, figure) != getattr(true, figure) and not capsys.readouterr().err

        offline = {**env, "HF_HUB_OFFLINE": "1"}
        if name in ("config.json", "params.json"):  # no config, no fit: the error is the one message
            with pytest.raises(UserError, match=re.escape(name) + r": writable by other users.*remove it.*not used"):
                load_model_spec(repo, env=offline, fetcher=HubFetcher(offline))
        else:
            spec = load_model_spec(repo, env=offline, fetcher=HubFetcher(offline))
            assert getattr(spec, figure) != getattr(planted, figure)
            err = capsys.readouterr().err
            assert err.count("warning") == 1 and f"{cached}: writable by other users" in err, err
            assert "remove it if it is not yours" in err and "not used" in err, err

        again = load_model_spec(repo, env=env, fetcher=HubFetcher(env))
        assert again == true
        err = capsys.readouterr().err
        assert err.count("warning") == 1 and str(cached) in err and "fetched again from the Hub" in err, err
    if name in served:
        assert cached.stat().st_mode & 0o777 == 0o600 and json.loads(cached.read_bytes()) == before
    else:
        assert not cached.exists()


@pytest.mark.skipif(os.getuid() != 0, reason="giving a folder to another user needs root")
def test_a_cache_folder_another_user_owns_is_not_used_and_the_fix_names_the_cache_setting(tmp_path):
    # not ours to rewrite, online or not: nothing in it is used, and the fix moves sparktui's cache
    with serve_fake_hub() as hub:
        hub.add("acme/qwen-32b", "config.json", CONFIG)
        env = online_env(hub.url, tmp_path)
        load_model_spec("acme/qwen-32b", env=env, fetcher=HubFetcher(env))
        folder = tmp_path / "cache" / "hub" / "acme--qwen-32b"
        os.chown(folder, 4242, 4242)
        asked = len(hub.requests)
        with pytest.raises(UserError, match=r"owned by user id 4242.*point SPARKTUI_CACHE_DIR at a folder of your own"):
            load_model_spec("acme/qwen-32b", env=env, fetcher=HubFetcher(env))
        assert len(hub.requests) == asked  # not fetched into a folder that is not ours
