"""A process of this user, not sparktui's, that holds a port's supervisor socket and answers in the
supervisor's words: `python -c SCRIPT NAME MODE STATE` (NAME: the abstract socket's name without its
leading NUL; MODE: "answer", or "freeze" to take a stop or kill and then SIGSTOP itself; STATE: the
record it answers with, as JSON, whose supervisor it claims to be when that names no pid). Shared
by tests/faults/test_forged_record.py and bench/fuzz_inputs.py. It prints "listening" once bound."""

SCRIPT = """
import json, os, signal, socket, sys
address, mode, state = "\\0" + sys.argv[1], sys.argv[2], sys.argv[3]
try:
    state = json.loads(state)
except ValueError:
    state = None
if isinstance(state, dict) and isinstance(state.get("supervisor"), dict) and not state["supervisor"].get("pid"):
    stat = open("/proc/self/stat").read()  # it claims to be the supervisor itself
    state["supervisor"] = {"pid": os.getpid(), "start_time": int(stat[stat.rfind(")") + 2 :].split()[19])}
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(address)
server.listen(64)
print("listening", flush=True)
while True:
    conn, _ = server.accept()
    data = b""
    while not data.endswith(b"\\n"):
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    if not data:  # a bare connection (a peer check): nothing asked
        conn.close()
        continue
    try:
        cmd = json.loads(data).get("cmd")
    except (ValueError, AttributeError):
        cmd = None
    if cmd in ("stop", "kill") and mode == "freeze":
        os.kill(os.getpid(), signal.SIGSTOP)
    if cmd in ("stop", "kill") and isinstance(state, dict):
        state = dict(state, status="exited", phase="stopped", exit={"reason": "stopped", "by": cmd})
    try:
        conn.sendall(json.dumps({"ok": True, "state": state}).encode() + b"\\n")
    except OSError:
        pass
    conn.close()
"""
