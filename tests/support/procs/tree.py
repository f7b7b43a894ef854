"""A process tree shaped like vLLM's, for the proc/guard tests. Steered by files in DIR.

root (dies on SIGTERM) -> child (ignores SIGTERM) -> intermediate -> grandchild.
The intermediate exits when DIR/orphan appears, so the grandchild is re-parented (to PID 1 or a
subreaper); the grandchild calls setsid() when DIR/escape appears, leaving our group and session.
Every process gives up after 30 s, so a failed test never leaves anything running.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

LIFETIME = 30.0


def wait_for(path: Path) -> None:
    end = time.monotonic() + LIFETIME
    while not path.exists():
        if time.monotonic() > end:
            os._exit(3)
        time.sleep(0.01)


def main(role: str, d: Path) -> None:
    if role == "root":
        (d / "root.pid").write_text(str(os.getpid()))
        subprocess.Popen([sys.executable, __file__, "child", str(d)])
        time.sleep(LIFETIME)
        return
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the child: only SIGKILL stops it
    (d / "child.pid").write_text(str(os.getpid()))
    if os.fork() == 0:  # intermediate
        if os.fork() == 0:  # grandchild
            (d / "grand.pid").write_text(str(os.getpid()))
            wait_for(d / "escape")
            os.setsid()
            (d / "grand.escaped").write_text("1")
            time.sleep(LIFETIME)
            os._exit(0)
        wait_for(d / "orphan")
        os._exit(0)
    os.wait()
    time.sleep(LIFETIME)


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
