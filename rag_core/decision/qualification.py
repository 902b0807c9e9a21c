"""Which configs a leaderboard may tier, recommend, confirm, register and a gate may pass: those whose score
measures their quality. One rule, for every LLM-backed stage, used by the board, the gate and the champion's
check alike (`effective_weights` and `llm_failures`)."""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from rag_core.metrics import undefined_reasons

# A config whose LLM calls failed (after retries) or fell back for more than this share of a stage's calls is
# not ranked among the others: its failed calls would count as wrong answers or, worse, as another pipeline
# (a hop model that is down searches again and again), i.e. an outage would read as quality.
MAX_ERROR_SHARE = 0.1

# every LLM-backed stage: (its failed or fallen-back calls, its calls) in an evaluation's summary
LLM_STAGES = {
    "query_transform": ("n_query_transform_fallbacks", "n_query_transform_calls"),
    "hops": ("n_hop_fallbacks", "hop_llm_calls"),
    "rerank": ("n_rerank_fallbacks", "n_rerank_calls"),
    "context_compression": ("n_context_compression_fallbacks", "n_context_compression_calls"),
    "generation": ("n_generation_errors", "n_generation_calls"),
    "judge": ("n_judge_failures", "n_judge_calls"),
}
JUDGE_METRIC = "faithfulness_judge"


def _number(row: Mapping, column: str) -> float | None:
    value = row.get(column)
    return None if value is None or value != value else float(value)


def llm_failures(row: Mapping) -> dict[str, tuple[int, int]]:
    """Per LLM-backed stage that failed at least once: (failed or fallen-back calls, calls). `row`: an
    evaluation's summary (a leaderboard row). An evaluation from before the calls were counted: its
    questions are the calls."""
    out = {}
    for stage, (failed_col, calls_col) in LLM_STAGES.items():
        failed = _number(row, failed_col)
        if not failed:
            continue
        calls = _number(row, calls_col) or _number(row, "n_queries") or failed
        out[stage] = (int(failed), int(max(calls, failed)))
    return out


def judge_is_weighted(weights: Mapping[str, float], judge: Mapping | None = None) -> bool:
    """Whether the judge's metric is in the overall score: the sweep's `weights` give it weight and its
    measurement against the labels (`judge`; None: not measured) trusts it. Reported but not weighted, a
    judge changes no score, so its unread verdicts are no reason to set a config aside (`count_judge`)."""
    return bool(weights.get(JUDGE_METRIC)) and (judge is None or bool(judge.get("weighted")))


def failed_stages(row: Mapping, count_judge: bool = True) -> dict[str, tuple[int, int]]:
    """The stages of `llm_failures` whose share of failed calls is over MAX_ERROR_SHARE; the judge's only
    where it counts (`judge_is_weighted`): its failures stay counted on the board (`failed_share_judge`)."""
    over = {s: (f, n) for s, (f, n) in llm_failures(row).items() if f / max(n, 1) > MAX_ERROR_SHARE}
    if not count_judge:
        over.pop("judge", None)
    return over


def describe(stages: Mapping[str, tuple[int, int]]) -> str:
    """`hops 80 of 80 calls, judge 3 of 20 calls`; '' for none."""
    return ", ".join(f"{s} {f} of {n} calls" for s, (f, n) in stages.items())


def outage_reason(stages: Mapping[str, tuple[int, int]], who: str = "its") -> str:
    """Why a config over the threshold is no evidence, in one phrase."""
    return (
        f"{who} LLM calls failed or fell back for more than {MAX_ERROR_SHARE:.0%} of a stage's calls "
        f"({describe(stages)}): its scores measure the failure, not the pipeline"
    )


def error_columns(summaries: pl.DataFrame, count_judge: bool = True) -> pl.DataFrame:
    """`summaries` with each config's failure figures: `failed_share_<stage>` for every LLM-backed stage
    some config calls, `failed_stages` (the stages over the threshold, e.g. `hops 80 of 80 calls`; empty
    for none; the judge's only where it counts: `failed_stages`) and `too_many_errors`."""
    rows = list(summaries.iter_rows(named=True))
    every = [llm_failures(r) for r in rows]
    over = [failed_stages(r, count_judge) for r in rows]
    shares = {}
    for stage, (failed_col, _) in LLM_STAGES.items():
        if failed_col not in summaries.columns:
            continue
        shares[f"failed_share_{stage}"] = pl.Series(
            [(f / max(n, 1)) if (f, n) != (0, 0) else 0.0 for f, n in (e.get(stage, (0, 0)) for e in every)],
            dtype=pl.Float64,
        )
    return summaries.with_columns(
        *[s.alias(name) for name, s in shares.items()],
        pl.Series("failed_stages", [describe(o) for o in over], pl.String),
        pl.Series("too_many_errors", [bool(o) for o in over], pl.Boolean),
    )


