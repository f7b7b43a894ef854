"""Recipes in, recipes out: real eugr/spark-vllm-docker and sparkrun recipes and vLLM `--config`
files (tests/fixtures/recipes, see SOURCES.md) read by `sparktui fit`, `serve`'s loader and the
panel's profile list; profiles written back in each format and read again."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from sparktui.cli import main
from sparktui.core.cluster import ClusterSettings
from sparktui.core.config import ServeConfig, parse_serve_command
from sparktui.core.profiles import (
    Profile,
    RunnerSettings,
    list_profiles,
    load_profile,
    profile_from_recipe,
    save_profile,
)
from sparktui.core.recipes import FORMATS, ExportInput, export_recipe
from sparktui.errors import UserError
from tests.support import FIXTURES

RECIPES = FIXTURES / "recipes"

# recipe file → (model it serves, format, flags the fit does not model that must be listed)
REAL = {
    "eugr__nemotron-3-nano-nvfp4.yaml": (
        "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4",
        "eugr",
        ["--moe-backend", "--reasoning-parser-plugin", "--load-format", "mods (eugr setting)"],
    ),
    "eugr__openai-gpt-oss-120b.yaml": (
        "openai/gpt-oss-120b",
        "eugr",
        ["--mxfp4-backend", "build_args (eugr setting)"],
    ),
    "eugr__qwen3.6-35b-a3b-nvfp4.yaml": (
        "nvidia/Qwen3.6-35B-A3B-NVFP4",
        "eugr",
        ["--moe-backend", "--distributed-executor-backend"],
    ),
    "eugr__openai-gpt-oss-20b.yaml": ("openai/gpt-oss-20b", "eugr", ["--mxfp4-backend", "--load-format"]),
    "sparkrun__nemotron3-nano-30b-nvfp4-vllm.yaml": (
        "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4",
        "sparkrun",
        ["--tool-call-parser", "--reasoning-parser"],
    ),
    "sparkrun__nemotron-super-120b-nvfp4.yaml": (
        "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4",
        "sparkrun",
        ["--moe-backend", "benchmark (sparkrun recipe key)", "defaults.async_scheduling"],
    ),
    "sparkrun__qwen-35b.yaml": (
        "nvidia/Qwen3.6-35B-A3B-NVFP4",
        "sparkrun",
        ["variants (sparkrun recipe key)", "patches (sparkrun recipe key)", "--load-format"],
    ),
}


@pytest.mark.parametrize("name", sorted(REAL))
@pytest.mark.slow  # starts a process
def test_a_real_recipe_is_fitted_with_its_model_and_flags_shown(name, capsys, isolated):
    model, fmt, not_modelled = REAL[name]
    code = main(["fit", str(RECIPES / name), "--offline"])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    assert "Traceback" not in err
    assert f"({fmt})" in out and f"model    {model}" in out
    assert f"sparktui fit — {model}" in out
    command = next(line for line in out.splitlines() if line.startswith("  command  vllm serve"))
    assert "--kv-cache-dtype fp8" in command or "gpt-oss-20b" not in name
    section = out[out.index("not modelled (kept") : out.index("sparktui fit —")]
    for item in not_modelled:
        assert item in section, item
    modelled_flags = ("--attention-backend", "--async-scheduling", "--compilation-config", "--language-model-only")
    for modelled in (*modelled_flags, "--mxfp4-layers"):
        assert modelled not in section, modelled  # rows of FLAGS the fit reads


@pytest.mark.parametrize("name", sorted(REAL))
@pytest.mark.slow  # starts a process
def test_a_real_recipe_in_json(name, capsys, isolated):
    model, fmt, _ = REAL[name]
    code = main(["fit", str(RECIPES / name), "--offline", "--json"])
    data = json.loads(capsys.readouterr()[0])
    assert code in (0, 1)
    assert data["model"] == model
    assert data["recipe"]["format"] == fmt and data["recipe"]["command"][:3] == ["vllm", "serve", model]


def test_the_recipes_templates_are_filled_as_their_tools_fill_them():
    # eugr: str.format, so {{…}} in the command is a literal brace of the JSON
    qwen = load_profile(RECIPES / "eugr__qwen3.6-35b-a3b-nvfp4.yaml")
    assert json.loads(qwen.serve.speculative_config or "") == {
        "method": "mtp",
        "num_speculative_tokens": 3,
        "moe_backend": "triton",
    }
    assert qwen.serve.max_model_len == 262144 and qwen.serve.max_num_seqs == 8
    assert qwen.runner == RunnerSettings(kind="container", image="vllm-node")
    assert qwen.env == {"VLLM_MARLIN_USE_ATOMIC_ADD": "1"}
    # sparkrun: {model} and defaults; a default holding JSON braces is filled in as it is
    super_ = load_profile(RECIPES / "sparkrun__nemotron-super-120b-nvfp4.yaml")
    assert super_.serve.model == "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4"
    assert super_.serve.served_model_name == "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4 nemotron-3-super"
    assert super_.serve.mamba_ssm_cache_dtype == "float32"
    assert json.loads(super_.serve.speculative_config or "")["num_speculative_tokens"] == 1
    assert super_.runner.image == "vllm/vllm-openai:v0.20.0-aarch64-cu130-ubuntu2404"


def test_a_vllm_config_file_as_a_profile_and_after_vllm_serve(capsys, isolated):
    pesticide = RECIPES / "vllm-config__pesticide-vllm_config.yaml"
    code = main(["fit", str(pesticide), "--model", "Qwen/Qwen2.5-7B", "--offline"])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    assert "--quantization bitsandbytes" in out and "--enforce-eager" in out and "--enable-lora" in out
    assert "--uvicorn-log-level (vLLM flag)" in out
    # the file names a local folder: without --model that folder is what vLLM would load
    assert main(["fit", str(pesticide), "--offline"]) == 2
    assert "/data/lyl/models/qwen2.5-7B" in capsys.readouterr()[1]

    vllm_test = RECIPES / "vllm-config__vllm-tests-test_config.yaml"
    code = main(["fit", "--offline", "--", "vllm", "serve", "Qwen/Qwen3-32B", "--config", str(vllm_test)])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    assert f"config     {vllm_test}" in out and "--served-model-name mymodel" in out
    assert main(["fit", str(vllm_test), "--offline"]) == 2  # it names no model
    assert "leaves the model to the command line" in capsys.readouterr()[1]


def test_config_file_rules_are_vllms(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(
        "model: Qwen/Qwen3-32B\nmax_model_len: 8k\nport: 9001\nenable-prefix-caching: false\n"
        "served-model-name: [a, b]\ncompilation-config: {cudagraph_mode: PIECEWISE}\n"
    )
    serve = parse_serve_command(["Qwen/Qwen3-30B-A3B", "--config", str(config), "--port", "9002"])
    assert serve.model == "Qwen/Qwen3-30B-A3B"  # the positional model wins over the file's
    assert serve.port == 9002  # the command line wins over the file
    assert serve.max_model_len == 8000  # underscores read as dashes; 8k as vLLM reads it
    assert serve.enable_prefix_caching is False
    assert serve.served_model_name == "a b"
    assert serve.compilation_config == '{"cudagraph_mode": "PIECEWISE"}' and serve.extra_args == []
    assert parse_serve_command(["--config", str(config)]).model == "Qwen/Qwen3-32B"
    with pytest.raises(UserError, match="a space, not '='"):
        parse_serve_command(["Qwen/Qwen3-32B", f"--config={config}"])
    with pytest.raises(UserError, match="more than one config file"):
        parse_serve_command(["m", "--config", str(config), "--config", str(config)])
    (tmp_path / "c.json").write_text("{}")
    with pytest.raises(UserError, match=r"only \.yaml or \.yml"):
        parse_serve_command(["m", "--config", str(tmp_path / "c.json")])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("model: [unclosed\n", r"bad\.yaml:2:1: not valid YAML"),
        ("- a\n- b\n", "expected a YAML mapping"),
        ("", "is empty"),
        (
            'recipe_version: "1"\nname: x\ncontainer: c\ncommand: vllm serve m --port {port}\n',
            r"command: placeholder \{port\}",
        ),
        ("model: m\nruntime: sglang\ncommand: sglang serve\n", "runtime: 'sglang': sparktui runs vLLM only"),
        (
            'recipe_version: "1"\nname: x\ncontainer: c\ncommand: vllm serve m --max-model-len lots\n',
            "--max-model-len: got lots",
        ),
        ("model: m\nruntime: vllm\nmin_nodes: zero\ncommand: vllm serve m\n", "min_nodes: got 'zero'"),
    ],
)
def test_a_bad_recipe_exits_2_naming_the_file_and_field(text, expected, tmp_path, capsys, isolated):
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    assert main(["fit", str(bad), "--offline"]) == 2
    err = capsys.readouterr()[1]
    assert str(bad) in err and "Traceback" not in err
    assert re.search(expected, err), err


def test_a_recipe_for_several_sparks_maps_to_cluster_with_the_hosts(tmp_path, capsys, isolated):
    gemma = RECIPES / "eugr__gemma4-26b-a4b.yaml"
    alone = load_profile(gemma)
    assert alone.cluster is None and alone.recipe is not None and alone.recipe.nodes_needed == 2
    assert any("names no hosts" in w for w in alone.warnings)
    assert main(["profile", "import", str(gemma), "--nodes", "spark-a,spark-b", "--name", "gemma2"]) == 0
    saved = load_profile("gemma2")
    assert saved.cluster is not None and saved.cluster.nodes == ("spark-a", "spark-b")
    assert saved.cluster.backend == "ray" and saved.serve.tensor_parallel_size == 2
    assert saved.runner.image == "vllm-thor-tf5" and saved.path is not None and saved.path.suffix == ".toml"
    assert main(["profile", "import", str(gemma), "--nodes", "spark-a,spark-b", "--name", "gemma2"]) == 2
    assert "exists" in capsys.readouterr()[1]


def test_recipes_among_the_users_profiles_are_listed_and_never_overwritten_as_toml(isolated):
    user = isolated / "config" / "profiles"
    user.mkdir(parents=True)
    (user / "qwen.yaml").write_text((RECIPES / "sparkrun__qwen-35b.yaml").read_text())
    refs = {ref.name: ref for ref in list_profiles()}
    assert refs["qwen"].path == user / "qwen.yaml" and refs["qwen"].source == "user"
    profile = load_profile("qwen")
    assert profile.serve.model == "nvidia/Qwen3.6-35B-A3B-NVFP4"
    before = (user / "qwen.yaml").read_text()
    with pytest.raises(UserError, match="a recipe, not a sparktui profile"):
        save_profile(profile)
    assert (user / "qwen.yaml").read_text() == before


def _profiles() -> list[Profile]:
    shipped = [load_profile(ref.path) for ref in list_profiles() if ref.source == "shipped"]
    spec = '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":4}'
    rich = Profile(
        name="rich",
        path=None,
        serve=ServeConfig(
            model="Qwen/Qwen3-30B-A3B",
            served_model_name="qwen local",
            max_model_len=32768,
            max_num_seqs=4,
            gpu_memory_utilization=0.72,
            kv_cache_dtype="fp8",
            enable_prefix_caching=False,
            speculative_config=spec,
            port=8011,
            vllm_version="0.25.1",
            extra_args=[
                "--load-format",
                "fastsafetensors",
                "--async-scheduling",
                "--compilation-config",
                '{"a": {"b": 1}}',
            ],
        ),
        runner=RunnerSettings(kind="container", image="vllm/vllm-openai:v0.25.1"),
        env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1", "OMP_NUM_THREADS": "4"},
    )
    two = Profile(
        name="two",
        path=None,
        serve=ServeConfig(model="openai/gpt-oss-120b", tensor_parallel_size=2, enforce_eager=True),
        cluster=ClusterSettings(("spark-a", "spark-b"), "ray", None, None, 29501, 6379, None, None, ()),
    )
    return [*shipped, rich, two]


@pytest.mark.parametrize("fmt", FORMATS)
def test_export_then_import_gives_back_every_flag(fmt, tmp_path, isolated):
    for profile in _profiles():
        item = ExportInput(
            name=profile.name,
            description=profile.description,
            serve=profile.serve,
            env=profile.env,
            image=profile.runner.image if profile.runner.kind == "container" else None,
            cluster=profile.cluster,
        )
        path = tmp_path / f"{profile.name}.{fmt}.yaml"
        path.write_text(export_recipe(item, fmt))
        nodes = list(profile.cluster.nodes) if profile.cluster else None
        back = profile_from_recipe(path, nodes=nodes)
        want = profile.serve.model_dump(exclude={"api_key"})
        got = back.serve.model_dump(exclude={"api_key"})
        if profile.cluster is not None and "--distributed-executor-backend" not in profile.serve.extra_args:
            # a cluster's backend is stated in the other tools' commands; sparktui adds it itself
            got["extra_args"] = [a for a in got["extra_args"] if a not in ("--distributed-executor-backend", "ray")]
        assert got == want, (profile.name, fmt, path.read_text())
        if fmt != "vllm-config":  # a vLLM config file holds flags only
            assert back.env == profile.env, profile.name
            if profile.runner.kind == "container":
                assert back.runner.image == profile.runner.image
            assert (back.cluster is None) == (profile.cluster is None), profile.name
            if profile.cluster is not None and back.cluster is not None:
                assert (back.cluster.nodes, back.cluster.backend) == (profile.cluster.nodes, profile.cluster.backend)


@pytest.mark.slow  # starts a process
def test_profile_export_command(tmp_path, capsys, isolated):
    assert main(["profile", "export", "70b-dense-5-users", "--format", "vllm-config"]) == 0
    out = capsys.readouterr()[0]
    assert "model: nvidia/Llama-3.1-70B-Instruct-FP8" in out and "max-num-seqs: 5" in out
    target = tmp_path / "llama.yaml"
    assert main(["profile", "export", "70b-dense-5-users", "--format", "eugr", "-o", str(target)]) == 0
    capsys.readouterr()
    assert main(["fit", str(target), "--offline"]) == 0
    out = capsys.readouterr()[0]
    assert "(eugr)" in out and "--max-num-seqs 5" in out
    with pytest.raises(SystemExit) as exited:  # argparse names the choices
        main(["profile", "export", "70b-dense-5-users", "--format", "docker"])
    assert exited.value.code == 2


def test_serve_reads_a_recipe_and_says_what_it_read(tmp_path, isolated):
    # `sparktui serve RECIPE.yaml` loads through the same loader; its [runner] is the container
    profile = load_profile(RECIPES / "eugr__openai-gpt-oss-20b.yaml")
    from sparktui.runtime.launch.runner import build_command

    command = build_command(profile)
    assert command.container is not None and "vllm-node-mxfp4" in command.argv
    assert command.argv[-len(profile.serve.to_argv()) - 2 :][:2] == ["vllm", "serve"]
    assert "VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8" in command.env
    assert profile.recipe is not None
    assert shlex.join(profile.recipe.command) in "\n".join(profile.recipe.lines())


@pytest.mark.slow
def test_sparktui_serve_runs_a_sparkrun_recipe(tmp_path, env):
    """A sparkrun recipe without a container runs the `vllm` on PATH (the stub here), guarded as any
    profile is; the recipe's environment reaches it and `stop` ends it."""
    import subprocess
    import sys

    from sparktui.runtime.records import state as st
    from tests.support import REPO, free_port, wait_for
    from tests.support.stub_vllm import install_stub

    bin_dir = tmp_path / "bin"
    install_stub(bin_dir)
    model = tmp_path / "tiny"
    model.mkdir()
    (model / "config.json").write_text((FIXTURES / "vllm-cpu" / "tiny-llama-config.json").read_text())
    port = free_port()
    recipe = tmp_path / "tiny-recipe.yaml"
    recipe.write_text(
        f"model: {model}\nruntime: vllm\nmax_nodes: 1\n"
        f"defaults:\n  port: {port}\n  host: 127.0.0.1\n  gpu_memory_utilization: 0.2\n  max_model_len: 512\n"
        'env:\n  STUB_VLLM_TIME_SCALE: "0.01"\n  STUB_VLLM_MAX_LIFE_S: "120"\n'
        "command: |\n  vllm serve {model} --port {port} --host {host} --max-model-len {max_model_len} \\\n"
        "    --gpu-memory-utilization {gpu_memory_utilization} --enforce-eager --reasoning-parser qwen3\n"
    )
    env = {**env, "PATH": f"{bin_dir}:{env['PATH']}"}

    def sparktui(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "sparktui", *args], capture_output=True, text=True, cwd=REPO, env=env, timeout=120
        )

    started = sparktui("serve", str(recipe), "--detach")
    assert started.returncode == 0, started.stderr
    assert "sparktui: recipe" in started.stderr, started.stderr
    assert "--reasoning-parser (vLLM flag)" in started.stderr, started.stderr
    state = wait_for(
        lambda: (s := st.read_state(st.state_path(port))) and s.status == "running" and s,
        60,
        what="the recipe's server",
    )
    assert state.profile == "tiny-recipe" and "--reasoning-parser" in (state.argv or [])
    assert sparktui("stop", "--port", str(port)).returncode == 0


