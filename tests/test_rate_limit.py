"""rag_core/common/rate_limit.py on a fake clock: request starts spaced evenly, a quota shared per provider."""

from __future__ import annotations

import pytest

from rag_core.common.rate_limit import RateLimiter, limiter


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def test_a_burst_is_spread_evenly_and_an_idle_limiter_lets_the_next_call_through():
    clock = FakeClock()
    rl = RateLimiter(120, clock=clock, sleep=clock.sleep)  # one start per 0.5 s
    waits = [rl.wait() for _ in range(4)]
    assert waits == [0.0, 0.5, 0.5, 0.5] and clock.now == 101.5
    clock.now += 10  # idle: no debt, no credit for the idle time beyond the next slot
    assert rl.wait() == 0.0
    assert rl.wait() == 0.5


def test_the_limiter_is_shared_per_provider_and_rate():
    assert limiter("openai https://a", 60) is limiter("openai https://a", 60)
    assert limiter("openai https://a", 60) is not limiter("openai https://b", 60)
    assert limiter("openai https://a", 60) is not limiter("openai https://a", 30)


@pytest.mark.parametrize("rate", [0, -5])
def test_a_rate_that_is_not_positive_is_refused(rate):
    with pytest.raises(ValueError, match="must be > 0"):
        RateLimiter(rate)
