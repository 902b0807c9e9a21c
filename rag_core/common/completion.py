"""What one LLM call returns (text or error, attempts, latency, tokens, cost), and the interface the
pure stages call an LLM through (resources/llm.LLMClient implements it with litellm)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol


@dataclass
class Completion:
    text: str
    error: str | None
    attempts: int
    latency_ms: float
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cached: bool = False  # answered from the call cache: no provider call, nothing spent


class Completer(Protocol):
    max_concurrency: int

    def complete(
        self, model: str, prompt: str, temperature: float = 0.0, max_tokens: int = 128
    ) -> Completion: ...


NO_USAGE = {"tokens": 0, "cost_usd": 0.0, "ms": 0.0}


def usage(c: Completion) -> dict:
    """Tokens, cost and latency of one LLM call, for the per-stage cost metrics."""
    return {"tokens": c.prompt_tokens + c.completion_tokens, "cost_usd": c.cost_usd, "ms": c.latency_ms}


def failure_summary(errors: Iterable[str | None]) -> str:
    """Failed calls' errors (already redacted) in one line: the count of each kind (the exception's name,
    which litellm maps from the provider's answer) and the first one's cause, so that a wrong key, a bad
    timeout or an outage is told apart without a log. Empty when nothing failed."""
    errors = [e for e in errors if e]
    if not errors:
        return ""
    kinds = Counter(e.split(":", 1)[0].strip() or "error" for e in errors)
    counts = ", ".join(f"{n} {kind}" for kind, n in kinds.most_common())
    first = " ".join(errors[0].split())
    return f"{counts}; first: {first[:300]}"
