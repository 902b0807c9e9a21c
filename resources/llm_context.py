"""How many tokens a model reads, and a text's tokens by its own tokenizer, for `rag-sweep plan`.

A hosted model's context is in litellm's model map. A local server's is what it was started with, which
only it knows: its `/models` list says so (llama.cpp: `meta.n_ctx`; vLLM: `max_model_len`; others:
`context_length`), and a llama.cpp server counts a text's tokens itself (`/tokenize`). Elsewhere litellm's
counter (the model's tokenizer where litellm has it, else OpenAI's cl100k: an estimate). Never raises: a
server that does not answer leaves the context unknown and the prompts unchecked.
"""

from __future__ import annotations

import functools

CONTEXT_KEYS = ("n_ctx", "max_model_len", "context_length", "context_window")
TIMEOUT_S = 3.0


class ModelContext:
    def __init__(self, api_base: str | None = None, api_key: str | None = None):
        self.api_base, self.api_key = api_base, api_key

    def _get(self, path: str) -> dict | None:
        import httpx

        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            reply = httpx.get(f"{self.api_base.rstrip('/')}{path}", headers=headers, timeout=TIMEOUT_S)
            return reply.json() if reply.status_code == 200 else None
        except Exception:  # unreachable, or not JSON: the endpoint does not say
            return None

    @functools.cached_property
    def _served(self) -> dict[str, dict]:
        """The endpoint's models by name (its `/models` list), with what each entry says."""
        if not self.api_base:
            return {}
        listed = self._get("/models") or {}
        return {str(m.get("id")): m for m in listed.get("data", []) if isinstance(m, dict)}

    def _served_entry(self, model: str) -> dict | None:
        name = model.split("/", 1)[1] if "/" in model else model
        return self._served.get(name) or self._served.get(model)

    def window(self, model: str) -> tuple[int | None, str]:
        """(the tokens the model reads, where that was learnt); None when neither litellm nor the
        endpoint says."""
        entry = self._served_entry(model)
        if entry is not None:
            for place in (entry.get("meta") or {}, entry):
                for key in CONTEXT_KEYS:
                    if isinstance(place.get(key), int) and place[key] > 0:
                        return place[key], f"the server's {key}"
        import litellm

        try:
            known = litellm.get_model_info(model).get("max_input_tokens")
        except Exception:  # a model litellm does not know
            known = None
        return (int(known), "litellm's model map") if known else (None, "")

    def count(self, model: str, text: str) -> int:
        """The text's tokens: the llama.cpp server's own tokenizer where it serves the model, else litellm's."""
        entry = self._served_entry(model)
        if entry is not None and entry.get("owned_by") == "llamacpp":
            counted = self._tokenize(text)
            if counted is not None:
                return counted
        import litellm

        return int(litellm.token_counter(model=model, text=text))

    def _tokenize(self, text: str) -> int | None:
        import httpx

        root = self.api_base.rstrip("/").removesuffix("/v1")
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            reply = httpx.post(f"{root}/tokenize", json={"content": text}, headers=headers, timeout=TIMEOUT_S)
            return len(reply.json()["tokens"]) if reply.status_code == 200 else None
        except Exception:  # an older server without /tokenize
            return None