def effective_weights(
    weights: Mapping[str, float], summaries: pl.DataFrame, judge: Mapping | None = None
) -> tuple[dict[str, float], list[str]]:
    """(the weights the overall score uses, the weighted metrics no config defines). The judge's metric is
    not weighted when the judge was measured against people's labels and not trusted (`judge`: that
    measurement, `{"weighted": bool, ...}`; None: not measured, weighted as the sweep says). A metric no
    config defines (recall without any gold documents) is left out, the other weights keeping their
    proportions, instead of counting as 0. The board, the gate and the champion's check all score with
    these weights."""
    kept = dict(weights)
    if judge is not None and not judge.get("weighted"):
        kept.pop(JUDGE_METRIC, None)
    return defined_weights(kept, summaries)


def defined_weights(weights: dict[str, float], summaries: pl.DataFrame) -> tuple[dict[str, float], list[str]]:
    """(the weights of the metrics some config defines, the weighted metrics none defines). A metric is
    undefined for every config when no query can define it (recall without any gold documents): it is
    left out of the overall score, whose other weights keep their proportions, instead of counting as 0."""
    undefined = [
        m for m in weights if m not in summaries.columns or summaries[m].null_count() == summaries.height
    ]
    kept = {m: w for m, w in weights.items() if m not in undefined}
    if not kept:
        raise ValueError(
            f"no weighted metric is defined for any config ({', '.join(undefined)}): give weight to a "
            f"metric this QA set defines ({undefined_reasons(undefined)})"
        )
    return kept, undefined


def qualifies() -> pl.Expr:
    """A config whose score measures its quality: not over the error threshold, and a finite overall
    score (a NaN from undefined data is no score). Only these are tiered, recommended and confirmed."""
    return ~pl.col("too_many_errors") & ~pl.col("no_score")


def qualified(board: pl.DataFrame) -> pl.DataFrame:
    """The board's configs that qualify (a board from before `no_score` existed: by errors alone)."""
    if "too_many_errors" not in board.columns:
        return board
    if "no_score" not in board.columns:
        return board.filter(~pl.col("too_many_errors"))
    return board.filter(qualifies())


# answer metrics whose per-question values tell where a judge's failures fell (the first a config defines)
ANSWER_METRICS = ("token_f1", "exact_match", "answer_similarity", "rouge_l")


def concentrated_failures(per_query: pl.DataFrame, alpha: float = 0.05) -> str | None:
    """Why a config's judge score is biased, or None: its judge failed (no verdict) on answers that score
    lower on an answer metric than the answers it judged (a one-sided Mann-Whitney test at `alpha`). The
    judge's mean over the answers it did judge then overstates the config: a missing verdict there is not
    missing at random, and no average over the rest stands in for it."""
    from scipy import stats

    if JUDGE_METRIC not in per_query.columns:
        return None
    answered = per_query["error"].is_null() if "error" in per_query.columns else pl.lit(True)
    frame = per_query.filter(answered) if "error" in per_query.columns else per_query
    failed = frame[JUDGE_METRIC].is_null()
    if not failed.any() or failed.all():
        return None
    for metric in (m for m in ANSWER_METRICS if m in frame.columns):
        lost = frame.filter(failed)[metric].drop_nulls().cast(pl.Float64).to_numpy()
        kept = frame.filter(~failed)[metric].drop_nulls().cast(pl.Float64).to_numpy()
        if lost.size and kept.size and (lost.min() != kept.max() or lost.max() != kept.min()):
            p = float(stats.mannwhitneyu(lost, kept, alternative="less").pvalue)
            if p < alpha:
                return (
                    f"its judge gave no verdict on {int(failed.sum())} of {frame.height} answers, which score "
                    f"lower on {metric} ({lost.mean():.3f} against {kept.mean():.3f}, Mann-Whitney p {p:.2g}): "
                    "its judge score over the rest overstates it"
                )
            return None
    return None
