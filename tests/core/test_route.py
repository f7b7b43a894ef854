"""core.route: the route file, and which running servers make room for the next one."""

from __future__ import annotations

import pytest

from sparktui.core.pool import Reservation
from sparktui.core.route import RouteModel, Running, parse_listen, parse_route, plan_room
from sparktui.errors import UserError

GIB = 1 << 30
FILE = """
[route]
listen = "127.0.0.1:9000"
evict = "priority"
ttl-s = 60
[route.models.qwen]
profile = "qwen3-8b"
priority = 5
keep = true
[route.models.gemma]
profile = "/p/gemma.toml"
ttl-s = 0
preload = true
[route.groups]
small = ["qwen", "gemma"]
"""


def test_a_route_file_reads_listen_options_models_and_groups():
    s = parse_route(FILE)
    assert (s.host, s.port, s.evict, s.queue) == ("127.0.0.1", 9000, "priority", 32)
    qwen, gemma = s.models
    assert (qwen.name, qwen.profile, qwen.ttl_s, qwen.priority, qwen.keep, qwen.group) == (
        "qwen",
        "qwen3-8b",
        60,
        5,
        True,
        "small",
    )
    assert (gemma.ttl_s, gemma.preload, gemma.keep) == (0, True, False)


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ('[route]\nlisten = "x"\n[route.models.a]\nprofile = "p"', "[route] listen 'x': expected HOST:PORT"),
        ("[route]\n", "[route.models] missing"),
        ("[route.models.a]\nttl-s = 3", "[route.models.a]: profile missing"),
        (
            '[route]\nevict = "fifo"\n[route.models.a]\nprofile = "p"',
            'evict: got \'fifo\'; expected "lru" or "priority"',
        ),
        ('[route.models.a]\nprofile = "p"\nttl-s = -1', "[route.models.a] ttl-s: got -1; expected a value ≥ 0"),
        ('[route.models.a]\nprofile = "p"\nkeep = "yes"', "keep: got 'yes'; expected true or false"),
        (
            '[route.models.a]\nprofile = "p"\n[route.models.b]\nprofile = "q"\n[route.groups]\ng = ["a"]',
            "b in no group",
        ),
        ('[route.models.a]\nprofile = "p"\n[route.groups]\ng = ["a", "z"]', "'z' is not a model of the route"),
        ("[route\n", "not valid TOML"),
    ],
)
def test_a_bad_route_file_names_the_file_the_key_and_what_was_expected(text, names):
    with pytest.raises(UserError) as bad:
        parse_route(text, path=None)
    assert names in str(bad.value) and str(bad.value).startswith("<route>")


def test_listen_takes_host_port_a_port_alone_or_ipv6():
    assert parse_listen("8081") == ("127.0.0.1", 8081)
    assert parse_listen("0.0.0.0:80") == ("0.0.0.0", 80)
    assert parse_listen("[::1]:8080") == ("::1", 8080)
    with pytest.raises(UserError):
        parse_listen("127.0.0.1:99999")


def running(name: str, gib: int, used: float, port: int, **model: object) -> Running:
    return Running(RouteModel(name, name, **model), Reservation(port, name, gib * GIB, "test"), used)  # type: ignore[arg-type]


def test_room_is_made_by_stopping_the_least_recently_used_until_the_new_one_fits():
    target, need = RouteModel("c", "c"), Reservation(3, "c", 50 * GIB, "test")
    up = [running("a", 40, used=1.0, port=1), running("b", 40, used=2.0, port=2)]
    plan = plan_room(target, need, up, [], 100 * GIB)
    assert plan.fits and plan.evict == ("a",)  # a is older; b and c fit together (90 ≤ 100)
    assert plan_room(target, Reservation(3, "c", 10 * GIB, "t"), up, [], 100 * GIB).evict == ()


def test_priority_order_stops_the_lowest_priority_first_and_keep_is_never_stopped():
    target, need = RouteModel("c", "c"), Reservation(3, "c", 50 * GIB, "test")
    up = [running("a", 40, used=1.0, port=1, priority=9), running("b", 40, used=2.0, port=2)]
    assert plan_room(target, need, up, [], 100 * GIB, "priority").evict == ("b",)
    kept = [running("a", 40, used=1.0, port=1, keep=True), running("b", 40, used=2.0, port=2)]
    assert plan_room(target, need, kept, [], 100 * GIB).evict == ("b",)
    both_kept = [running("a", 40, 1.0, 1, keep=True), running("b", 40, 2.0, 2, keep=True)]
    plan = plan_room(target, need, both_kept, [], 100 * GIB)
    assert not plan.fits and "exceed the 100.0 GiB pool" in plan.reason and "drop keep = true" in plan.reason


def test_other_groups_and_the_same_port_always_go_and_servers_outside_the_route_count_but_stay():
    target, need = RouteModel("c", "c", group="g1"), Reservation(2, "c", 10 * GIB, "test")
    up = [running("a", 10, 1.0, 1, group="g2"), running("b", 10, 2.0, 2, group="g1")]
    assert plan_room(target, need, up, [], 100 * GIB).evict == ("a", "b")
    outside = [Reservation(9, "theirs", 85 * GIB, "test")]
    plan = plan_room(
        RouteModel("c", "c"), Reservation(3, "c", 10 * GIB, "t"), [running("a", 10, 1.0, 1)], outside, 100 * GIB
    )
    assert plan.fits and plan.evict == ("a",)
    alone_too_big = plan_room(RouteModel("c", "c"), Reservation(3, "c", 20 * GIB, "t"), [], outside, 100 * GIB)
    assert not alone_too_big.fits and "not the route's" in alone_too_big.reason
