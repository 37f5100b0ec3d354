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
        ("1000/month", 1000, 30 * 86400 * S), ("10000/year", 10000, 360 * 86400 * S),
        ("2 PER 3 Hours", 2, 3 * 3600 * S), ("10per2minutes", 10, 120 * S), ("10 perminute", 10, 60 * S),
        ("010/secs", 10, S), ("3/hrs", 3, 3600 * S),
    ],
)  # fmt: skip
def test_spellings(text, limit, period_ns):
    assert parse(text) == Rate(limit, period_ns)


@pytest.mark.parametrize(
    "bad",
    ["", "10", "10/", "/minute", "ten/minute", "10/fortnight", "10/0 minutes", "0/minute", "-1/minute",
     "10 minute", "10/minute/extra", "1.5/second", "10 per", "10/ms", "10/mins/", "10/fortnights",
     "١٠/second"],
)  # fmt: skip
def test_wrong_spellings_say_what_was_expected(bad):
    with pytest.raises(ValueError, match=r"10/second|at least|not a rate"):
        parse(bad)


@pytest.mark.parametrize("bad", [None, 10, 1.5, b"10/second", Rate(1, S)])
def test_a_rate_that_is_not_a_string_is_a_type_error(bad):
    with pytest.raises(TypeError, match="a rate is a string"):
        parse(bad)


@pytest.mark.parametrize(
    ("rates", "complaint"),
    [
        (
            5,
            r"rates must be a string like '10/second;1000/hour', a shmwin.Rate or a list of them, not 5 ",
        ),
        (None, r"not None \(NoneType\)"),
        (["5/s", 5], r"rates\[1\] is 5 \(int\): each rate is a string"),
        (("5/s", None), r"rates\[1\] is None"),
        ({"5/s"}, r"not \{'5/s'\} \(set\)"),
    ],
)
def test_parse_many_of_the_wrong_type_says_what_it_takes(rates, complaint):
    with pytest.raises(TypeError, match=complaint):
        parse_many(rates)


@pytest.mark.parametrize(
    ("text", "bound"),
    [
        ("99999999999999999999/second", "limit must be at most 9223372036854775807"),
        ("9223372036854775808/minute", "limit must be at most 9223372036854775807"),
        ("1/99999999999 years", "period must be at most 9223372036 seconds"),
    ],
)
def test_numbers_beyond_int64_name_the_bound(text, bound):
    with pytest.raises(ValueError, match=bound):
        parse(text)
    assert parse("9223372036854775807/second").limit == 2**63 - 1


def test_rate_values_are_checked():
    with pytest.raises(ValueError, match="at most 9223372036854775807"):
        Rate(2**63, S)
    with pytest.raises(TypeError, match="must be an int"):
        Rate(1.5, S)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least 1"):
        Rate(0, S)


def test_many():
    assert parse_many("10/second;1000/hour") == [Rate(10, S), Rate(1000, 3600 * S)]
    assert parse_many("1000/hour, 10/second") == [Rate(10, S), Rate(1000, 3600 * S)]
    assert parse_many("1000/hour|10/second") == [Rate(10, S), Rate(1000, 3600 * S)]
    assert parse_many(["5/minute", Rate(1, S)]) == [Rate(1, S), Rate(5, 60 * S)]
    assert parse_many("5/minute;") == [Rate(5, 60 * S)]
    with pytest.raises(ValueError, match="no rate"):
        parse_many(" ; ")
    with pytest.raises(ValueError, match="not a rate"):
        parse_many("5/minute;lots/hour")


def test_two_rates_over_one_period_mean_the_stricter():
    assert parse_many("5/minute;10/60 seconds") == [Rate(5, 60 * S)]
    assert parse_many(["10/minute", Rate(5, 60 * S), "7 per 1 minute"]) == [Rate(5, 60 * S)]


# -- every string limits.parse_many accepts means the same here ----------------------------------

