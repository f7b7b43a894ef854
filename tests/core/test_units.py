import pytest

from sparktui.core.units import GiB, format_gib, parse_human_int


@pytest.mark.parametrize(
    "text,expected",
    [
        ("4096", 4096),
        (512, 512),
        ("1k", 1000),
        ("1K", 1024),
        ("64M", 64 * 2**20),
        ("25.6k", 25600),
        ("2G", 2 * GiB),
        ("8g", 8 * 10**9),
    ],
)
def test_parse_human_int_matches_vllm(text, expected):
    assert parse_human_int(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "1.5", "4 GiB", "-3", True])
def test_parse_human_int_rejects_with_the_accepted_forms(text):
    with pytest.raises(ValueError, match="expected"):
        parse_human_int(text)


def test_format_gib():
    assert format_gib(3 * GiB / 2) == "1.5 GiB"
    assert format_gib(None) == "n/a"
