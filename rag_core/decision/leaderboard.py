"""Ranking configs: weighted overall score, tie-broken by cost, then latency (pure functions)."""

from __future__ import annotations

import polars as pl

from rag_core.decision.qualification import (
    MAX_ERROR_SHARE,
    defined_weights,  # noqa: F401  (imported from here too)
    error_columns,
)
from rag_core.metrics import overall_score

DISPLAY_COLUMNS = [
    "rank",
    "config_key",
    "overall_score",
    "recall_at_k",
    "ndcg_at_k",
    "mrr",
    "exact_match",
    "token_f1",
    "faithfulness",
    "retrieval_p50_ms",
    "generation_p50_ms",
    "cost_usd",
]


def with_plugin_metrics(columns: list[str], df: pl.DataFrame) -> list[str]:
    """`columns` and, before the latency columns, the plug-in metrics `df` holds: an installed metric shows
    where the built-in ones do."""
    from rag_core.metrics.registry import METRICS

    extra = [m for m in METRICS.plugin_names() if m in df.columns and m not in columns]
    at = next(
        (i for i, c in enumerate(columns) if c.endswith("_ms") or c.startswith("mean_hops")), len(columns)
    )
    return [*columns[:at], *extra, *columns[at:]]


def with_language_scores(columns: list[str], df: pl.DataFrame) -> list[str]:
    """`columns` and, after the overall score's interval, each language's score a QA set in several
    languages gives (`score_lang_<code>`, rag_core/evaluation/evaluate.language_slices)."""
    slices = sorted(c for c in df.columns if c.startswith("score_lang_") and c not in columns)
    at = columns.index("overall_ci95") + 1 if "overall_ci95" in columns else len(columns)
    return [*columns[:at], *slices, *columns[at:]]


def _defined(per_query: pl.DataFrame, weights: dict[str, float]) -> int:
    """The questions on which some weighted metric is defined: what an interval (or "every question gives
    the same value") may count, not the rows (a judge that failed on 6 of 60 defines 54)."""
    columns = [m for m in weights if m in per_query.columns]
    if not columns:
        return per_query.height
    return per_query.select(pl.any_horizontal(pl.col(c).is_not_null() for c in columns)).to_series().sum()


def compare_to_leader(
    board: pl.DataFrame,
    per_query: dict[str, pl.DataFrame],
    weights: dict[str, float],
    seed: int = 0,
    scores=None,
) -> pl.DataFrame:
    """Add the overall score's 95% bootstrap interval (None, "n/a" and `overall_ci_withheld` saying why,
    below the questions a claim needs or with no spread: stats.why_no_estimate) and a paired bootstrap test of each config against
    the leader (rank 1) over the same queries: `p_value_vs_leader`, `tied_with_leader` (the 95% interval of
    the score difference contains 0), and a display column `vs_leader` (leader / tied / worse, or
    "too many errors" for a config ranked last for its failed generations). `scores`: the configs'
    bootstrap scores (rag_core.decision.recommendation.bootstrap_scores), when the caller already has them."""
    import numpy as np

    from rag_core.decision.recommendation import bootstrap_scores
    from rag_core.metrics.stats import bootstrap_p, why_no_estimate

    if scores is None:
        scores = bootstrap_scores(per_query, weights, seed=seed)
    col = {k: i for i, k in enumerate(scores.keys)}
    leader = col[board["config_key"][0]]
    rows, withheld = [], []
    for key in board["config_key"]:
        i = col[key]
        reason = why_no_estimate(_defined(per_query[key], weights), float(np.ptp(scores.samples[:, i])), 0.05)
        withheld.append(reason)
        lo = hi = None
        if reason is None:
            lo, hi = (float(x) for x in np.percentile(scores.samples[:, i], [2.5, 97.5]))
        if i == leader:
            rows.append((lo, hi, 0.0, 0.0, 0.0, 1.0, True, "leader"))
            continue
        diffs = scores.diff(leader, i)
        dlo, dhi = (float(x) for x in np.percentile(diffs, [2.5, 97.5]))
        tied = dlo <= 0.0 <= dhi
        diff = float(scores.observed[leader] - scores.observed[i])
        if not np.ptp(diffs) > 0:  # the same difference in every resample: an x–x interval claims certainty
            dlo = dhi = None
        rows.append(
            (
                lo,
                hi,
                diff,
                dlo,
                dhi,
                bootstrap_p(diffs),
                tied,
                "tied" if tied else "worse",
            )
        )
    for i, (bad, unscored) in enumerate(zip(board["too_many_errors"], board["no_score"], strict=True)):
        if bad:  # its score is not a measure of quality: neither tied with the leader nor merely worse
            rows[i] = (*rows[i][:6], False, "too many errors")
        elif unscored:  # NaN: no comparison with it means anything
            rows[i] = (*rows[i][:6], False, "no score")
    cols = [
        "overall_ci_low",
        "overall_ci_high",
        "leader_minus_score",
        "leader_diff_ci_low",
        "leader_diff_ci_high",
        "p_value_vs_leader",
        "tied_with_leader",
        "vs_leader",
    ]
    schema = {c: pl.Float64 for c in cols[:6]} | {"tied_with_leader": pl.Boolean, "vs_leader": pl.String}
    extra = pl.DataFrame(rows, schema=schema, orient="row").with_columns(
        pl.Series("overall_ci_withheld", withheld, pl.String)  # why no interval is given (None: one is)
    )
    out = pl.concat([board, extra], how="horizontal")
    out = out.with_columns(
        pl.when(pl.col("overall_ci_withheld").is_null())
        .then(pl.format("{}–{}", pl.col("overall_ci_low").round(3), pl.col("overall_ci_high").round(3)))
        .otherwise(pl.lit("n/a"))
        .alias("overall_ci95")
    )
    front = [c for c in DISPLAY_COLUMNS if c in out.columns]
    return out.select(front + [c for c in out.columns if c not in front])


