"""Ranking configs: weighted overall score, tie-broken by cost, then latency (pure functions)."""

from __future__ import annotations

import polars as pl

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


def rank_configs(summaries: pl.DataFrame, weights: dict[str, float]) -> pl.DataFrame:
    scores = [overall_score(row, weights) for row in summaries.iter_rows(named=True)]
    latency = summaries["retrieval_p50_ms"] + summaries["generation_p50_ms"]
    ranked = (
        summaries.with_columns(pl.Series("overall_score", scores, pl.Float64), latency.alias("_latency"))
        .sort(["overall_score", "cost_usd", "_latency", "config_key"], descending=[True, False, False, False])
        .drop("_latency")
        .with_row_index("rank", offset=1)
    )
    front = [c for c in DISPLAY_COLUMNS if c in ranked.columns]
    return ranked.select(front + [c for c in ranked.columns if c not in front])


def to_markdown(df: pl.DataFrame, columns: list[str] | None = None) -> str:
    columns = [c for c in (columns or DISPLAY_COLUMNS) if c in df.columns]

    def fmt(v) -> str:
        if isinstance(v, float):
            return f"{v:.4f}" if abs(v) < 10 else f"{v:.1f}"
        return str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in df.select(columns).iter_rows():
        lines.append("| " + " | ".join(fmt(v) for v in row) + " |")
    return "\n".join(lines)


def score_plot_png(df: pl.DataFrame) -> bytes:
    """Horizontal bar chart of overall score per config, with recall and token F1 beside it."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = df["config_key"].to_list()[::-1]
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(keys) + 1.2), dpi=90)
    y = range(len(keys))
    for offset, col, color in (
        (-0.25, "overall_score", "#3b6ea5"),
        (0, "recall_at_k", "#8fb8de"),
        (0.25, "token_f1", "#f2a65a"),
    ):
        ax.barh([i + offset for i in y], df[col].to_list()[::-1], height=0.25, label=col, color=color)
    ax.set_yticks(list(y), keys, fontsize=7)
    ax.set_xlim(0, 1)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title("Configs ranked by overall score")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()
