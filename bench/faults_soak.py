"""Faults soak: launch/stop/kill cycles with faults injected between them; count what leaks.

    python bench/faults_soak.py [--cycles 200] [--json]

Cycle i does, by i mod 6 (each with the stub vLLM, its state dir on a small tmpfs of its own):
  0  SIGSTOP the supervisor, then `stop` (the fallback: the recorded tree, then the supervisor)
  1  SIGKILL the supervisor (its reaper sweeps), then `kill` (the lost record swept)
  2  the state dir read-only (a read-only bind mount), then `stop` (the reaper writes the record later)
  3  the state dir full (a filler file up to ENOSPC), then `stop`, then the filler removed
  4  crafted messages on the socket ('['*60000, kill_below_gib 1e300: each must get ok: false), then `kill`
  5  a plain `stop`
Before each fault it reads the guard's sample age (live reply) a few times while armed.
Four sentinel processes that sparktui never started run throughout and count the signals they get.
At the end it prints (goal: 0 each, and the worst sample age a fraction of a second):
  processes            still alive with this soak's SOAK_ID
  shm_files            /dev/shm files the trees held (per their records) that still exist
  fds                  file descriptors this process holds now minus after the first cycle
  foreign_signalled    sentinel processes signalled or gone
  guard_worst_sample_age_s   the largest guard.sample_age_s seen while armed and not stopped on purpose
Needs root (mount). Uses its own state dir and the stub in tests/support/stub_vllm.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support import free_port  # noqa: E402
from tests.support.stub_vllm import install_stub  # noqa: E402

SENTINEL = r"""
import signal, sys, time
got = []
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCONT):
    signal.signal(s, lambda n, f: (got.append(n), open(sys.argv[1], "a").write(f"{n}\n")))
while True:
    time.sleep(1)
