"""When ``StreamClient.open`` tries a busy start again (chattts_client.policy.BusyBackoff):
the server's hint or the doubling backoff, whichever is longer, within the tries and
the time the caller gave."""

from __future__ import annotations

import pytest
from chattts_client.errors import BusyError
from chattts_client.policy import BusyBackoff


def busy(retry_after_ms: int | None) -> BusyError:
    body = {} if retry_after_ms is None else {"retry_after_ms": retry_after_ms}
    return BusyError("busy", "the engine is at capacity", body=body)


@pytest.mark.parametrize(
    ("hints_ms", "expected_s"),
    [
        # No hint: 0.25 s, doubling, up to 10 s.
        ([None] * 7, [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 10.0]),
        # A hint longer than the backoff wins; the backoff doubles all the same.
        ([2000, 2000, 2000, 100], [2.0, 2.0, 2.0, 2.0]),
        ([100, 100, 100, 100], [0.25, 0.5, 1.0, 2.0]),
    ],
)
def test_each_wait_is_the_hint_or_the_backoff_whichever_is_longer(
    hints_ms: list[int | None], expected_s: list[float]
) -> None:
    """Refused at once each time, with plenty of tries and time: the waits in order."""
    backoff = BusyBackoff(attempts=len(hints_ms) + 1, within_s=1000)
    waits = [backoff.wait_s(busy(hint), attempt, now=0.0)
             for attempt, hint in enumerate(hints_ms, start=1)]  # fmt: skip
    assert waits == expected_s


def test_the_last_try_gives_up_without_waiting() -> None:
    """``attempts`` tries in all: the refusal of the last one is final (1: the first)."""
    assert BusyBackoff(attempts=1, within_s=60).wait_s(busy(None), 1, now=0.0) is None
    backoff = BusyBackoff(attempts=3, within_s=60)
    assert [backoff.wait_s(busy(None), n, now=0.0) for n in (1, 2, 3)] == [0.25, 0.5, None]


def test_no_wait_ends_later_than_within_s_after_the_first_refusal() -> None:
    """A wait that would end past ``within_s`` from the first refusal is not made."""
    backoff = BusyBackoff(attempts=10, within_s=5.0)
    assert backoff.wait_s(busy(2000), 1, now=100.0) == 2.0  # ends at 102
    assert backoff.wait_s(busy(2000), 2, now=102.5) == 2.0  # ends at 104.5
    assert backoff.wait_s(busy(2000), 3, now=104.6) is None  # would end at 106.6


@pytest.mark.parametrize(("attempts", "within_s"), [(0, 10.0), (-1, 10.0), (3, -0.1)])
def test_bad_limits_are_refused(attempts: int, within_s: float) -> None:
    """Fewer than one try, or a negative time, is a ValueError naming open's arguments."""
    with pytest.raises(ValueError, match="attempts >= 1 and busy_within_s >= 0"):
        BusyBackoff(attempts, within_s)
