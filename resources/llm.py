"""LLM calls through litellm, so any provider works (OpenAI, Anthropic, Ollama, a local server ...).

A failed call (an error status, a reply that is not the protocol, an empty completion, a timeout) is
retried with backoff, or after the wait the provider asks for (a 429's `Retry-After`, up to
`max_retry_after_s`); if every attempt fails the error is returned, never raised, so one bad query never
halts a batch and is never silently dropped. A call takes at most (max_retries + 1) × timeout_s plus the
waits. The latency recorded is the time spent in calls, without the waits between them: a rate limit is
the sweep's burst of requests, not the model's speed. Nor is the client's start-up: the first call of a
model and endpoint in a process imports the provider's SDK and builds its client (seconds, against tens
of milliseconds a call), so a call to a local port that refuses it warms the client first, untimed, and
its time is reported apart (`startup_ms`), never as a question's latency.
"""

from __future__ import annotations

import email.utils
import functools
import socket
import threading
import time
from concurrent.futures import Future

import dagster as dg

from rag_core.common.completion import Completion
from rag_core.common.in_flight import in_flight
from resources.environment import redact
from resources.llm_cache import call_key, open_cache


class EmptyCompletion(RuntimeError):
    pass


# (cache, call key) -> the answer of that call while one thread asks it: the others wait for it
_FLYING: dict[tuple[str, str], Future] = {}
_FLYING_LOCK = threading.Lock()
# (model, api_base) -> the start-up of its client in this process (ms), measured by the warm-up call
_STARTUP_MS: dict[tuple[str, str | None], float] = {}
_WARMING = threading.Lock()
WARM_UP_TIMEOUT_S = 10.0  # a refused connection returns at once; this bounds a provider that blocks


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


@functools.cache
def endpoint_of(model: str, api_base: str | None) -> str:
    """The model's provider and endpoint: what its rate limit and its calls in flight are counted by."""
    import litellm

    try:
        provider = litellm.get_llm_provider(model, api_base=api_base)[1]
    except Exception:  # a model litellm cannot place: its prefix names the provider
        provider = model.split("/", 1)[0]
    return f"{provider} {api_base or ''}"


def _build_reply_types(model: str) -> None:
    """Build what a reply's first parse builds (pydantic completes the SDK's reply types on first use,
    a quarter of a second): a canned reply through litellm's and the OpenAI SDK's types, no request."""
    import litellm

    litellm.completion(model=model, messages=[{"role": "user", "content": "ping"}], mock_response="pong")
    try:
        from openai.types.chat import ChatCompletion
    except ImportError:  # a provider litellm reaches without the OpenAI SDK
        return
    message = {"role": "assistant", "content": "pong"}
    ChatCompletion.construct(
        id="warm-up",
        object="chat.completion",
        created=0,
        model=model,
        choices=[{"index": 0, "message": message, "finish_reason": "stop"}],
        usage={"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    )


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
    max_concurrency: int = 4  # calls in flight at once to one provider and endpoint, over the process
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
        if reask:
            out = self._call(model, prompt, temperature, max_tokens)
            cache.put(key, model, out)
            return out
        if (hit := cache.get(key)) is not None:
            return hit
        # the same call already out from another thread (two configs side by side whose retrievals gave one
        # prompt): wait for its answer instead of asking the provider twice
        with _FLYING_LOCK:
            flying = _FLYING.get((self.cache_path, key))
            leads = flying is None
            if leads:
                flying = _FLYING[(self.cache_path, key)] = Future()
        if not leads:
            return flying.result()
        try:
            out = cache.get(key)  # stored by a call that ended between the first look and now
            if out is None:
                out = self._call(model, prompt, temperature, max_tokens)
                cache.put(key, model, out)  # a failed call is not stored: it is asked again next time
            flying.set_result(out)
            return out
        except BaseException as e:
            flying.set_exception(e)
            raise
        finally:
            with _FLYING_LOCK:
                _FLYING.pop((self.cache_path, key), None)

    def _endpoint(self, model: str) -> str:
        return endpoint_of(model, self.api_base)

    def _quota(self, endpoint: str):
        """The rate limiter of the provider and endpoint, if a rate is set."""
        if not self.requests_per_minute:
            return None
        from rag_core.common.rate_limit import limiter

        return limiter(endpoint, self.requests_per_minute)

    def warm(self, model: str) -> float | None:
        """Start the client of `model`'s provider, once per process and endpoint, untimed by any question:
        a call of one token to a local port that refuses it, which imports the SDK and builds its client.
        Returns its time in ms (None: already started here). Callers wait for it (a lock), so concurrent
        first calls do not each pay for the start-up in their latency."""
        import litellm

        key = (model, self.api_base)
        if key in _STARTUP_MS:
            return None
        litellm.suppress_debug_info = True  # no "Give Feedback" banner for the refused call
        with _WARMING:
            if key in _STARTUP_MS:
                return None
            t0 = time.perf_counter()
            # a port bound and never listened on: the call builds the provider's client, then its request
            # is refused at once, so the warm-up costs no request, quota or money at the real endpoint
            with socket.socket() as closed:
                closed.bind(("127.0.0.1", 0))
                try:
                    litellm.completion(
                        model=model,
                        messages=[{"role": "user", "content": "ping"}],
                        max_tokens=1,
                        timeout=WARM_UP_TIMEOUT_S,
                        api_base=f"http://127.0.0.1:{closed.getsockname()[1]}/v1",
                        api_key=self.api_key or "warm-up",
                        num_retries=0,
                        max_retries=0,
                    )
                except Exception:  # refused, as meant
                    pass
            _build_reply_types(model)
            _STARTUP_MS[key] = (time.perf_counter() - t0) * 1000
            return _STARTUP_MS[key]

    def startup_ms(self, model: str) -> float | None:
        """The start-up of `model`'s client at this endpoint in this process (ms), if it was started."""
        return _STARTUP_MS.get((model, self.api_base))

    def _call(self, model: str, prompt: str, temperature: float, max_tokens: int) -> Completion:
        import litellm

        litellm.suppress_debug_info = True  # no "Give Feedback" banner on stdout for every failed call
        self.warm(model)  # before the clock starts: start-up is no question's latency
        t0 = time.perf_counter()
        error, waited = None, 0.0
        endpoint = self._endpoint(model)
        quota = self._quota(endpoint)
        for attempt in range(1, self.max_retries + 2):
            if quota is not None:
                waited += quota.wait()
            try:
                # the provider's calls in flight, counted over every stage and config of this process
                with in_flight(endpoint, self.max_concurrency) as queued:
                    waited += queued
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
