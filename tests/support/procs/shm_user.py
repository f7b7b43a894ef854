"""Leaves /dev/shm files the way a killed vLLM does: a multiprocessing SharedMemory (psm_*) and a
semaphore-like sem.mp-* file, both mapped, then waits to be killed (30 s at most)."""

import mmap
import os
import sys
import time
from multiprocessing import shared_memory
from pathlib import Path

d = Path(sys.argv[1])
shm = shared_memory.SharedMemory(create=True, size=4096)
sem_path = f"/dev/shm/sem.mp-sparktui-test-{os.getpid()}"
fd = os.open(sem_path, os.O_CREAT | os.O_RDWR, 0o600)
os.ftruncate(fd, 4096)
sem_map = mmap.mmap(fd, 4096)
os.close(fd)
(d / "names").write_text(f"{shm.name}\n{os.path.basename(sem_path)}\n")
time.sleep(30)
