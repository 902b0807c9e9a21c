"""Search over a space of configs, pure (no Dagster): a strategy proposes a config, the caller evaluates it
however it likes (a sweep's partitions, or a lookup in a published grid) and tells the strategy the result.

- `space.Space`: the dimensions, and what a candidate costs given what is already built (reuse-aware).
- `strategies`: `grid`, `random` and `bayesian` (Optuna's TPE, multi-objective when given several), and the
  registry of strategies (`search.strategy`), plug-ins included.
- `cost`: what a candidate costs now in index builds, LLM calls and USD, given what is built (the stage
  graph); `cost_aware`: the strategy that chooses by expected improvement per unit of that cost.
- `halving`: successive halving over questions, with a paired test against the leader at each rung.
"""

from rag_core.search.cost import Cost, CostBudget, CostModel
from rag_core.search.cost_aware import CostAware
from rag_core.search.halving import Halving
from rag_core.search.space import Space
from rag_core.search.strategies import Bayesian, Grid, RandomSearch, make

__all__ = [
    "Bayesian",
    "Cost",
    "CostAware",
    "CostBudget",
    "CostModel",
    "Grid",
    "Halving",
    "RandomSearch",
    "Space",
    "make",
]
