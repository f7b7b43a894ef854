"""The head's Link, in-process: it knows its own ranks by the cluster's launch id. A worker's stream
that tells of another server on the port is not its rank (the head stops); its end stops its own
ranks by that id, and says which node answered otherwise. The worker's streams are stand-ins here
(the real ones run in test_cluster_launch's netns cluster)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sparktui.core.profiles import parse_profile
from sparktui.runtime.cluster import ssh as cluster_ssh
from sparktui.runtime.cluster.link import Link, read_nodes

PORT = 8123
PROFILE = (
    f'[serve]\nmodel = "/models/tiny"\nport = {PORT}\ntensor-parallel-size = 2\n'
    '[cluster]\nnodes = ["node0", "node1"]\nbackend = "mp"\nmaster-addr = "10.0.0.1"\n'
)


class Stream:
    """A worker's stream as the head's loop reads it: its latest line, and whether it is up."""

    def __init__(self, host: str, line: dict[str, Any] | None) -> None:
        self.host, self.line, self.news = host, line, True

    def take(self) -> tuple[dict[str, Any] | None, bool]:
        return self.line, True

    def close(self) -> None:
        pass


def head_link(launch_id: str | None, line: dict[str, Any] | None) -> Link:
    profile = parse_profile(PROFILE, name="two")
    link = Link(profile, profile.serve, 0, launch_id=launch_id)
    link.streams = [Stream("node1", line)]  # type: ignore[list-item]
    return link


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ({"status": "running", "launch_id": "ours"}, None),
        ({"status": "none"}, None),  # not started yet there
        ({"status": "running", "launch_id": "someone-else"}, f"port {PORT} there is another server's"),
        ({"status": "starting", "launch_id": None}, f"port {PORT} there is another server's"),
    ],
    ids=["its rank", "no record", "another launch", "no launch id"],
)
def test_a_worker_line_of_another_server_is_not_the_heads_rank(
    line: dict[str, Any], why: str | None, isolated: Path
) -> None:
    link = head_link("ours", line)
    up, reason = link.check(0.0)
    assert up
    if why is None:
        assert reason is None
    else:
        assert reason is not None and why in reason and "node node1" in reason
        assert read_nodes(PORT)[1]["status"] == "replaced"  # `status` shows it so


def test_its_end_stops_its_own_ranks_by_id_and_says_which_node_refused(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[tuple[str, list[str]]] = []

    def ssh(host: str, remote: list[str], stdin: str | None = None, timeout: float = 0) -> tuple[int, str, str]:
        ran.append((host, remote))
        return 2, "", "sparktui: --only-id ours: the server on port 8123 is another one (…); nothing was done to it\n"

    monkeypatch.setattr(cluster_ssh, "ssh_run", ssh)
    notes = head_link("ours", None).close("kill")
    assert ran == [("node1", ["sparktui", "kill", "--port", str(PORT), "--only-id", "ours"])]
    assert len(notes) == 1 and notes[0].startswith("node node1: `sparktui kill --port 8123 --only-id ours` there")
    assert "nothing was done to it" in notes[0]


def test_a_head_without_a_launch_id_stops_nothing_it_cannot_name(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cluster_ssh, "ssh_run", lambda *a, **k: pytest.fail("no worker may be signalled"))
    notes = head_link(None, None).close("stop")
    assert notes and "no launch id" in notes[0]
