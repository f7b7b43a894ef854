"""Holds a multiprocessing semaphore the way vLLM's processes do (spawn context: glibc sem_open
creates /dev/shm/sem.XXXXXX, maps it, links it to sem.mp-… and unlinks the temporary name, so
/proc/PID/maps shows `sem.XXXXXX (deleted)` for the live file).

    python sem_holder.py NAME_FILE wait   write the file name to NAME_FILE; on a line on stdin, hand
                                          the semaphore to a spawned child (SemLock._rebuild opens
                                          it by name) and exit with the child's status
    python sem_holder.py NAME_FILE sleep  write the file name, then wait to be killed (30 s at most)
"""

import multiprocessing
import sys
import time
from pathlib import Path


def use(sem) -> None:
    with sem:
        pass


if __name__ == "__main__":
    ctx = multiprocessing.get_context("spawn")
    sem = ctx.Semaphore()
    Path(sys.argv[1]).write_text("sem." + sem._semlock.name.lstrip("/") + "\n")
    if sys.argv[2] == "sleep":
        time.sleep(30)
        sys.exit(0)
    sys.stdin.readline()
    child = ctx.Process(target=use, args=(sem,))
    child.start()
    child.join(20)
    sys.exit(child.exitcode)
