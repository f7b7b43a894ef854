"""A pasted line the way Spark owners write it: wrappers, shell redirections, several commands, and
vLLM in a container (`docker run` of vllm/vllm-openai or NGC's image, `docker exec … bash -c '…'`)."""

from __future__ import annotations

import pytest

from sparktui.core.command_line import container_image, split_command, strip_launcher
from sparktui.core.config import parse_serve_command
from sparktui.errors import UserError

MODEL = "Qwen/Qwen3-8B"


def words(line: str) -> list[str]:
    return strip_launcher(split_command(line))


@pytest.mark.parametrize(
    "line",
    [
        f"nohup vllm serve {MODEL} --port 9000 > vllm.log 2>&1 &",
        f"vllm serve {MODEL} --port 9000 2>&1 | tee vllm.log",
        f"source ~/vllm/bin/activate && vllm serve {MODEL} --port 9000",
        f"exec vllm serve {MODEL} --port 9000",
        f"./launch-cluster.sh -n 10.0.0.1,10.0.0.2 exec vllm serve {MODEL} --port 9000",
        f"uv run --with vllm vllm serve {MODEL} --port 9000 >>log",
        f"docker run --gpus all -p 8000:8000 --ipc=host -v ~/.cache/huggingface:/root/.cache/huggingface "
        f"vllm/vllm-openai:latest --model {MODEL} --port 9000",
        f"docker run -itd --name x --shm-size 16G vllm/vllm-openai-cpu:latest-x86_64 {MODEL} --port 9000",
        f"sudo docker run --rm -e HF_TOKEN=$HF_TOKEN nvcr.io/nvidia/vllm:26.01-py3 vllm serve {MODEL} --port 9000",
        f"docker run --rm --entrypoint /bin/bash vllm/vllm-openai:v0.20.0 -c 'pip install x && vllm serve {MODEL} "
        "--port 9000'",
        f'docker run vllm-node bash -c -i "vllm serve {MODEL} --port 9000"',
        f"docker exec -it -e X=1 $VLLM_CONTAINER /bin/bash -c '\n  vllm serve {MODEL} \\\n    --port 9000'",
        f'docker run --entrypoint="" "$IMAGE" vllm serve {MODEL} --port 9000',
        f"docker run --gpus all vllm/vllm-openai:latest python3 -m vllm.entrypoints.openai.api_server "
        f"--model {MODEL} --port 9000",
    ],
)
def test_vllms_own_words_are_found(line):
    c = parse_serve_command(line)
    assert (c.model, c.port, c.extra_args) == (MODEL, 9000, [])


def test_a_placeholder_in_angle_brackets_is_a_value_not_a_redirection():
    with pytest.raises(UserError, match=r"^--max-model-len: got <n_of_tokens>; expected"):
        parse_serve_command(f"vllm serve {MODEL} --max-model-len <n_of_tokens>")


@pytest.mark.parametrize(
    ("line", "pattern"),
    [
        (f"vllm serve {MODEL} && vllm serve other/model", r"2 commands, 2 of them start vLLM"),
        ("cd /srv && ls", r"2 commands and none starts vLLM"),
        ("docker run --gpus all ubuntu nvidia-smi", r"docker run ubuntu: expected the container to run `vllm serve"),
        ("docker run --entrypoint /bin/bash vllm/vllm-openai:latest", r"it runs `/bin/bash`"),
        ("docker run --gpus all", r"docker run: no image"),
        ("docker exec -it", r"docker exec: no container"),
        ("docker run img bash -lc 'vllm bench serve --model x'", r"expected `vllm serve …`, got `vllm bench`"),
    ],
)
def test_a_line_that_does_not_start_one_vllm_server_says_why(line, pattern):
    with pytest.raises(UserError, match=pattern):
        parse_serve_command(line)


def test_docker_options_with_values_are_not_the_image():
    line = (
        "docker run --ulimit memlock=-1 --ulimit stack=67108864 --group-add video --security-opt seccomp=unconfined "
        "--device /dev/kfd --cap-add SYS_PTRACE -w /work --pids-limit 100 --privileged vllm/vllm-openai-rocm:v0.20.2 "
        f"{MODEL} -tp 8"
    )
    assert container_image(split_command(line)) == "vllm/vllm-openai-rocm:v0.20.2"
    assert words(line) == [MODEL, "-tp", "8"]
    assert container_image(split_command(f"vllm serve {MODEL}")) is None


def test_words_of_a_plain_command_stay_as_they_are():
    assert words(f"{MODEL} --port 9000") == [MODEL, "--port", "9000"]
    assert words(f"--port 9000 --model {MODEL}") == ["--port", "9000", "--model", MODEL]