@pytest.mark.slow  # starts a process
def test_the_two_node_recipe_is_fitted_with_its_cluster_said(capsys, isolated):
    gemma = str(RECIPES / "eugr__gemma4-26b-a4b.yaml")
    # its -it checkpoint is neither downloaded nor in the catalog: offline, the fit says so (exit 2)
    assert main(["fit", gemma, "--offline"]) == 2
    assert "google/gemma-4-26B-A4B-it" in capsys.readouterr()[1]
    # the catalog's base checkpoint (the same architecture) stands in with --model
    code = main(["fit", gemma, "--offline", "--model", "google/gemma-4-26B-A4B"])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    assert "nodes    2 (ray)" in out and "names no hosts" in out and "profile import" in out
    assert "--tensor-parallel-size 2" in out


@pytest.mark.parametrize("fmt", ["eugr", "sparkrun"])
def test_an_export_never_writes_a_secret(fmt, tmp_path):
    item = ExportInput(
        name="keys",
        description="",
        serve=ServeConfig(model="Qwen/Qwen3-32B", api_key="sk-very-secret"),
        env={"HF_TOKEN": "hf_not_for_files", "OMP_NUM_THREADS": "4"},
        image=None,
        cluster=None,
    )
    text = export_recipe(item, fmt)
    assert "sk-very-secret" not in text and "hf_not_for_files" not in text
    assert "${HF_TOKEN}" in text and "OMP_NUM_THREADS: '4'" in text
    path = tmp_path / "keys.yaml"
    path.write_text(text)
    back = profile_from_recipe(path)  # HF_TOKEN is left to the environment vLLM inherits
    assert back.env == {"OMP_NUM_THREADS": "4"} and back.serve.api_key is None
    assert back.recipe is not None and any("HF_TOKEN" in n and "not stored" in n for n in back.recipe.notes)


def test_a_recipes_env_references_are_expanded_as_sparkrun_does(tmp_path, monkeypatch):
    monkeypatch.setenv("CACHE_ROOT", "/data/hf")
    monkeypatch.delenv("UNSET_THING", raising=False)
    path = tmp_path / "refs.yaml"
    path.write_text(
        "model: Qwen/Qwen3-32B\nruntime: vllm\ncommand: vllm serve {model}\n"
        'env:\n  HF_HOME: "${CACHE_ROOT}/home"\n  OTHER: "$UNSET_THING"\n  HF_TOKEN: "${HF_TOKEN}"\n'
    )
    profile = profile_from_recipe(path)
    assert profile.env == {"HF_HOME": "/data/hf/home", "OTHER": "$UNSET_THING"}
