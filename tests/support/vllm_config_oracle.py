"""Run under a vLLM venv (not sparktui's): does vLLM's own get_config load each config.json without
--trust-remote-code? vllm/transformers_utils/config.py: get_config(model, trust_remote_code=False),
as `vllm serve` calls it (through ModelConfig), on a temporary folder holding only that config.

Arguments: config.json paths. Prints one JSON object per line: {"path", "version", "loads", "error"}.
"""

import json
import os
import shutil
import sys
import tempfile

os.environ["HF_HUB_OFFLINE"] = "1"  # a local folder: nothing to fetch

import vllm
from vllm.transformers_utils.config import get_config


def main():
    for path in sys.argv[1:]:
        folder = tempfile.mkdtemp(prefix="sparktui-config-oracle-")
        try:
            shutil.copy(path, os.path.join(folder, "config.json"))
            get_config(folder, trust_remote_code=False)
            answer = {"loads": True, "error": None}
        except Exception as exc:  # vLLM's refusal, whatever its class
            answer = {"loads": False, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
        finally:
            shutil.rmtree(folder)
        print(json.dumps({"path": path, "version": vllm.__version__, **answer}), flush=True)


if __name__ == "__main__":
    main()
