"""A search space: named dimensions with their values, and the reuse-aware cost of a candidate.

A candidate is a dict {dimension: value}. The `expensive` dimensions (chunking and embedding: they decide
the index) cost an index build the first time a combination of their values is seen; the rest (top_k, a
reranker, a generator) run over an existing index and cost one evaluation. `llm_usd` prices a candidate's
LLM calls per query (litellm's table, filled by the caller): among equally cheap moves in index builds,
the cheaper LLM is preferred. `cost_model` (rag_core/search/cost.py), when the caller knows the stage graph,
says in cost units what each candidate costs given what is built; without one it is derived from
`expensive` (an index build per new combination, nothing else counted).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from rag_core.search.cost import Cost, CostModel

Candidate = dict[str, Any]


@dataclass
class Space:
    dims: dict[str, list]
    expensive: tuple[str, ...] = ()
    index_cost: float = 10.0  # an index build, in evaluations of a config over an existing index
    built: set[tuple] = field(default_factory=set)  # indexes that exist
    candidates: list[Candidate] | None = None  # the valid points, when not every combination is one
    llm_usd: dict[tuple, float] = field(default_factory=dict)  # candidate key -> LLM USD per query
    cost_model: CostModel | None = None  # keyed by `key`; None: derived from `expensive`

    def __post_init__(self) -> None:
        unknown = set(self.expensive) - set(self.dims)
        if unknown:
            raise ValueError(f"expensive dimensions {sorted(unknown)} are not dimensions of the space")
        self._valid = {self.key(c) for c in self.candidates} if self.candidates is not None else None

    @classmethod
    def of(cls, candidates: list[Candidate], expensive: tuple[str, ...] = (), **kw) -> Space:
        """The space of exactly these candidates (a sweep whose lists pair settings instead of crossing)."""
        dims: dict[str, list] = {}
        for c in candidates:
            for d, v in c.items():
                dims.setdefault(d, [])
                if v not in dims[d]:
                    dims[d].append(v)
        return cls(dims, expensive, candidates=list(candidates), **kw)

    def all(self) -> list[Candidate]:
        if self.candidates is not None:
            return list(self.candidates)
        names = list(self.dims)
        return [dict(zip(names, values, strict=True)) for values in itertools.product(*self.dims.values())]

    def valid(self, c: Candidate) -> bool:
        return self._valid is None or self.key(c) in self._valid

    def key(self, c: Candidate) -> tuple:
        return tuple(c[d] for d in self.dims)

    def index_of(self, c: Candidate) -> tuple:
        return tuple(c[d] for d in self.expensive)

    def cost(self, c: Candidate) -> tuple[float, float]:
        """What evaluating c costs now, compared in order: evaluations (one, plus an index build if its
        index does not exist), then its LLM price per query."""
        return 1.0 + (0.0 if self.index_of(c) in self.built else self.index_cost), self.llm_usd.get(
            self.key(c), 0.0
        )

    def mark_built(self, c: Candidate) -> None:
        self.built.add(self.index_of(c))
        self.costs().mark_built(self.key(c))

    def costs(self) -> CostModel:
        """The cost model of the candidates in cost units (given, or an index build per new `expensive`
        combination)."""
        if self.cost_model is None:
            self.cost_model = CostModel(
                {self.key(c): ((("index", self.index_of(c)), Cost(index_builds=1.0)),) for c in self.all()},
                {("index", i) for i in self.built},
            )
        return self.cost_model

    def __len__(self) -> int:
        if self.candidates is not None:
            return len(self.candidates)
        n = 1
        for values in self.dims.values():
            n *= len(values)
        return n
