"""What to ship: statistical tiers, the smallest detectable difference, constraints, a CI-aware Pareto
front and one recommended config, from the configs' per-query metrics (pure numpy/polars).

Every comparison uses one set of bootstrap resamples of the queries shared by all configs (paired: the
same questions in every resample), so the tiers, the front and the recommendation agree with each other.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from rag_core.decision.qualification import JUDGE_METRIC, MAX_ERROR_SHARE, concentrated_failures, qualified
from rag_core.decision.work import least_work
from rag_core.metrics import percentile
from rag_core.metrics.stats import (
    N_BOOT,
    bootstrap_p,
    holm,
    min_questions_for_claim,
    resample_indices,
    resample_means,
    smallest_paired_p,
    weighted_score,
    why_no_estimate,
)

Z_80 = 0.841621  # 80% power


@dataclass(frozen=True)
class Scores:
    """Overall score of each config on the full QA set (`observed`, (N,)) and on each bootstrap resample
    of the queries (`samples`, (B, N)); `keys` name the columns."""

    keys: list[str]
    observed: np.ndarray
    samples: np.ndarray
    # each config's per-question metric values (NaN: undefined), the resamples and the weights: to compare
    # two configs on the questions both define where their undefined questions differ (None: not kept)
    values: list[np.ndarray] | None = None
    resamples: np.ndarray | None = None
    weights: np.ndarray | None = None

    def diff(self, a: int, b: int) -> np.ndarray:
        """a − b on each resample, over the questions both define (each metric's own): a config whose judge
        failed on its worst answers is not compared on the mean of its best ones alone."""
        if self.values is not None:
            va, vb = self.values[a], self.values[b]
            both = ~np.isnan(va) & ~np.isnan(vb)
            if not np.array_equal(both, ~np.isnan(va)) or not np.array_equal(both, ~np.isnan(vb)):
                sa = weighted_score(resample_means(np.where(both, va, np.nan), self.resamples), self.weights)
                sb = weighted_score(resample_means(np.where(both, vb, np.nan), self.resamples), self.weights)
                return sa - sb
        return self.samples[:, a] - self.samples[:, b]

    def subset(self, keys: list[str]) -> Scores:
        """The same resamples, for some of the configs."""
        idx = [self.keys.index(k) for k in keys]
        values = None if self.values is None else [self.values[i] for i in idx]
        return Scores(
            list(keys), self.observed[idx], self.samples[:, idx], values, self.resamples, self.weights
        )


def bootstrap_scores(
    per_query: dict[str, pl.DataFrame], weights: dict[str, float], n_boot: int = N_BOOT, seed: int = 0
) -> Scores:
    """Resample the queries once (they are the same in every config) and score every config on each."""
    keys = list(per_query)
    metrics = list(weights)
    w = np.array([weights[m] for m in metrics], dtype=float)
    mats = [per_query[k].sort("query_id").select(metrics).fill_null(float("nan")).to_numpy() for k in keys]
    n = len(mats[0])
    idx = resample_indices(n, n_boot, seed)  # the same resamples for every config: paired
    full = np.arange(n)[None, :]
    observed = np.array([weighted_score(resample_means(m.astype(float), full), w)[0] for m in mats])
    samples = np.stack([weighted_score(resample_means(m.astype(float), idx), w) for m in mats], axis=1)
    return Scores(keys, observed, samples, [m.astype(float) for m in mats], idx, w)


def tiers(scores: Scores, alpha: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """(tier of each config, Holm-adjusted p-value against its tier's best). Tier 1 is the best config,
    every config not significantly worse than it (Holm over those comparisons), and every config scoring
    above one of those; tier 2 the same among the rest, and so on. Tiers follow the scores: a config whose
    difference from the best is steady can be significantly worse while a lower-scoring, noisier one is
    not; the noisier one's tie then holds the configs above it in the tier too (this only withdraws
    "worse" claims, so Holm's error control stands)."""
    tier = np.zeros(len(scores.keys), dtype=int)
    p_adj = np.ones(len(scores.keys))
    remaining = list(np.argsort(-scores.observed, kind="stable"))
    t = 0
    while remaining:
        t += 1
        best, others = remaining[0], remaining[1:]
        adjusted = holm([bootstrap_p(scores.diff(best, o)) for o in others]) if others else np.array([])
        last = 0  # the lowest-scoring config not significantly worse than the best
        for place, (o, p) in enumerate(zip(others, adjusted, strict=True), start=1):
            p_adj[o] = p
            if p >= alpha:
                last = place
        members = remaining[: last + 1]
        tier[members] = t
        remaining = remaining[last + 1 :]
    return tier, p_adj


def min_detectable_difference(scores: Scores, leader: int, alpha: float = 0.05) -> float:
    """The smallest overall-score gap to the leader that a paired test on this QA set detects with 80%
    power under the tiers' Holm correction: the leader is compared with the m other configs, and Holm's
    first (strictest) step tests at alpha / m, so (z₁₋α/2m + z₀.₈) × the median standard error of the
    leader-minus-config difference. NaN with no other config; 0.0 when the differences have no spread
    (`decide` then gives no figure: stats.why_no_estimate)."""
    from scipy.stats import norm

    others = [i for i in range(len(scores.keys)) if i != leader]
    if not others:
        return float("nan")
    se = np.median([scores.diff(leader, o).std(ddof=1) for o in others])
    return float((norm.ppf(1 - alpha / (2 * len(others))) + Z_80) * se)


def significantly_better(scores: Scores, a: int, b: int) -> bool:
    """a's score is above b's: the 95% bootstrap interval of a − b lies above 0."""
    return bool(np.percentile(scores.diff(a, b), 2.5) > 0)


def pareto_front(scores: Scores, cost: np.ndarray) -> np.ndarray:
    """Configs no other config dominates on (quality, cost). a dominates b when it costs no more, b is not
    significantly better than a, and a is cheaper or significantly better: a gap the QA set cannot resolve
    does not buy a place on the front."""
    n = len(scores.keys)
    front = np.ones(n, dtype=bool)
    for b in range(n):
        for a in range(n):
            if a == b or cost[a] > cost[b] or significantly_better(scores, b, a):
                continue
            if cost[a] < cost[b] or significantly_better(scores, a, b):
                front[b] = False
                break
    return front


@dataclass(frozen=True)
class Constraints:
    max_p95_latency_ms: float | None = None
    max_cost_per_1k_queries: float | None = None
    min: dict[str, float] | None = None
    prefer: str = "cheapest"  # cheapest | fastest | best


def query_latency_p95(per_query: pl.DataFrame) -> float:
    """p95 over queries of retrieval + generation time (ms)."""
    total = per_query["retrieval_ms"].fill_null(0.0) + per_query["generation_ms"].fill_null(0.0)
    return percentile(total.to_list(), 95)


LATENCY_BOOT = 1000  # resamples of the questions for the p95's interval (a fixed seed: the same interval)


def latency_p95_interval(per_query: pl.DataFrame, seed: int = 0) -> tuple[float, float]:
    """A 95% percentile-bootstrap interval of `query_latency_p95` over the questions: how far the p95 itself
    moves with which questions happened to be slow. A latency preference rests only on differences beyond
    it (`_lowest`)."""
    total = (per_query["retrieval_ms"].fill_null(0.0) + per_query["generation_ms"].fill_null(0.0)).to_numpy()
    if total.size < 2:
        return (float(total[0]), float(total[0])) if total.size else (0.0, 0.0)
    idx = np.random.default_rng(seed).integers(0, total.size, size=(LATENCY_BOOT, total.size))
    p95s = np.percentile(total[idx], 95, axis=1)
    low, high = np.percentile(p95s, [2.5, 97.5])
    return float(low), float(high)


def violations(row: dict, c: Constraints) -> list[str]:
    """Why a config breaks the constraints (empty: it meets them)."""
    out = []
    if c.max_p95_latency_ms is not None and row["p95_latency_ms"] > c.max_p95_latency_ms:
        out.append(f"p95 latency {row['p95_latency_ms']:.0f} ms > {c.max_p95_latency_ms:g}")
    if c.max_cost_per_1k_queries is not None and row["cost_per_1k_queries"] > c.max_cost_per_1k_queries:
        out.append(f"cost ${row['cost_per_1k_queries']:.4f}/1k queries > ${c.max_cost_per_1k_queries:g}")
    for metric, floor in (c.min or {}).items():
        if row[metric] < floor:
            out.append(f"{metric} {row[metric]:.3f} < {floor:g}")
    return out


# Speed between tied configs is first the work a question costs them, counted (rag_core/decision/work.py:
# the same on every machine): a config doing more of it is slower. Between configs the counts cannot
# order, measured latency, which is noisy (a loaded machine doubles it): a config counts as slower than
# the fastest only when it is more than LATENCY_BAND × slower beyond both p95s' own intervals (the lowest
# its p95 could be against the highest the fastest's could); otherwise they are equally fast. Cost is exact.
LATENCY_BAND = 2.0
PREFERENCES = {
    "cheapest": ("cost_per_1k_queries", "p95_latency_ms"),
    "fastest": ("p95_latency_ms", "cost_per_1k_queries"),
    "best": ("-overall_score", "cost_per_1k_queries"),
}
WORDS = {"cost_per_1k_queries": "cheapest", "p95_latency_ms": "fastest", "-overall_score": "best"}


def _lowest(pool: pl.DataFrame, col: str) -> pl.DataFrame:
    """The rows with the lowest value of col (latency: the rows no other does less work than, then of
    those every row not resolvably slower than the fastest, LATENCY_BAND beyond both intervals; a board
    without intervals: within the band of the lowest)."""
    if col == "p95_latency_ms":
        pool = least_work(pool)
        if "p95_latency_ci_low" in pool.columns:
            fastest = pool.sort(["p95_latency_ms", "config_key"]).row(0, named=True)
            return pool.filter(
                pl.col("p95_latency_ci_low") <= fastest["p95_latency_ci_high"] * LATENCY_BAND + 1e-12
            )
    low = pool[col].min()
    limit = low * LATENCY_BAND if col == "p95_latency_ms" else low
    return pool.filter(pl.col(col) <= limit + 1e-12)


def recommend(board: pl.DataFrame, c: Constraints) -> tuple[str | None, str]:
    """(recommended config key, why): among the configs meeting the constraints, those of the best tier
    that has any; among them the preferred ones, then the other preference's, then the highest score."""
    ok = board.filter(pl.col("meets_constraints") & pl.col("tier").is_not_null())
    if ok.is_empty():
        return None, "no config meets the constraints: " + "; ".join(
            f"{k}: {v}" for k, v in zip(board["config_key"][:3], board["violations"][:3], strict=False)
        )
    best_tier = int(ok["tier"].min())
    pool = ok.filter(pl.col("tier") == best_tier).with_columns(
        (-pl.col("overall_score")).alias("-overall_score")
    )
    first, second = PREFERENCES[c.prefer]
    narrowed = _lowest(_lowest(pool, first), second)
    pick = narrowed.sort(["-overall_score", "config_key"]).row(0, named=True)
    top = board.filter(pl.col("tier") == 1).height
    if best_tier == 1:
        where = (
            f"in the top tier ({top} configs statistically indistinguishable from the best, Holm-corrected), "
            f"{pool.height} of which meet the constraints"
        )
    else:
        where = f"no config of tiers 1–{best_tier - 1} meets the constraints; {pool.height} of tier {best_tier} do"
    speed = (
        f" (the least work a question costs, counted; then equally fast unless more than {LATENCY_BAND:g}x "
        "slower beyond both p95s' 95% intervals)"
    )
    said = {k: WORDS[k] + (speed if k == "p95_latency_ms" else "") for k in (first, second)}
    why = (
        f"{pick['config_key']}: {where}; the {said[first]} of them, then the {said[second]}, then the best-scoring "
        f"(score {pick['overall_score']:.4f}, "
        f"${pick['cost_per_1k_queries']:.4f} per 1k queries, p95 {pick['p95_latency_ms']:.0f} ms)"
    )
    return pick["config_key"], why


def no_qualifying_config(board: pl.DataFrame) -> str:
    """Why nothing is recommended when no config's score measures its quality."""
    errors = board.filter(pl.col("too_many_errors")).height
    biased = (
        board.filter(~pl.col("too_many_errors") & pl.col("judge_failures_not_at_random").is_not_null()).height
        if "judge_failures_not_at_random" in board.columns
        else 0
    )
    unscored = board.height - errors - biased
    parts = []
    if biased:
        parts.append(f"{biased} had their judge fail on their worse answers (judge_failures_not_at_random)")
    if errors:
        parts.append(
            f"{errors} had LLM calls fail or fall back for more than {MAX_ERROR_SHARE:.0%} of a stage's calls "
            f"({_stages(board)}; a rerun asks the failed calls again)"
        )
    if unscored:
        parts.append(f"{unscored} have no overall score (not a number)")
    return f"no config qualifies: of {board.height} configs, " + " and ".join(parts)


def _stages(board: pl.DataFrame) -> str:
    """The failed stages of the configs over the threshold, e.g. `hops 80 of 80 calls`."""
    if "failed_stages" not in board.columns:  # a board from before every stage was counted
        return "see gen errors"
    found = board.filter(pl.col("too_many_errors"))["failed_stages"].drop_nulls().unique(maintain_order=True)
    return "; ".join(s for s in found if s) or "see gen errors"


def too_few_questions(n: int, alpha: float, comparisons: int = 1) -> str:
    """What a QA set too small for any paired test says instead of tiers and a power figure."""
    need = min_questions_for_claim(alpha, comparisons)
    level = (
        f"alpha {alpha:g}"
        if comparisons <= 1
        else f"alpha {alpha:g} / {comparisons} (Holm's first step over {comparisons} comparisons)"
    )
    return (
        f"with {n} question(s) no config can be shown better or worse than another: the smallest p-value a "
        f"paired test can reach on {n} questions is {smallest_paired_p(n):.3g} (every sign of the "
        f"differences flipped), above {level}; it takes at least {need} questions (and more to "
        "detect small differences). Every config is kept in tier 1."
    )


def decide(
    board: pl.DataFrame,
    per_query: dict[str, pl.DataFrame],
    weights: dict[str, float],
    constraints: Constraints,
    alpha: float = 0.05,
    seed: int = 0,
    scores: Scores | None = None,
) -> tuple[pl.DataFrame, dict]:
    """Add to a ranked board: tier, Holm-adjusted p vs the tier's best, cost per 1k queries, p95 latency,
    constraint violations, Pareto membership (quality vs cost, quality vs p95 latency) and the
    recommendation; return it with a summary (recommended, why, min detectable difference, advice).
    `scores`: bootstrap_scores of the board's configs, when the caller already has them."""
    keys = board["config_key"].to_list()
    # a judge whose failures fell on a config's worse answers: its score is biased, not a measure to rank by
    # (only where the judge's metric is in the score: unweighted, it biases nothing)
    weighted_judge = bool(weights.get(JUDGE_METRIC))
    biased = [concentrated_failures(per_query[k], alpha) if weighted_judge else None for k in keys]
    sound = np.isin(keys, qualified(board)["config_key"].to_list()) & np.array([b is None for b in biased])
    idx = np.flatnonzero(sound)  # every config failed: none is tiered, none recommended
    sound_keys = [keys[i] for i in idx]
    n_questions = int(per_query[keys[0]].height)
    # each sound config is compared with the best, Holm-adjusted: the floor is Holm's first step's
    comparisons = max(1, len(sound_keys) - 1)
    enough = n_questions >= min_questions_for_claim(alpha, comparisons)
    if not sound_keys:
        scores = None
    elif scores is None:
        scores = bootstrap_scores({k: per_query[k] for k in sound_keys}, weights, seed=seed)
    else:  # the caller's resamples of every config: the same numbers, computed once
        scores = scores.subset(sound_keys)
    cost = (board["cost_usd"] / board["n_queries"].clip(lower_bound=1) * 1000).to_numpy()
    p95 = np.array([query_latency_p95(per_query[k]) for k in keys])
    p95_ci = np.array([latency_p95_interval(per_query[k], seed) for k in keys]).reshape(len(keys), 2)
    tier = np.full(len(keys), None, dtype=object)
    p_adj, on_cost, on_latency = np.ones(len(keys)), np.zeros(len(keys), bool), np.zeros(len(keys), bool)
    if scores is not None and enough:
        tier[idx], p_adj[idx] = tiers(scores, alpha)
        on_cost[idx], on_latency[idx] = pareto_front(scores, cost[idx]), pareto_front(scores, p95[idx])
    elif scores is not None:  # too few questions for any test to reach alpha: no config is "worse"
        tier[idx] = 1
        on_cost[idx] = on_latency[idx] = True
    out = board.with_columns(
        pl.Series("tier", tier.tolist(), pl.Int64),
        pl.Series("p_holm_vs_tier_best", p_adj),
        pl.Series("cost_per_1k_queries", cost),
        pl.Series("judge_failures_not_at_random", biased, pl.String),
        pl.Series("p95_latency_ms", p95),
        pl.Series("p95_latency_ci_low", p95_ci[:, 0]),
        pl.Series("p95_latency_ci_high", p95_ci[:, 1]),
        pl.Series("pareto_cost", on_cost),
        pl.Series("pareto_latency", on_latency),
    )
    if "vs_leader" in out.columns:  # tied with the leader = in its tier, after Holm's correction
        out = out.with_columns(
            (pl.col("tier") == 1).fill_null(False).alias("tied_with_leader"),
            pl.when(pl.col("vs_leader").is_in(["leader", "too many errors", "no score"]))
            .then(pl.col("vs_leader"))
            .when(pl.col("tier") == 1)
            .then(pl.lit("tied"))
            .otherwise(pl.lit("worse"))
            .alias("vs_leader"),
        )
    if not enough:  # neither is a bootstrap of so few questions evidence (one question: every resample alike)
        out = _withhold_claims(out, n_questions, alpha)
    why_not = [violations(r, constraints) for r in out.iter_rows(named=True)]
    out = out.with_columns(
        pl.Series("meets_constraints", [not v for v in why_not]),
        pl.Series("violations", ["; ".join(v) for v in why_not], pl.String),
    )
    if not sound_keys:
        key, why = None, no_qualifying_config(out)
    else:
        key, why = recommend(out, constraints)
    out = out.with_columns((pl.col("config_key") == (key or "")).alias("recommended"))
    mde, mde_withheld = _detectable(scores, enough, n_questions, alpha, comparisons)
    top = out.filter(pl.col("tier") == 1).sort("overall_score", descending=True)
    advice = _advice(top, bool(sound_keys), enough, n_questions, alpha, comparisons, mde, mde_withheld)
    summary = {
        "recommended": key,
        "why": why,
        "top_tier": top["config_key"].to_list(),
        "min_detectable_difference": mde
        if np.isfinite(mde)
        else None,  # None: one config, nothing to compare, too few questions or no spread (see below)
        "min_detectable_difference_withheld": mde_withheld,  # why no detectable difference is given
        "n_questions": n_questions,
        "enough_questions": enough,
        "min_questions": min_questions_for_claim(alpha, max(1, len(sound_keys) - 1)),
        "advice": advice,
        "prefer": constraints.prefer,
    }
    return out, summary


def _withhold_claims(out: pl.DataFrame, n_questions: int, alpha: float) -> pl.DataFrame:
    """Too few questions for any test to reach alpha: no config is "worse" than the leader, no p-value or
    difference interval is given, and a config's own interval only above a single test's floor."""
    withheld = why_no_estimate(n_questions, 1.0, alpha)
    return out.with_columns(
        *(
            [
                pl.when(pl.col("vs_leader") == "worse")
                .then(pl.lit("tied"))
                .otherwise(pl.col("vs_leader"))
                .alias("vs_leader")
            ]
            if "vs_leader" in out.columns
            else []
        ),
        *(
            pl.lit(None, pl.Float64).alias(c)
            for c in ("p_value_vs_leader", "leader_diff_ci_low", "leader_diff_ci_high")
            if c in out.columns
        ),
        *(
            [  # each config's own interval is one claim: withheld only below a single test's floor
                pl.lit(None, pl.Float64).alias("overall_ci_low"),
                pl.lit(None, pl.Float64).alias("overall_ci_high"),
                pl.lit("n/a").alias("overall_ci95"),
                pl.lit(withheld).alias("overall_ci_withheld"),
            ]
            if "overall_ci95" in out.columns and withheld
            else []
        ),
    )


def _detectable(
    scores: Scores | None, enough: bool, n_questions: int, alpha: float, comparisons: int
) -> tuple[float, str | None]:
    """The minimum detectable difference of the sound configs' scores (NaN where none is given) and why
    none is given (None where it is)."""
    mde, withheld = float("nan"), None
    if scores is not None and enough:
        mde = min_detectable_difference(scores, int(np.argmax(scores.observed)), alpha)
        # every config scoring alike on every question: a difference of 0 would read as perfect power
        withheld = why_no_estimate(n_questions, mde, alpha, comparisons) if np.isfinite(mde) else None
    elif scores is not None:
        withheld = why_no_estimate(n_questions, 1.0, alpha, comparisons)
    return (float("nan"), withheld) if withheld else (mde, withheld)


def _advice(
    top: pl.DataFrame,
    any_sound: bool,
    enough: bool,
    n_questions: int,
    alpha: float,
    comparisons: int,
    mde: float,
    mde_withheld: str | None,
) -> str:
    """What the summary advises about the top tier: more questions where they would separate it, the
    choice on cost and speed where they would not."""
    if any_sound and not enough:
        return too_few_questions(n_questions, alpha, comparisons)
    if top.height > 1 and mde_withheld:
        return (
            f"{top.height} configs are statistically tied at the top; no detectable difference is given "
            f"({mde_withheld})"
        )
    if top.height <= 1:
        return ""
    gap = float(top["overall_score"][0] - top["overall_score"][1])
    advice = (
        f"{top.height} configs are statistically tied at the top: with {n_questions} questions the sweep "
        f"detects overall-score differences of about {mde:.3f} or more, and the best two differ by {gap:.3f}"
    )
    if gap > 0 and gap >= mde / 3:  # close enough that a larger QA set would tell them apart
        return (
            advice + f"; about {int(np.ceil(n_questions * (mde / gap) ** 2))} questions would separate them."
        )
    return (
        advice
        + ", far less: more questions would not change the choice; choose among them on cost and speed."
    )
