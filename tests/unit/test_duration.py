import pytest

from shmwin.rate import format_ns, to_ns

pytestmark = pytest.mark.unit

S = 1_000_000_000


@pytest.mark.parametrize(
    ("spelling", "ns"),
    [
        (60, 60 * S), (1.5, 1_500_000_000), ("90s", 90 * S), ("5m", 300 * S), ("1h", 3600 * S),
        ("1d", 86400 * S), ("500ms", S // 2), (" 2 s ", 2 * S), ("0.5s", S // 2), ("250us", 250_000),
        ("10ns", 10),
    ],
)  # fmt: skip
def test_spellings(spelling, ns):
    assert to_ns(spelling) == ns


@pytest.mark.parametrize(
    "bad", ["", "s", "5", "5 minutes", "-1s", "1y", "0s", 0, -3, float("inf"), True, None, "1e3s"]
)
def test_wrong_spellings_are_value_errors(bad):
    with pytest.raises(ValueError):
        to_ns(bad)


def test_format_is_shortest_exact():
    assert format_ns(60 * S) == "1m"
    assert format_ns(90 * S) == "90s"
    assert format_ns(1_500_000) == "1500us"
    assert format_ns(7) == "7ns"


@pytest.mark.parametrize("span", [1e30, 2**63, "99999999999d", "9223372037s"])
def test_a_duration_beyond_int64_nanoseconds_names_the_bound(span):
    with pytest.raises(ValueError, match=r"too long: at most 9223372036 seconds \(2\*\*63-1 ns\)"):
        to_ns(span, "span")
    assert to_ns("9223372036s") == 9223372036 * S


def test_a_window_with_a_huge_span_is_a_value_error_before_anything_is_made(name):
    import shmwin

    with pytest.raises(ValueError, match="span 1e\\+30 is too long"):
        shmwin.Window(name, span=1e30, buckets=1)
    assert name not in shmwin.names()


def test_long_decimal_strings_are_exact():
    assert to_ns("0.000000001s") == 1
    assert to_ns("1.5h") == 5400 * S
