"""What a metric is, and the registry of metrics (the names `weights`, `decision.min` and the gate take).

A metric scores one question; the evaluation takes its mean over the questions that define it (a None score
is "undefined for this question": left out of the mean and never NaN). A metric with a `score` function is
computed from a `Question`; the built-ins without one are computed by the evaluation itself (the retrieval
metrics in one pass, the embedding and judge metrics with their models). Built-ins are registered in the
module that defines them; a plug-in registers under the entry-point group `rag_sweep.metrics` (a `Metric`,
or a score function whose docstring's first line describes it; see examples/plugins/).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from rag_core.common.registry import PluginError, Registry, first_line

# the order of the leaderboard's and the evaluation's metric columns: the built-in families, then plug-ins
FAMILIES = ("retrieval", "generation", "support", "embedding", "judge", "plug-in")


@dataclass(frozen=True)
class Question:
    """What a per-question metric reads about one question of one config."""

    query_id: str
    question: str
    answer: str  # the generated answer without its [n] citation markers
    raw_answer: str  # as generated
    gold_answers: list[str]  # the reference answers, without citation markers (empty: none)
    doc_ids: list[str]  # the documents of the retrieved chunks, in rank order (repeats kept)
    relevant_doc_ids: set[str]  # the gold documents (empty: none)
    context_texts: list[str]  # the blocks the generator saw (after context synthesis)
    context_doc_ids: list[str]  # their documents, in block order ([n] cites the n-th)
    top_k: int
    # the question's language (a `language` column of the QA set, else data.language): None for SQuAD's
    # English normalization
    language: str | None = None
    extra: dict = field(default_factory=dict)  # any other column of the QA set's row, by name


@dataclass(frozen=True)
class Metric:
    name: str
    description: str
    family: str = "plug-in"
    label: str = ""  # the terminal's short column name (the name when empty)
    needs: str | None = None  # what a question must have for the metric to be defined, when not always
    # may be weighted into the overall score, floored (decision.min) and gated: a mean in [0, 1], higher is
    # better; a metric that is not (a count, a length) is reported and tracked only
    weightable: bool = True
    score: Callable[[Question], float | None] | None = None
    reference: str = "docs/metrics.md"

    @property
    def short(self) -> str:
        return self.label or self.name

    def checked(self, value, query_id: str) -> float | None:
        """The score as a float, or an error naming the metric and the question: a metric never turns NaN,
        and a weightable one stays in [0, 1]."""
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise PluginError(
                f"metric {self.name!r} scored question {query_id!r} {value!r}: expected a finite number or "
                "None (undefined for that question)"
            )
        if self.weightable and not -1e-9 <= value <= 1.0 + 1e-9:  # rounding: sacreBLEU's 100/100
            raise PluginError(
                f"metric {self.name!r} scored question {query_id!r} {value!r}: a weightable metric scores in "
                "[0, 1] (declare weightable=False for another range)"
            )
        return float(value)


def _adapt(name: str, obj: object) -> Metric:
    if isinstance(obj, Metric):
        if obj.score is None:
            raise TypeError("a plug-in Metric needs a score function (score(question) -> float | None)")
        return obj if obj.name == name else Metric(**{**obj.__dict__, "name": name})
    if callable(obj) and len(inspect.signature(obj).parameters) == 1:
        return Metric(name, first_line(obj.__doc__) or f"{name} (no description)", score=obj)
    raise TypeError(
        f"got {type(obj).__name__}; expected a Metric or a function score(question) -> float | None"
    )


METRICS: Registry[Metric] = Registry(
    "metric",
    "rag_sweep.metrics",
    (
        "rag_core.metrics.retrieval",
        "rag_core.metrics.generation",
        "rag_core.metrics",
        "rag_core.metrics.judge",
    ),
    _adapt,
    order=lambda m: FAMILIES.index(m.family),
)


def register(metric: Metric) -> Metric:
    return METRICS.register(metric.name, metric)


def scorable_metrics() -> list[str]:
    """Every installed metric's name, in column order (built-in families, then plug-ins by name)."""
    names = METRICS.names()
    return sorted(names, key=lambda n: FAMILIES.index(_family(n)))


def _family(name: str) -> str:
    family = METRICS.get(name).family
    return family if family in FAMILIES else "plug-in"


def weightable_metrics() -> list[str]:
    return [m for m in scorable_metrics() if METRICS.get(m).weightable]


def needs(metric: str) -> str | None:
    """What a question must have for `metric` to be defined on it (None: every question defines it)."""
    return METRICS.get(metric).needs if metric in METRICS.names() else None


def label(column: str) -> str | None:
    """A metric column's short name, or None for a column that is no metric."""
    return METRICS.get(column).short if column in METRICS.names() else None
