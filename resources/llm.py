"""LLM calls through litellm, so any provider works (OpenAI, Anthropic, Ollama, a local server ...).

A failed call (an error status, a reply that is not the protocol, an empty completion, a timeout) is
retried with backoff, or after the wait the provider asks for (a 429's `Retry-After`, up to
`max_retry_after_s`); if every attempt fails the error is returned, never raised, so one bad query never
halts a batch and is never silently dropped. A call takes at most (max_retries + 1) × timeout_s plus the
waits. The latency recorded is the time spent in calls, without the waits between them: a rate limit is
the sweep's burst of requests, not the model's speed.
"""

from __future__ import annotations

import email.utils
import time

import dagster as dg

from rag_core.common.completion import Completion
from resources.environment import redact
from resources.llm_cache import call_key, open_cache


class EmptyCompletion(RuntimeError):
    pass


def price(model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
    """litellm's price of a call in USD, or None for a model it has no price for (local, or a custom name)."""
    import litellm

    try:
        cost = litellm.cost_per_token(
            model=model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
        )
        return float(sum(cost))
    except Exception:  # litellm raises several error types for an unknown model
        return None


def retry_after_s(error: Exception) -> float | None:
    """The wait a provider asked for in its reply's Retry-After header (seconds or an HTTP date)."""
    response = getattr(error, "response", None)
    headers = getattr(error, "litellm_response_headers", None) or getattr(response, "headers", None)
    value = headers.get("retry-after") if headers is not None else None
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        when = email.utils.parsedate_tz(value)
        return max(0.0, email.utils.mktime_tz(when) - time.time()) if when else None


class LLMClient(dg.ConfigurableResource):
    """`api_base`/`api_key` are passed to litellm when set; otherwise litellm reads the provider's usual
    environment variables (OPENAI_API_KEY, ANTHROPIC_API_KEY, OLLAMA_API_BASE ...). Give `api_key` as
    `dg.EnvVar(...)`: Dagster then stores the variable's name in its run records, never the key."""

    api_base: str | None = None
    api_key: str | None = None
    timeout_s: float = 60.0
    max_retries: int = 2
    retry_backoff_s: float = 1.0
    max_retry_after_s: float = 60.0  # the longest Retry-After honoured; a longer one waits this long
    max_concurrency: int = 4  # calls in flight at once within a stage
    # the provider's quota: requests start at most this often (all stages and threads of a process share
    # it per provider and endpoint, rag_core/common/rate_limit.py); None: as fast as max_concurrency allows
    requests_per_minute: float | None = None
    cache_path: str | None = None  # the call cache and ledger (resources/llm_cache.py); None: no cache

    def complete(
        self,
        model: str,
        prompt: str,
        temperature: float = 0.0,
        max_tokens: int = 128,
        sample: int = 0,
        reask: bool = False,
    ) -> Completion:
        """`sample`: which draw of a random call (its own cache entry); `reask`: ask the provider even when
        the cache holds the call (a forced re-evaluation), and record the new answer."""
        if self.cache_path is None:
            return self._call(model, prompt, temperature, max_tokens)
        cache = open_cache(self.cache_path)
        key = call_key(model, self.api_base, prompt, temperature, max_tokens, sample)
        if not reask and (hit := cache.get(key)) is not None:
            return hit
        out = self._call(model, prompt, temperature, max_tokens)
        cache.put(key, model, out)  # a failed call is not stored: it is asked again next time
        return out

    def _quota(self, model: str):
        """The rate limiter of the model's provider and endpoint, if a rate is set."""
        if not self.requests_per_minute:
            return None
        import litellm

        from rag_core.common.rate_limit import limiter

        try:
            provider = litellm.get_llm_provider(model, api_base=self.api_base)[1]
        except Exception:  # a model litellm cannot place: its prefix names the provider
            provider = model.split("/", 1)[0]
        return limiter(f"{provider} {self.api_base or ''}", self.requests_per_minute)

    def _call(self, model: str, prompt: str, temperature: float, max_tokens: int) -> Completion:
        import litellm

        litellm.suppress_debug_info = True  # no "Give Feedback" banner on stdout for every failed call
        t0 = time.perf_counter()
        error, waited = None, 0.0
        quota = self._quota(model)
        for attempt in range(1, self.max_retries + 2):
            if quota is not None:
                waited += quota.wait()
            try:
                resp = litellm.completion(
                    model=model,
                    messages=[{"role": "user", "content": prompt}],
                    temperature=temperature,
                    max_tokens=max_tokens,
                    timeout=self.timeout_s,
                    api_base=self.api_base,
                    api_key=self.api_key,
                    num_retries=0,  # retries are ours, counted per query
                )
                text = (resp.choices[0].message.content or "").strip()
                if not text:  # a reply with no text is a failed call, not an empty answer to score
                    raise EmptyCompletion("the model returned an empty completion")
                usage = getattr(resp, "usage", None)
                try:
                    cost = float(litellm.completion_cost(completion_response=resp) or 0.0)
                except Exception:  # unknown or local model: litellm has no price for it
                    cost = 0.0
                return Completion(
                    text=text,
                    error=None,
                    attempts=attempt,
                    latency_ms=(time.perf_counter() - t0 - waited) * 1000,
                    prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
                    completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
                    cost_usd=cost,
                )
            except Exception as e:  # litellm maps provider errors onto many exception types
                error = redact(f"{type(e).__name__}: {e}", self.api_key)[:500]
                if attempt <= self.max_retries:
                    asked = retry_after_s(e)
                    wait = (
                        self.retry_backoff_s * attempt
                        if asked is None
                        else min(asked, self.max_retry_after_s)
                    )
                    time.sleep(wait)
                    waited += wait
        return Completion(
            text="",
            error=error,
            attempts=self.max_retries + 1,
            latency_ms=(time.perf_counter() - t0 - waited) * 1000,
        )


class Reasking:
    """An LLM client that asks the provider again for every call (recorded in the call cache, never
    answered from it): what a forced re-evaluation (the nightly schedule, `--force`) calls, so it
    measures today's provider instead of replaying yesterday's answers."""

    def __init__(self, llm: LLMClient):
        self._llm = llm

    def complete(self, *args, **kwargs) -> Completion:
        return self._llm.complete(*args, **{**kwargs, "reask": True})

    def __getattr__(self, name: str):
        return getattr(self._llm, name)


def llm_from_env(cache_path: str | None) -> LLMClient:
    """The LLM client the environment configures, as a sweep's steps get it, for use outside a Dagster run
    (a shipped model, `generate-qa`): its key is read from the environment now, never stored."""
    from resources.environment import env_number, llm_requests_per_minute, text

    return LLMClient(
        api_base=text("RAG_LLM_API_BASE"),
        api_key=text("RAG_LLM_API_KEY"),
        cache_path=cache_path,
        timeout_s=env_number("RAG_LLM_TIMEOUT_S", 60.0, float, positive=True),
        max_retries=env_number("RAG_LLM_MAX_RETRIES", 2, int),
        max_concurrency=max(1, env_number("RAG_LLM_MAX_CONCURRENCY", 4, int)),
        requests_per_minute=llm_requests_per_minute(),
    )
