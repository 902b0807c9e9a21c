"""Iterative retrieval scored hop by hop (rag_core/retrieval/hops.py), per question from its trajectory:
recall of the gold documents after each hop, the hops made, and whether the loop stopped at the right time.

- `recall_hop_h`: the share of the gold documents found by hops 1..h (after the loop stopped: its final
  recall, so every config has a value at every hop up to its max_hops).
- `stop_correct`: 1 when the loop stopped at the hop that completed the gold documents, or went on to
  max_hops without completing them; 0 when it stopped with a gold document missing while hops were left,
  or went on after every gold document was found.
- `wasted_hops`: hops made after every gold document was found.
Each is undefined (null) for a question without gold documents.
"""

from __future__ import annotations


def hop_scores(hop_doc_ids: list[list[str]], gold: set[str], max_hops: int) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    hops = len(hop_doc_ids)
    if not gold:
        out.update({f"recall_hop_{h}": None for h in range(1, max_hops + 1)})
        return {**out, "stop_correct": None, "wasted_hops": None}
    found: set[str] = set()
    complete_at = None
    for h in range(1, max_hops + 1):
        if h <= hops:
            found |= set(hop_doc_ids[h - 1])
            if complete_at is None and gold <= found:
                complete_at = h
        out[f"recall_hop_{h}"] = len(found & gold) / len(gold)
    if complete_at is not None:
        right = hops == complete_at
    else:
        right = hops == max_hops
    out["stop_correct"] = float(right)
    out["wasted_hops"] = float(hops - complete_at) if complete_at is not None else 0.0
    return out


def hop_columns(max_hops: int) -> list[str]:
    return [*(f"recall_hop_{h}" for h in range(1, max_hops + 1)), "stop_correct", "wasted_hops"]