def rank_configs(
    summaries: pl.DataFrame, weights: dict[str, float], count_judge: bool = True
) -> pl.DataFrame:
    """Rank by overall score, then cost, then latency; configs with `too_many_errors` (the calls of an
    LLM-backed stage failed or fell back for more than MAX_ERROR_SHARE of them: qualification.error_columns)
    or `no_score` (an overall score that is not a finite number) come after every other config: neither is
    a measure of quality."""
    scores = [overall_score(row, weights) for row in summaries.iter_rows(named=True)]
    no_score = [s is None or s != s or s in (float("inf"), float("-inf")) for s in scores]
    latency = summaries["retrieval_p50_ms"] + summaries["generation_p50_ms"]
    error_share = summaries["n_generation_errors"] / summaries["n_queries"].clip(lower_bound=1)
    ranked = (
        error_columns(summaries, count_judge)
        .with_columns(
            pl.Series("overall_score", scores, pl.Float64),
            error_share.alias("generation_error_share"),
            pl.Series("no_score", no_score, pl.Boolean),
            latency.alias("_latency"),
        )
        .with_columns((pl.col("too_many_errors") | pl.col("no_score")).alias("_out"))
        .sort(
            ["_out", "too_many_errors", "overall_score", "cost_usd", "_latency", "config_key"],
            descending=[False, False, True, False, False, False],
            nulls_last=True,
        )
        .drop("_latency", "_out")
        .with_row_index("rank", offset=1)
    )
    front = [c for c in DISPLAY_COLUMNS if c in ranked.columns]
    return ranked.select(front + [c for c in ranked.columns if c not in front])


def to_markdown(df: pl.DataFrame, columns: list[str] | None = None) -> str:
    columns = [c for c in (columns or with_plugin_metrics(DISPLAY_COLUMNS, df)) if c in df.columns]

    def fmt(v) -> str:
        if v is None:
            return "undefined"  # a metric no query defines (recall without gold documents)
        if isinstance(v, float):
            return f"{v:.4f}" if abs(v) < 10 else f"{v:.1f}"
        return str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in df.select(columns).iter_rows():
        lines.append("| " + " | ".join(fmt(v) for v in row) + " |")
    return "\n".join(lines)


