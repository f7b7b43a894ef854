"""Churn the page cache: read a file through, drop its pages, read it again, N times, then exit.

    churn.py FILE TIMES [HOLD_S]

MemFree falls by the file's size at each read and climbs back at each drop; MemAvailable barely
moves (the page cache is reclaimable). HOLD_S: how long the pages stay cached before each drop,
so that a sampler on a busy machine sees the peak. Prints "started" once running.
"""

import os
import sys
import time

path, times = sys.argv[1], int(sys.argv[2])
hold = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
print("started", flush=True)
for _ in range(times):
    fd = os.open(path, os.O_RDONLY)
    try:
        while os.read(fd, 8 << 20):
            pass
        time.sleep(hold)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
