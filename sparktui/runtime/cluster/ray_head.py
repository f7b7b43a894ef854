"""The head node's server process over Ray: start the Ray head, then become vLLM.

`python -m sparktui.runtime.cluster.ray_head READY_FILE N RAY_ARGV(N words) VLLM_ARGV…`, run by the head's
supervisor as its server. `ray start --head … --block` starts as a child (its output goes to the
same log); once READY_FILE exists (`ray start` writes the cluster's address there when its node is
up) this process execs vLLM, so vLLM is the supervised process and Ray its child: the supervisor's
stop (the process group), its guard and its tree kill reach both, and when vLLM ends by itself the
supervisor kills what is left of the tree (Ray's head with it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

RAY_START_S = 120.0  # a loaded machine starts the GCS, raylet and dashboard in seconds; this is a bound


def main(argv: list[str]) -> int:
    ready, count = Path(argv[0]), int(argv[1])
    ray_argv, vllm_argv = argv[2 : 2 + count], argv[2 + count :]
    ready.unlink(missing_ok=True)
    ray = subprocess.Popen(ray_argv, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + RAY_START_S
    while not ready.exists():
        code = ray.poll()
        if code is not None:
            print(f"sparktui: the Ray head did not start (`ray start` exited {code}; see above)", flush=True)
            return 1
        if time.monotonic() > deadline:
            print(f"sparktui: the Ray head did not come up within {RAY_START_S:.0f} s", flush=True)
            ray.terminate()
            ray.wait()
            return 1
        time.sleep(0.1)
    print(f"sparktui: Ray head up ({ready.read_text().strip()}); starting vLLM", flush=True)
    os.execvp(vllm_argv[0], vllm_argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
