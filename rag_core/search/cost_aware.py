"""Cost-aware search: the next candidate is the one with the highest expected improvement per unit of the
cost it adds now (the space's cost model: a candidate sharing a built prefix pays only for its new stages),
among those that still fit the budget in cost units; it stops when none fits.

The surrogate is a Bayesian linear model of the first objective on one-hot features: one per dimension value
(effects shared across the whole space, so what one index teaches about a generator carries to every index)
and one per expensive prefix (what is particular to an index). It is exact, fast and deterministic over a
few hundred candidates, and it learns a structured space from few evaluations, which is where the savings
come from: every evaluation pays its LLM calls, so reaching the same choice in fewer evaluations is the only
way to fewer calls; fewer index builds come from preferring candidates over indexes that exist.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import numpy as np

from rag_core.search.cost import Cost, CostBudget, CostModel
from rag_core.search.space import Candidate, Space
from rag_core.search.strategies import STRATEGIES, SearchStrategy, Strategy

EVALUATION_WEIGHT = 0.02  # an evaluation's own weight beside its cost units: never free, but cheap
PRIOR_SD = 1.0  # of each effect, in standard deviations of the objective
INDEX_PRIOR_SD = 0.5  # of an index's own deviation from the sum of its settings' effects
NOISE_SD = 0.3  # of an evaluation around the model, in standard deviations of the objective


class CostAware(Strategy):
    """Expected improvement per unit of new cost (index builds, LLM calls, USD) within a budget in those units."""

    def __init__(
        self,
        space: Space,
        seed: int = 0,
        directions: Sequence[str] = ("maximize",),
        budget: CostBudget | None = None,
        evaluation_weight: float = EVALUATION_WEIGHT,
    ):
        super().__init__(space, seed)
        self.sign = -1.0 if directions and directions[0] == "minimize" else 1.0
        self.budget = budget or CostBudget()
        self.costs: CostModel = space.costs()
        self.scales = self.costs.scales()
        self.evaluation_weight = evaluation_weight
        self.spent = Cost()
        self.exhausted: str | None = None  # the budget unit that stopped the search
        self.rng = random.Random(seed)
        self.candidates = space.all()
        self._features = self._encode(self.candidates)

    # ---- the surrogate -------------------------------------------------------------------------------

    def _encode(self, candidates: list[Candidate]) -> np.ndarray:
        columns: list[tuple[str, object]] = [(d, v) for d, values in self.space.dims.items() for v in values]
        index_values = sorted({self.space.index_of(c) for c in candidates}, key=str)
        prior = [PRIOR_SD] * len(columns)
        if self.space.expensive and len(index_values) > 1:
            columns += [("__index__", i) for i in index_values]
            prior += [INDEX_PRIOR_SD] * len(index_values)
        at = {col: j for j, col in enumerate(columns)}
        x = np.zeros((len(candidates), len(columns)))
        for i, c in enumerate(candidates):
            for d in self.space.dims:
                x[i, at[(d, c[d])]] = 1.0
            if ("__index__", self.space.index_of(c)) in at:
                x[i, at[("__index__", self.space.index_of(c))]] = 1.0
        self._prior = np.array(prior)
        return x

    def _posterior(self) -> tuple[np.ndarray, np.ndarray, float]:
        """Mean and standard deviation (standardized units) of every candidate, and the best observed."""
        rows = [i for i, c in enumerate(self.candidates) if self.space.key(c) in self.seen]
        y = np.array([self.sign * self.seen[self.space.key(self.candidates[i])][0] for i in rows])
        mu0, sd0 = float(y.mean()), float(y.std()) or 1.0
        z = (y - mu0) / sd0
        x = self._features[rows]
        precision = np.diag(1.0 / self._prior**2) + x.T @ x / NOISE_SD**2
        cov = np.linalg.inv(precision)
        w = cov @ x.T @ z / NOISE_SD**2
        mean = self._features @ w
        sd = np.sqrt(np.maximum(np.einsum("ij,jk,ik->i", self._features, cov, self._features), 1e-12))
        return mean, sd, float(z.max())

    @staticmethod
    def _expected_improvement(mean: np.ndarray, sd: np.ndarray, best: float) -> np.ndarray:
        from scipy.special import ndtr

        u = (mean - best) / sd
        cdf = ndtr(u)
        pdf = np.exp(-0.5 * u**2) / math.sqrt(2.0 * math.pi)
        return sd * (u * cdf + pdf)

    # ---- choosing --------------------------------------------------------------------------------------

    def new_cost(self, c: Candidate) -> Cost:
        return self.costs.new_cost(self.space.key(c))

    def _affordable(self) -> list[int]:
        out, over = [], None
        for i, c in enumerate(self.candidates):
            if self.space.key(c) in self.seen or not self.space.valid(c):
                continue
            reason = self.budget.exceeded_by(self.spent + self.new_cost(c))
            if reason is None:
                out.append(i)
            else:
                over = over or reason
        if not out and over:
            self.exhausted = over
        return out

    def propose(self) -> Candidate | None:
        rest = self._affordable()
        if not rest:
            return None
        per_cost = np.array(
            [
                self.costs.scalar(self.new_cost(self.candidates[i]), self.scales, self.evaluation_weight)
                for i in rest
            ]
        )
        if not self.seen:  # nothing learned yet: a seeded pick among the cheapest
            cheapest = [i for i, p in zip(rest, per_cost, strict=True) if p <= per_cost.min() + 1e-12]
            pick = self.rng.choice(cheapest)
        else:
            mean, sd, best = self._posterior()
            gain = self._expected_improvement(mean[rest], sd[rest], best)
            score = gain / per_cost
            pick = rest[int(np.argmax(score))]  # ties: the space's order
        c = self.candidates[pick]
        self.spent = self.spent + self.new_cost(c)
        return c


STRATEGIES.register(
    "cost_aware",
    SearchStrategy(
        "cost_aware",
        "expected improvement per unit of new cost (index builds, LLM calls, USD), within search.budget",
        "sequential",
        CostAware,
    ),
)
