import pytest

from shmwin.rate import Rate, parse, parse_many

pytestmark = pytest.mark.unit

S = 1_000_000_000


@pytest.mark.parametrize(
    ("text", "limit", "period_ns"),
    [
        ("10/second", 10, S), ("10/seconds", 10, S), ("5/minute", 5, 60 * S), ("1000/hour", 1000, 3600 * S),
        ("20000/day", 20000, 86400 * S), ("5 per minute", 5, 60 * S), ("5 per 2 minutes", 5, 120 * S),
        ("100/5 minutes", 100, 300 * S), ("100/5minutes", 100, 300 * S), ("3/h", 3, 3600 * S),
        ("7/30s", 7, 30 * S), (" 2 / MINUTE ", 2, 60 * S), ("1/day", 1, 86400 * S), ("4/min", 4, 60 * S),
    ],
)  # fmt: skip
def test_spellings(text, limit, period_ns):
    assert parse(text) == Rate(limit, period_ns)


@pytest.mark.parametrize(
    "bad",
    ["", "10", "10/", "/minute", "ten/minute", "10/fortnight", "10/0 minutes", "0/minute", "-1/minute",
     "10 minute", "10/minute/extra", "1.5/second", "10 per", None, 10],
)  # fmt: skip
def test_wrong_spellings_say_what_was_expected(bad):
    with pytest.raises(ValueError, match=r"10/second|at least|not a rate|a rate is"):
        parse(bad)


def test_many():
    assert parse_many("10/second;1000/hour") == [Rate(10, S), Rate(1000, 3600 * S)]
    assert parse_many("1000/hour, 10/second") == [Rate(10, S), Rate(1000, 3600 * S)]
    assert parse_many(["5/minute", Rate(1, S)]) == [Rate(1, S), Rate(5, 60 * S)]
    assert parse_many("5/minute;") == [Rate(5, 60 * S)]
    with pytest.raises(ValueError, match="no rate"):
        parse_many(" ; ")
    with pytest.raises(ValueError, match="same period"):
        parse_many("5/minute;10/60 seconds")
    with pytest.raises(ValueError, match="not a rate"):
        parse_many("5/minute;lots/hour")


def test_str_round_trips():
    for text in ("10/second", "5/minute", "100/5 minutes", "3/hour", "7/30 seconds"):
        assert str(parse(text)) == text
        assert parse(str(parse(text))) == parse(text)
