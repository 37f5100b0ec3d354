"""local_share._runs: when a host's fallback is active, and since when, from its record of
calls that met the backend away (per second for 10 minutes, then per minute for a day)."""

from __future__ import annotations

from shmwin.local_share import ACTIVE_S, GAP_S, _runs

WALL_S = 2_000_000_000.0
FINE, COARSE = 600, 1440


def record(seconds_ago: list[int] = (), minutes_ago: list[int] = ()) -> tuple[list[int], list[int]]:  # type: ignore[assignment]
    fine, coarse = [0] * FINE, [0] * COARSE
    for s in seconds_ago:
        fine[FINE - 1 - s] += 1
        coarse[COARSE - 1 - s // 60] += 1
    for m in minutes_ago:
        coarse[COARSE - 1 - m] += 1
    return fine, coarse


def test_no_failure_no_status():
    assert _runs(*record(), WALL_S) is None


def test_a_failure_now_is_active_since_now():
    status = _runs(*record([0]), WALL_S)
    assert status == {"active": True, "since": WALL_S, "last": WALL_S, "failures": 1}


def test_a_run_with_gaps_shorter_than_gap_s_is_one_run():
    ago = [0, 1, GAP_S - 1 + 1, 2 * GAP_S]  # gaps of GAP_S at most
    status = _runs(*record(ago), WALL_S)
    assert status is not None and status["since"] == WALL_S - 2 * GAP_S


def test_a_longer_quiet_spell_ends_the_run():
    status = _runs(*record([3, 3 + GAP_S + 1]), WALL_S)
    assert status is not None and status["since"] == WALL_S - 3 and status["last"] == WALL_S - 3


def test_inactive_once_no_call_met_the_backend_away_for_active_s():
    status = _runs(*record([ACTIVE_S, ACTIVE_S + 1]), WALL_S)
    assert status is not None and not status["active"]
    assert status["last"] == WALL_S - ACTIVE_S and status["since"] == WALL_S - ACTIVE_S - 1


def test_a_run_longer_than_ten_minutes_goes_on_in_the_minute_ring():
    seconds = list(range(0, FINE, 20))  # every 20 s for the whole 10 minutes
    status = _runs(*record(seconds, minutes_ago=[10, 11, 12, 30]), WALL_S)
    assert status is not None and status["active"]
    assert status["since"] == WALL_S - 12 * 60  # minute 30 is past a quiet spell


def test_failures_count_the_last_minute_only():
    status = _runs(*record([0, 10, 59, 60, 61]), WALL_S)
    assert status is not None and status["failures"] == 3