# The terminal's names for the leaderboard columns it shows that are no metric (a metric's is its label in
# the registry, rag_core/metrics/registry.py; the file keeps the full names)
TERMINAL_NAMES = {
    "overall_score": "score",
    "overall_ci95": "95% CI",
    "vs_leader": "vs leader",
    "retrieval_p50_ms": "ret p50 ms",
    "n_generation_errors": "gen errors",
    "n_judge_failures": "judge fails",
    "chunk_truncated_share": "truncated",
    "failed_stages": "failed LLM calls",
}
TERMINAL_LEGEND = (
    "tier 1: the best config, every config not significantly worse (paired bootstrap over the same "
    "questions, Holm-corrected) and any scoring above one of them; vs leader: tied = in tier 1, worse = a lower tier, too many errors = "
    f"the LLM calls of a stage failed or fell back for more than {MAX_ERROR_SHARE:.0%} of its calls (failed LLM "
    "calls: never tiered or recommended), no score = the overall score is not a number; truncated: share of chunks longer than the embedder reads; undefined: no "
    "question defines that metric"
)


def to_terminal(df: pl.DataFrame, columns: list[str]) -> str:
    """An aligned plain-text table (numbers right-aligned, 3 decimals) that fits a terminal."""
    columns = [c for c in columns if c in df.columns]

    def fmt(v, column: str) -> str:
        if v is None:
            return "undefined"
        if isinstance(v, float):
            return (
                f"{v:.1f}"
                if column.endswith("_ms") or abs(v) >= 10 or column.startswith("n_")
                else f"{v:.3f}"
            )
        return str(v)

    from rag_core.metrics.registry import label

    def name(c: str) -> str:
        return f"score {c.removeprefix('score_lang_')}" if c.startswith("score_lang_") else c

    cells = [[TERMINAL_NAMES.get(c) or label(c) or name(c) for c in columns]]
    cells += [
        [fmt(v, c) for v, c in zip(row, columns, strict=True)] for row in df.select(columns).iter_rows()
    ]
    numeric = [df[c].dtype.is_numeric() for c in columns]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    lines = []
    for row in cells:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(row, widths, numeric, strict=True)]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def score_plot_png(df: pl.DataFrame) -> bytes:
    """Horizontal bar chart of overall score per config, with recall and token F1 beside it."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = df["label" if "label" in df.columns else "config_key"].to_list()[::-1]
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(keys) + 1.2), dpi=90)
    y = range(len(keys))
    for offset, col, color in (
        (-0.25, "overall_score", "#3b6ea5"),
        (0, "recall_at_k", "#8fb8de"),
        (0.25, "token_f1", "#f2a65a"),
    ):
        if df[col].null_count() == df.height:
            continue  # undefined for every config (e.g. recall without gold documents): no bars
        ax.barh([i + offset for i in y], df[col].to_list()[::-1], height=0.25, label=col, color=color)
    ax.set_yticks(list(y), keys, fontsize=8)
    ax.set_xlim(0, 1)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title("Configs ranked by overall score")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


# Shown only when some config has a non-zero value: they say a score is not what it seems.
WARNING_COLUMNS = ["n_generation_errors", "n_judge_failures", "chunk_truncated_share", "failed_stages"]


def terminal_columns(board: pl.DataFrame) -> list[str]:
    """The columns `rag-sweep run` prints: the scores that decide, and the warnings that apply."""
    cols = [
        "rank",
        "label" if "label" in board.columns else "config_key",
        "overall_score",
        "overall_ci95",
        "tier",
        "vs_leader",
        "recall_at_k",
        "ndcg_at_k",
        "exact_match",
        "token_f1",
        "faithfulness",
        "retrieval_p50_ms",
    ]
    if "mean_hops" in board.columns and board["mean_hops"].drop_nulls().len():  # an iterative retrieval
        cols.insert(cols.index("retrieval_p50_ms"), "mean_hops")
    cols = with_language_scores(with_plugin_metrics(cols, board), board)
    return cols + [c for c in WARNING_COLUMNS if c in board.columns and _warns(board[c])]


def _warns(column: pl.Series) -> bool:
    """Whether a warning column says something: a non-zero count, or a non-empty text."""
    if column.dtype == pl.String:
        return bool(column.fill_null("").str.len_chars().sum())
    return column.fill_null(0).sum() > 0
