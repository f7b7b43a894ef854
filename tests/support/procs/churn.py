"""Churn the page cache: read a file through, drop its pages, read it again, N times, then exit.

    churn.py FILE TIMES

MemFree falls by the file's size at each read and climbs back at each drop; MemAvailable barely
moves (the page cache is reclaimable). Prints "started" once running.
"""

import os
import sys

path, times = sys.argv[1], int(sys.argv[2])
print("started", flush=True)
for _ in range(times):
    fd = os.open(path, os.O_RDONLY)
    try:
        while os.read(fd, 8 << 20):
            pass
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
