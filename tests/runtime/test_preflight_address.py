"""Preflight's port check says what is wrong with the address: an address that is not this
machine's (EADDRNOTAVAIL) is not "something is already listening" (issue 9, item 9)."""

from __future__ import annotations

import errno
import socket

import pytest

from sparktui.errors import UserError
from sparktui.runtime.server import preflight as server_preflight
from tests.support import free_port

NOT_OURS = "192.0.2.1"  # TEST-NET-1 (RFC 5737): never assigned to a machine


@pytest.fixture
def loopback_only(monkeypatch):
    """Fail the test instead of letting a probe leave the machine."""
    real = socket.socket.connect_ex

    def connect_ex(self, address):
        assert str(address[0]).startswith(("127.", "::1")), f"a probe to {address} would leave the machine"
        return real(self, address)

    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)


def test_an_address_that_is_not_ours_is_said_so(loopback_only):
    probe = socket.socket()
    with pytest.raises(OSError) as bind_error:
        probe.bind((NOT_OURS, 0))  # the premise: this machine does not have it
    probe.close()
    assert bind_error.value.errno == errno.EADDRNOTAVAIL
    with pytest.raises(UserError) as exc:
        server_preflight._port_in_use(NOT_OURS, free_port())
    message = str(exc.value)
    assert f"--host {NOT_OURS}" in message and "EADDRNOTAVAIL" in message and "already listening" not in message


def test_a_port_in_use_is_still_in_use(loopback_only):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert server_preflight._port_in_use("127.0.0.1", port)
        assert server_preflight._port_in_use("0.0.0.0", port)
    assert not server_preflight._port_in_use("127.0.0.1", free_port())
