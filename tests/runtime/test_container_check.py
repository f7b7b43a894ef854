"""A container runner's preflight (runtime/launch/container_check.py) and an image's labels."""

from __future__ import annotations

from pathlib import Path

from sparktui.core.container import labels_of_inspect
from sparktui.core.profiles import parse_profile
from sparktui.runtime.launch.container_check import container_preflight, world_of
from sparktui.runtime.launch.vllm_version import from_labels
from tests.support import FIXTURES


def test_an_ngc_image_names_its_vllm_in_a_label() -> None:
    labels = labels_of_inspect((FIXTURES / "docker" / "inspect_ngc_vllm_25.10.json").read_text())
    assert from_labels(labels, "nvcr.io/nvidia/vllm:25.10-py3") == (
        "0.10.2",
        "image label com.nvidia.vllm.version of nvcr.io/nvidia/vllm:25.10-py3",
    )
    assert from_labels({"org.opencontainers.image.version": "24.04"}, "x") is None
    assert labels_of_inspect("not json") == {} and labels_of_inspect("[]") == {}


def test_preflight_of_a_container_profile(tmp_path: Path) -> None:
    text = (
        '[serve]\nmodel = "/models/tiny"\ntensor-parallel-size = 2\n'
        '[runner]\nkind = "container"\nimage = "nvcr.io/nvidia/vllm:25.10-py3"\n'
        'container-args = ["--ipc=private", "--shm-size", "128m", "--memory", "100g"]\n'
    )
    profile = parse_profile(text, tmp_path / "c.toml")
    assert world_of(profile, profile.serve) == (2, 2)
    said = container_preflight(profile, profile.serve, unified=True, inspect=False)
    assert any("--shm-size is 128 MiB" in w for w in said)
    assert any("--memory 100g does nothing" in w for w in said)
    native = parse_profile('[serve]\nmodel = "/models/tiny"\n', tmp_path / "n.toml")
    assert container_preflight(native, native.serve, unified=True, inspect=False) == []
