"""What one LLM call returns (text or error, attempts, latency, tokens, cost), and the interface the
pure stages call an LLM through (resources/llm.LLMClient implements it with litellm)."""

from __future__ import annotations

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
