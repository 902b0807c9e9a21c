"""Successive halving over questions: every candidate answers a small share of the QA set; at each rung,
candidates a paired sign-flip test shows to be worse than the leader (Holm-corrected) are dropped, and the survivors
answer more questions, until the full set, one survivor or the budget. A question already evaluated for a
candidate is never evaluated again: each rung asks only for the questions it adds.

Pure: `propose()` returns (candidate, question ids to evaluate); `observe()` takes that candidate's
per-question scores. The caller decides how to evaluate (a sweep's stages, or a table).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np
import polars as pl

from rag_core.common.fingerprint import fingerprint
from rag_core.metrics.stats import holm, sign_flip_p
from rag_core.search.space import Candidate


def next_rung(size: int, growth: float, total: int) -> int:
    """The questions of the rung after one of `size`: `growth` times more, at most all `total`."""
    return min(total, int(np.ceil(size * growth)))


def question_order(question_ids: Sequence[str], seed: int) -> list[str]:
    """The QA set in the order rungs take it: a seeded shuffle, so every rung is a random sample and a
    larger rung holds every question of a smaller one."""
    order = sorted(question_ids)
    random.Random(seed).shuffle(order)
    return order


def question_subset(qa: pl.DataFrame, n: int, seed: int) -> pl.DataFrame:
    """The QA set's rows of a rung of `n` questions (in the file's order)."""
    if n >= qa.height:
        return qa
    keep = question_order(qa["query_id"].to_list(), seed)[:n]
    return qa.filter(pl.col("query_id").is_in(keep))


def subset_fingerprint(qa_fp: str, n: int, seed: int) -> str:
    """The fingerprint of a rung's QA subset: every artifact computed from it differs from the full set's."""
    return fingerprint("qa_subset", qa_fp, n, seed)


def question_scores(per_query: pl.DataFrame, weights: dict[str, float]) -> dict[str, float]:
    """Each question's weighted score over the metrics it has (an undefined metric leaves its weight out),
    the per-question quantity halving's paired test compares."""
    metrics = [m for m in weights if m in per_query.columns]
    w = np.array([weights[m] for m in metrics], dtype=float)
    values = per_query.select(metrics).fill_null(float("nan")).to_numpy().astype(float)
    have = ~np.isnan(values)
    total = np.where(have, values, 0.0) @ w
    weight = have.astype(float) @ w
    score = np.divide(total, weight, out=np.zeros_like(total), where=weight > 0)
    return dict(zip(per_query["query_id"].to_list(), score.tolist(), strict=True))


class Halving:
    def __init__(
        self,
        candidates: Sequence[Candidate],
        question_ids: Sequence[str],
        start: int = 10,
        growth: float = 2.0,
        alpha: float = 0.05,
        budget: int | None = None,  # question evaluations in all
        seed: int = 0,
    ):
        self.candidates = list(candidates)
        self.order = question_order(question_ids, seed)
        self.size = min(start, len(self.order))
        self.growth, self.alpha, self.budget, self.seed = growth, alpha, budget, seed
        self.alive = set(range(len(self.candidates)))
        self.scores: dict[int, dict[str, float]] = {i: {} for i in self.alive}
        self.dropped: dict[int, int] = {}  # candidate -> rung size it was dropped at
        self.spent = 0
        self._pending: set[int] = set()

    def _questions(self) -> list[str]:
        return self.order[: self.size]

    def propose(self) -> tuple[Candidate, list[str]] | None:
        """The next candidate and the questions of the current rung it has not answered yet."""
        if self.done:
            return None
        for i in sorted(self.alive - self._pending):
            todo = [q for q in self._questions() if q not in self.scores[i]]
            if todo:
                if self.budget is not None and self.spent + len(todo) > self.budget:
                    self.budget = self.spent  # out of budget: stop at this rung
                    return None
                self._pending.add(i)
                return self.candidates[i], todo
        return None

    def observe(self, c: Candidate, scores: dict[str, float]) -> None:
        i = self.candidates.index(c)
        new = {q: s for q, s in scores.items() if q not in self.scores[i]}
        self.scores[i].update(new)
        self.spent += len(new)
        self._pending.discard(i)
        if all(all(q in self.scores[j] for q in self._questions()) for j in self.alive):
            self._close_rung()

    def _matrix(self, ids: list[int]) -> np.ndarray:
        qs = self._questions()
        return np.array([[self.scores[i][q] for q in qs] for i in ids], dtype=float)

    def _close_rung(self) -> None:
        ids = sorted(self.alive)
        m = self._matrix(ids)
        leader = int(np.argmax(m.mean(axis=1)))
        others = [k for k in range(len(ids)) if k != leader]
        if others:
            rng = np.random.default_rng(self.seed)
            adjusted = holm([sign_flip_p(m[leader] - m[k], rng) for k in others])
            for k, p in zip(others, adjusted, strict=True):
                if p < self.alpha and m[k].mean() < m[leader].mean():
                    self.alive.discard(ids[k])
                    self.dropped[ids[k]] = self.size
        if self.size < len(self.order) and len(self.alive) > 1:
            self.size = next_rung(self.size, self.growth, len(self.order))

    @property
    def done(self) -> bool:
        full = self.size >= len(self.order) and all(
            all(q in self.scores[j] for q in self.order) for j in self.alive
        )
        out_of_budget = self.budget is not None and self.spent >= self.budget
        return full or len(self.alive) == 1 and self._rung_complete() or out_of_budget

    def _rung_complete(self) -> bool:
        return all(all(q in self.scores[j] for q in self._questions()) for j in self.alive)

    def best(self) -> Candidate:
        """The survivor with the highest mean over the questions every survivor answered."""
        ids = sorted(self.alive)
        common = [q for q in self.order if all(q in self.scores[i] for i in ids)]
        means = [np.mean([self.scores[i][q] for q in common]) if common else 0.0 for i in ids]
        return self.candidates[ids[int(np.argmax(means))]]
