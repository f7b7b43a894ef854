"""Allocate touched memory at a steady rate, then hold it: a stand-in for vLLM starting up.

    hog.py RATE_MIB_PER_S CAP_MIB [--procs N] [--ignore-term] [--hold SECONDS]

N processes (default 1, forked, all in the hog's process group) share the rate and the cap.
Prints "started" once running. Each process exits by itself after --hold seconds at its cap
(default 20), so a failed test never leaves anything behind.
"""

import argparse
import mmap
import os
import signal
import sys
import time

CHUNK = 8 << 20
POPULATE = getattr(mmap, "MAP_POPULATE", 0x8000)  # fault every page in at mmap time: fastest touch

p = argparse.ArgumentParser()
p.add_argument("rate", type=float)
p.add_argument("cap", type=float)
p.add_argument("--procs", type=int, default=1)
p.add_argument("--ignore-term", action="store_true")
p.add_argument("--hold", type=float, default=20.0)
a = p.parse_args()
if a.ignore_term:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
for _ in range(a.procs - 1):
    if os.fork() == 0:
        break
print("started", flush=True)
held = []
cap = int(a.cap * (1 << 20) / a.procs)
rate = a.rate * (1 << 20) / a.procs
start = time.monotonic()
allocated = 0
while allocated < cap:
    delay = start + allocated / rate - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    n = min(CHUNK, cap - allocated)
    held.append(mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | POPULATE))
    allocated += n
sys.stdout.flush()
time.sleep(a.hold)
