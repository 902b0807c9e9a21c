"""Short config labels: only what differs between the configs of a sweep, e.g. `para·hybrid·k5`.

A config key names every stage (`paragraph-1024-0__all-minilm-l6-v2__lancedb__hybrid-rrf-a0.5-k5__none-k5__
extractive`): exact, but views cut it in the middle, where configs of one sweep look identical. A label
keeps, per stage whose setting varies across the sweep, the shortest leading part of that stage's key that
tells its settings apart, plus `k<top_k>` when top_k varies. The full key stays beside it (metadata, tags).
"""

from __future__ import annotations

from collections.abc import Sequence

from rag_core.common.fingerprint import short_hash
from rag_core.planning.spec import RagConfig
from rag_core.planning.stages import partition_key

SEPARATOR = "·"
_WORDS = {
    "paragraph": "para",
    "recursive": "rec",
    "sentence": "sent",
    "semantic": "sem",
    "extractive": "extr",
}


def _stage_keys(c: RagConfig) -> list[str]:
    return [c.chunking.key, c.embedding.key, c.index.key, c.retrieval.key, c.rerank.key, c.generation.key]


def _shortest_unique(keys: set[str]) -> dict[str, str]:
    """Each key's shortest leading run of '-'-separated parts that no other key starts with the same way."""
    parts = {k: k.split("-") for k in keys}
    out = {}
    for k, p in parts.items():
        n = 1
        while n < len(p) and any(q[:n] == p[:n] for o, q in parts.items() if o != k):
            n += 1
        out[k] = "-".join([_WORDS.get(p[0], p[0]), *p[1:n]])
    return out


def short_labels(configs: Sequence[RagConfig]) -> dict[str, str]:
    """config key -> a short label, unique within `configs`."""
    keys = [partition_key("evaluations", c) for c in configs]
    per_stage = list(zip(*(_stage_keys(c) for c in configs), strict=True))
    varied = [i for i, values in enumerate(per_stage) if len(set(values)) > 1]
    short = {i: _shortest_unique(set(per_stage[i])) for i in varied}
    top_ks = {c.retrieval.top_k for c in configs}
    labels = {}
    for key, c, stage_keys in zip(keys, configs, zip(*per_stage, strict=True), strict=True):
        parts = [short[i][stage_keys[i]] for i in varied]
        if len(top_ks) > 1:
            parts.append(f"k{c.retrieval.top_k}")
        labels[key] = SEPARATOR.join(parts) or f"{c.retrieval.mode}{SEPARATOR}k{c.retrieval.top_k}"
    seen: dict[str, int] = {}
    for label in labels.values():
        seen[label] = seen.get(label, 0) + 1
    # settings no stage key shows (a prompt's wording of the same model) can leave two configs alike
    return {k: (v if seen[v] == 1 else f"{v}{SEPARATOR}{short_hash(k, 4)}") for k, v in labels.items()}