_AMOUNTS = ["1", "10", "007", "250000"]
_UNITS = ["second", "minute", "hour", "day", "month", "year"]
_CORPUS = sorted(
    {
        f"{amount}{sep}{count}{unit}{plural}"
        for amount in _AMOUNTS
        for sep in ("/", " / ", " per ", "per", " PER ")
        for count in ("", "1 ", "2 ", "30", " 12 ")
        for unit in _UNITS + [u.upper() for u in _UNITS[:2]] + ["Hour"]
        for plural in ("", "s")
    }
    | {
        "1/second;5/minute", "1/second,5/minute", "1/second|5/minute", " 10 per hour | 100 per day ",
        "1000/month", "10000/year", "2/3 days; 5/month|1/year", "10/minute;20/minute", "60 per 60 seconds",
        "5 per 5 minutes , 1 per 1 second", "9223372036854775807/second",
    }
)  # fmt: skip


def test_every_rate_limits_accepts_means_the_same():
    limits_util = pytest.importorskip("limits.util")
    accepted, differ = 0, []
    for text in _CORPUS:
        try:
            items = limits_util.parse_many(text)
        except ValueError:
            continue
        accepted += 1
        strictest: dict[int, int] = {}
        for item in items:  # two limits over one period: the stricter one binds
            period_ns = item.get_expiry() * S
            strictest[period_ns] = min(item.amount, strictest.get(period_ns, item.amount))
        theirs = sorted(((limit, period) for period, limit in strictest.items()), key=lambda lp: lp[1])
        try:
            ours = [(r.limit, r.period_ns) for r in parse_many(text)]
        except ValueError as err:
            ours = [str(err)]  # type: ignore[list-item]
        if ours != theirs:
            differ.append((text, theirs, ours))
    assert accepted > 0.9 * len(_CORPUS) > 1500  # the corpus is mostly what limits takes
    assert differ == []


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("0/minute", "at least 1"),  # limits: a limit of 0, which admits nothing
        ("10/0 minutes", "at least 1 minute"),  # limits: reads 0 minutes as 1 minute
        ("1/second:;2/minute", "not a rate"),  # limits: a stray ':' before a separator (a regex typo)
    ],
)
def test_the_documented_differences_from_limits_are_errors(text, why):
    limits_util = pytest.importorskip("limits.util")
    assert limits_util.parse_many(text)  # limits takes it ...
    with pytest.raises(ValueError, match=why):
        parse_many(text)  # ... shmwin says why not


def _accepted_by_limits(limits_util, text: str) -> bool:
    try:
        limits_util.parse_many(text)
    except ValueError:
        return False
    return True


def test_str_round_trips():
    for text in ("10/second", "5/minute", "100/5 minutes", "3/hour", "7/30 seconds"):
        assert str(parse(text)) == text
        assert parse(str(parse(text))) == parse(text)


def test_a_limiter_of_the_wrong_rates_type_says_what_it_takes(name):
    import shmwin

    with pytest.raises(TypeError, match=r"not 5 \(int\)"):
        shmwin.Limiter(name, 5)
    with pytest.raises(TypeError, match=r"rates\[1\] is 5 \(int\)"):
        shmwin.Limiter(name, ["5/s", 5])
    with pytest.raises(ValueError, match="at most 9223372036854775807"):
        shmwin.Limiter(name, "99999999999999999999/second")
    assert name not in shmwin.names()


@pytest.mark.parametrize("text", ["3/second", "7/minute", "1000/hour", "1/day", "3/7 seconds",
                                  "999999/second", "10/second", "1/month", "100/5 minutes"])  # fmt: skip
def test_a_token_buckets_rate_reads_back_as_given(text):
    """The emission interval is a whole number of ns, rounded up (3/second: 333,333,334 ns), so
    limit x T can pass the period given; the rate read back is the roundest period with that T."""
    from shmwin.geometry import token_geometry, token_rate_of

    rate = parse(text)
    geometry = token_geometry(rate, 5, 16)
    back, burst = token_rate_of(geometry)
    assert (str(back), burst) == (str(rate), 5)
    assert token_geometry(back, 5, 16) == geometry


def test_a_token_buckets_odd_period_reads_back_as_one_with_the_same_interval():
    from shmwin.geometry import token_geometry, token_rate_of

    rate = Rate(3, 10**9 + 1)  # T = 333,333,334 ns, as for 3/second: the roundest period wins
    back, _ = token_rate_of(token_geometry(rate, 2, 16))
    assert back == Rate(3, 10**9)
    assert token_geometry(back, 2, 16) == token_geometry(rate, 2, 16)
