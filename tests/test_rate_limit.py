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


def test_a_long_wait_is_said_once_with_how_long_and_why(caplog):
    """A slow quota waited in silence: 0.001 requests per minute held each call ~17 hours, saying nothing."""
    clock = FakeClock()
    rl = RateLimiter(6, clock=clock, sleep=clock.sleep, name="openai http://llm")  # one start per 10 s
    with caplog.at_level("WARNING", logger="rag_core.common.rate_limit"):
        assert [rl.wait() for _ in range(3)] == [0.0, 10.0, 10.0]
    (said,) = caplog.messages
    assert said.startswith("waiting 10 s for an LLM call's turn: the rate limit of openai http://llm (6 ")
    assert "$RAG_LLM_REQUESTS_PER_MINUTE" in said and "one call every 10 s" in said
    caplog.clear()
    fast = RateLimiter(120, clock=clock, sleep=clock.sleep)
    with caplog.at_level("WARNING", logger="rag_core.common.rate_limit"):
        [fast.wait() for _ in range(4)]
    assert caplog.messages == []  # half a second: nothing to say


@pytest.mark.parametrize("rate", ["0.001", "0.5"])
def test_a_rate_below_one_request_per_minute_is_refused_naming_the_variable(rate, monkeypatch, tmp_path):
    from rag_core.planning.spec import SpecError
    from resources import build_resources
    from resources.llm import llm_from_env

    monkeypatch.setenv("RAG_LLM_REQUESTS_PER_MINUTE", rate)
    said = rf"^\$RAG_LLM_REQUESTS_PER_MINUTE='{rate}': one call every [\d,]+ s; set at least 1 request"
    with pytest.raises(SpecError, match=said):
        build_resources(str(tmp_path))
    with pytest.raises(SpecError, match=said):
        llm_from_env(None)
    monkeypatch.setenv("RAG_LLM_REQUESTS_PER_MINUTE", "0")  # no limit, as before
    assert llm_from_env(None).requests_per_minute is None
    monkeypatch.setenv("RAG_LLM_REQUESTS_PER_MINUTE", "1")
    assert llm_from_env(None).requests_per_minute == 1.0
