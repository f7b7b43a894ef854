"""The supervisor's command socket: one per port, claimed first, answering only this user.

It is a Linux abstract socket named by user and port (state.socket_address): binding it is atomic
(a second launch gets EADDRINUSE and stops before touching anything), it needs no file (the
supervisor stays reachable with its state dir deleted), and it vanishes with the process. Each
connection carries one request line and gets one reply line; what a request does is the
supervisor's (its `answer`), who may ask is checked here (SO_PEERCRED).
"""

from __future__ import annotations

import errno
import socket
import threading
import time
from collections.abc import Callable

from sparktui.errors import UserError
from sparktui.runtime.records import protocol as pr
from sparktui.runtime.records import state as st

SOCKET_BACKLOG = 1024  # a burst of clients (panels, scripts, a cluster's head) waits in the queue, not refused


class CommandSocket:
    def __init__(self, port: int, say: Callable[[str], None]) -> None:
        self.port = port
        self.name = st.socket_address(port)  # the abstract name held (an alternate one if squatted)
        self.server: socket.socket | None = None
        self._say = say
        self._foreign_clients: set[int | None] = set()
        self._in_flight = 0  # connections being answered (drain waits for their replies)
        self._idle = threading.Condition()

    def claim(self) -> None:
        """One launch per port: bind the port's command socket first of all (before preflight).
        Only this user's processes are answered (SO_PEERCRED, in _handle)."""
        names = [st.socket_address(self.port)] + [
            st.alternate_address(self.port, n) for n in range(1, st.ALTERNATE_NAMES + 1)
        ]
        for name in names:
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
            try:
                server.bind(name)
                break
            except OSError as exc:
                server.close()
                if exc.errno != errno.EADDRINUSE:
                    raise
                holder = holder_uid(name)
                if holder is None or st.trusted_uid(holder):
                    raise UserError(
                        f"--port {self.port}: another sparktui supervisor already holds this port (a server runs "
                        f"or is starting there); see `sparktui status --port {self.port}`, stop it with "
                        f"`sparktui stop --port {self.port}`, or choose another --port"
                    ) from None
                self._say(
                    f"warning: user id {holder} holds this port's supervisor socket name (not a supervisor of "
                    "yours: ignored); using the next name"
                )
        else:
            raise UserError(
                f"--port {self.port}: other users hold all {len(names)} of this port's supervisor socket names; "
                "choose another --port (and find who squats them: `ss -xlp | grep sparktui`)"
            )
        server.listen(SOCKET_BACKLOG)
        self.server = server
        self.name = name
        st.HELD_HERE.add(self.port)  # its own preflight must not ask it (nothing answers until serve())

    def serve(self, answer: Callable[[pr.AnyRequest], pr.Reply], snapshot: Callable[[], pr.StateRecord | None]) -> None:
        """Answer requests from now on, each connection in its own thread."""
        if self.server is None:
            self.claim()
        server = self.server
        assert server is not None  # bound by claim() just above

        def accept() -> None:
            while True:
                try:
                    conn, _ = server.accept()
                except OSError:
                    return
                with self._idle:
                    self._in_flight += 1
                threading.Thread(target=self._answered, args=(conn, answer, snapshot), daemon=True).start()

        threading.Thread(target=accept, name="sparktui-socket", daemon=True).start()

    def _answered(
        self,
        conn: socket.socket,
        answer: Callable[[pr.AnyRequest], pr.Reply],
        snapshot: Callable[[], pr.StateRecord | None],
    ) -> None:
        try:
            self._handle(conn, answer, snapshot)
        finally:
            with self._idle:
                self._in_flight -= 1
                self._idle.notify_all()

    def drain(self, timeout: float) -> bool:
        """Wait until every connection taken has had its reply sent (the process may then end: its
        handler threads are daemons, and a stop's caller must get the final state), at most
        `timeout` seconds; True if none is left."""
        with self._idle:
            return self._idle.wait_for(lambda: self._in_flight == 0, timeout)

    def _handle(
        self,
        conn: socket.socket,
        answer: Callable[[pr.AnyRequest], pr.Reply],
        snapshot: Callable[[], pr.StateRecord | None],
    ) -> None:
        with conn:
            uid = st.peer_uid(conn)
            if not st.trusted_uid(uid):
                if uid not in self._foreign_clients:  # an abstract socket has no file mode: refuse other users here
                    self._foreign_clients.add(uid)
                    self._say(
                        f"warning: ignored a connection from user id {uid} (only your user and root are answered)"
                    )
                return
            try:
                conn.settimeout(5)
                data = b""
                while not data.endswith(b"\n") and len(data) < 65536:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                reply = answer(pr.parse_request(data))
            except UserError as exc:  # ProtocolError, or guard lines out of order
                reply = pr.Reply(ok=False, error=str(exc), state=snapshot())
            except (OSError, ValueError) as exc:
                reply = pr.Reply(ok=False, error=str(exc))
            except Exception as exc:  # a crafted message must get an answer, never a traceback
                self._say(f"warning: a request failed: {type(exc).__name__}: {exc}"[:300])
                reply = pr.Reply(ok=False, error=f"the request failed: {type(exc).__name__}: {exc}"[:1000])
            try:
                conn.sendall(reply.to_line())
            except OSError:
                pass

    def close(self) -> None:
        if self.server is not None:
            try:
                self.server.close()
            except OSError:
                pass


def holder_uid(name: str) -> int | None:
    """Who listens on an abstract name we could not bind: their user id (SO_PEERCRED), or None
    when nobody answers (a supervisor between its bind and its listen, or one not listening)."""
    for _ in range(3):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC) as probe:
            probe.settimeout(1.0)
            try:
                probe.connect(name)
            except OSError:
                time.sleep(0.05)
                continue
            return st.peer_uid(probe)
    return None
