"""Soak: many launch/stop/kill/guard-trip cycles with the stub vLLM; count what leaks.

    python bench/soak.py [--cycles 200] [--json]

Cycle i does, by i mod 4:
  0  serve --detach (Python API: launcher.launch), wait until ready, stop
  1  the same, then kill
  2  the same, then move the guard's lines above MemAvailable (set-guard path): a real guard trip
  3  `sparktui guard` with its term line above MemAvailable over a shell that leaves a setsid
     daemon and a background child: a guard trip of the CLI guard
Each run gets SOAK_ID in its environment, so every process any cycle started can be found in
/proc afterwards, whatever its parent or session. At the end it prints (goal: 0 each):
  processes    still alive with this soak's SOAK_ID
  shm_files    /dev/shm files the trees held (per their records) that still exist
  fds          file descriptors this process holds now minus after the first cycle
  state        state records not in status "exited" (running, starting, lost)
  cgroups      this soak's trees' cgroups that still exist
It uses its own state dir (a temp folder) and the stub in tests/support/stub_vllm.
"""

from __future__ import annotations

import argparse
import json
import os
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


def mem_available_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / (1 << 20)
    raise RuntimeError("no MemAvailable")


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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cycles", type=int, default=200)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="sparktui-soak-"))
    os.environ["SPARKTUI_STATE_DIR"] = str(work / "state")
    os.environ["SPARKTUI_CONFIG_DIR"] = str(work / "config")
    soak_id = uuid.uuid4().hex
    stub = install_stub(work / "bin")

    from sparktui.core.profiles import load_profile
    from sparktui.runtime.records import state as st
    from sparktui.runtime.server import client, launcher

    fds_before = -1  # taken after the first cycle: what the first use opens for good is no leak
    shm_seen: set[str] = set()
    cgroups_seen: set[str] = set()
    counts = {"stop": 0, "kill": 0, "guard_trip": 0, "guard_cli_trip": 0}
    errors: list[str] = []
    t0 = time.monotonic()

    for i in range(args.cycles):
        mode = i % 4
        try:
            if mode == 3:
                line = f"{mem_available_gib() + 100:.1f}"
                script = "sleep 300 & setsid sleep 300 & wait"
                guard_argv = ["guard", "--warn-below", line, "--term-below", line, "--", "sh", "-c", script]
                out = subprocess.run(
                    [sys.executable, "-m", "sparktui", *guard_argv],
                    cwd=REPO,
                    env={**os.environ, "SOAK_ID": soak_id},
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                if out.returncode != 97:
                    raise RuntimeError(f"guard CLI exit {out.returncode}: {out.stderr[-300:]}")
                counts["guard_cli_trip"] += 1
                continue
            port = free_port()
            path = work / f"soak-{port}.toml"
            path.write_text(
                f'[serve]\nmodel = "/models/tiny"\nport = {port}\nmax-model-len = 512\nenforce-eager = true\n'
                f'[runner]\nexecutable = "{stub}"\n[env]\nSTUB_VLLM_TIME_SCALE = "0.01"\n'
                f'STUB_VLLM_MAX_LIFE_S = "300"\nSOAK_ID = "{soak_id}"\n'
            )
            profile = load_profile(path)
            launcher.launch(profile, force=True)
            state = wait(
                lambda port=port: (s := st.ask_live(port)) is not None and s.status == "running" and s,
                60,
                "the server to be ready",
            )
            if state.tree is not None:
                shm_seen.update(name for _, _, name in state.tree.shm_held)
                if state.tree.cgroup:
                    cgroups_seen.add(state.tree.cgroup)
            if mode == 0:
                client.stop(port)
                counts["stop"] += 1
            elif mode == 1:
                client.kill(port)
                counts["kill"] += 1
            else:
                above = round(mem_available_gib() + 100, 1)
                client.set_guard(port, lines={"warn_below_gib": above, "term_below_gib": above})
                final = wait(
                    lambda port=port: (
                        (s := st.read_state(st.state_path(port))) is not None and s.status == "exited" and s
                    ),
                    60,
                    "the guard to trip",
                )
                if final.exit is None or final.exit.reason != "guard":
                    raise RuntimeError(f"cycle {i}: ended with {final.exit}, not a guard trip")
                counts["guard_trip"] += 1
        except Exception as exc:  # a cycle that fails is counted and reported, the soak goes on
            errors.append(f"cycle {i} (mode {mode}): {exc}")
        if i == 0:
            fds_before = len(os.listdir("/proc/self/fd"))
        if (i + 1) % 20 == 0 and not args.json:
            print(f"  {i + 1} cycles, {time.monotonic() - t0:.0f} s, errors {len(errors)}", file=sys.stderr)

    time.sleep(1.0)  # reapers and supervisors finishing their last writes
    states = st.list_states()
    figures = {
        "cycles": args.cycles,
        "seconds": round(time.monotonic() - t0, 1),
        "done": counts,
        "errors": len(errors),
        "leaked": {
            "processes": len(soak_processes(soak_id)),
            "shm_files": sum(1 for name in shm_seen if (Path("/dev/shm") / name).exists()),
            "fds": len(os.listdir("/proc/self/fd")) - fds_before,
            "state": sum(1 for s in states if s.status != "exited"),
            "cgroups": sum(1 for path in cgroups_seen if Path(path).exists()),
        },
        "state_records": len(states),
        "shm_files_seen": len(shm_seen),
    }
    if args.json:
        print(json.dumps({**figures, "error_messages": errors[:20]}))
    else:
        for line in errors[:20]:
            print(f"error: {line}", file=sys.stderr)
        print(json.dumps(figures, indent=1))
    return 0 if not errors and not any(figures["leaked"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