"""


def soak_processes(soak_id: str) -> list[int]:
    needle = f"SOAK_ID={soak_id}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in environ.split(b"\0") and state not in "ZX":
            found.append(int(entry))
    return found


def wait(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def raw_request(name: str, payload: bytes) -> dict[str, Any]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(name)
        sock.sendall(payload + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    reply: dict[str, Any] = json.loads(data) if data else {}
    return reply


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cycles", type=int, default=200)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="sparktui-faults-soak-"))
    mount = work / f"state-{uuid.uuid4().hex[:8]}"
    mount.mkdir()
    made = run(["mount", "-t", "tmpfs", "-o", "size=64m,mode=0700", "tmpfs", str(mount)])
    if made.returncode != 0:
        print(f"needs root to mount a tmpfs: {made.stderr.strip()}", file=sys.stderr)
        return 2
    state_dir = mount / "state"
    os.environ["SPARKTUI_STATE_DIR"] = str(state_dir)
    os.environ["SPARKTUI_CONFIG_DIR"] = str(work / "config")
    soak_id = uuid.uuid4().hex
    stub = install_stub(work / "bin")

    from sparktui.core.profiles import load_profile
    from sparktui.runtime.host import proc
    from sparktui.runtime.records import state as st
    from sparktui.runtime.server import client, launcher

    sentinels = []
    for n in range(4):
        log = work / f"sentinel-{n}.log"
        log.write_text("")
        p = subprocess.Popen([sys.executable, "-c", SENTINEL, str(log)], start_new_session=True)
        sentinels.append((p, log))

    fds_before = -1
    shm_seen: set[str] = set()
    counts = dict.fromkeys(("sigstop_stop", "sigkill_kill", "read_only_stop", "full_stop", "crafted_kill", "stop"), 0)
    errors: list[str] = []
    worst_age = 0.0
    t0 = time.monotonic()
    try:
        for i in range(args.cycles):
            mode = i % 6
            try:
                port = free_port()
                path = work / f"soak-{port}.toml"
                path.write_text(
                    f'[serve]\nmodel = "/models/tiny"\nport = {port}\nmax-model-len = 512\nenforce-eager = true\n'
                    f'[runner]\nexecutable = "{stub}"\n[env]\nSTUB_VLLM_TIME_SCALE = "0.01"\n'
                    f'STUB_VLLM_MAX_LIFE_S = "300"\nSOAK_ID = "{soak_id}"\n'
                )
                launcher.launch(load_profile(path), force=True)
                state = wait(
                    lambda port=port: (s := st.ask_live(port)) is not None and s.status == "running" and s,
                    60,
                    "the server to be ready",
                )
                for _ in range(3):
                    live = st.ask_live(port)
                    if live is not None and live.guard.armed and live.guard.sample_age_s is not None:
                        worst_age = max(worst_age, live.guard.sample_age_s)
                    time.sleep(0.1)
                if state.tree is not None:
                    shm_seen.update(name for _, _, name in state.tree.shm_held)
                sup = proc.ProcessIdentity(state.supervisor.pid, state.supervisor.start_time or 0)
                if mode == 0:
                    proc.signal_process(sup, signal.SIGSTOP)
                    client.stop(port)
                    counts["sigstop_stop"] += 1
                elif mode == 1:
                    proc.signal_process(sup, signal.SIGKILL)
                    wait(lambda sup=sup: not sup.is_alive(), 10, "the supervisor to die")
                    wait(lambda st_=state: st.with_liveness(st_).status != "running", 10, "the record to be lost")
                    client.kill(port)
                    counts["sigkill_kill"] += 1
                elif mode == 2:
                    for argv in (
                        ["mount", "--bind", str(state_dir), str(state_dir)],
                        ["mount", "-o", "remount,bind,ro", str(state_dir)],
                    ):
                        if (out := run(argv)).returncode != 0:
                            raise RuntimeError(f"{' '.join(argv)}: {out.stderr.strip()}")
                    try:
                        client.stop(port)
                    finally:
                        run(["umount", str(state_dir)])
                    counts["read_only_stop"] += 1
                elif mode == 3:
                    filler = mount / "filler"
                    run(["dd", "if=/dev/zero", f"of={filler}", "bs=64k"])
                    try:
                        client.stop(port)
                    finally:
                        filler.unlink(missing_ok=True)
                    counts["full_stop"] += 1
                elif mode == 4:
                    name = st.socket_address(port)
                    for payload in (b"[" * 60000, b'{"cmd": "guard", "lines": {"kill_below_gib": 1e300}}'):
                        reply = raw_request(name, payload)
                        if reply.get("ok") is not False or not reply.get("error"):
                            raise RuntimeError(f"crafted message {payload[:20]!r}: reply {str(reply)[:200]}")
                    client.kill(port)
                    counts["crafted_kill"] += 1
                else:
                    client.stop(port)
                    counts["stop"] += 1
                wait(lambda sup=sup: not sup.is_alive(), 20, "the supervisor to finish")
            except Exception as exc:  # a cycle that fails is counted and reported, the soak goes on
                errors.append(f"cycle {i} (mode {mode}): {type(exc).__name__}: {exc}")
            if i == 0:
                fds_before = len(os.listdir("/proc/self/fd"))
            if (i + 1) % 12 == 0 and not args.json:
                print(f"  {i + 1} cycles, {time.monotonic() - t0:.0f} s, errors {len(errors)}", file=sys.stderr)
        time.sleep(1.0)  # reapers and supervisors finishing their last writes
        signalled = sum(1 for p, log in sentinels if p.poll() is not None or log.read_text().strip())
        figures = {
            "cycles": args.cycles,
            "seconds": round(time.monotonic() - t0, 1),
            "done": counts,
            "errors": len(errors),
            "leaked": {
                "processes": len(soak_processes(soak_id)),
                "shm_files": sum(1 for name in shm_seen if (Path("/dev/shm") / name).exists()),
                "fds": len(os.listdir("/proc/self/fd")) - fds_before,
                "foreign_signalled": signalled,
            },
            "guard_worst_sample_age_s": round(worst_age, 3),
            "shm_files_seen": len(shm_seen),
        }
    finally:
        for p, _ in sentinels:
            p.kill()
            p.wait()
        for pid in soak_processes(soak_id):
            try:
                os.kill(pid, signal.SIGKILL)  # only this soak's own (SOAK_ID in their environment)
            except OSError:
                pass
        run(["umount", str(state_dir)])
        run(["umount", "-l", str(mount)])
    if args.json:
        print(json.dumps({**figures, "error_messages": errors[:20]}))
    else:
        for line in errors[:20]:
            print(f"error: {line}", file=sys.stderr)
        print(json.dumps(figures, indent=1))
    return 0 if not errors and not any(figures["leaked"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
