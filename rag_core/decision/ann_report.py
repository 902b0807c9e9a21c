"""The ship report's section on approximate vector indexes (`index.ann`), when a board has any: each
config's index, what it costs (build time and peak memory, search p50/p95) and loses (ann_recall_at_k), its
place on the cost and latency fronts, and whether the index setting changed the retrieval metrics against
the same config on the exact index."""

from __future__ import annotations

import polars as pl

from rag_core.metrics.retrieval import RETRIEVAL_METRICS

ANN = "index.ann"
COLUMNS = (
    "index.store",
    ANN,
    "ann_recall_at_k",
    "index_build_s",
    "index_build_peak_mb",
    "index_ann_partitions",
    "retrieval_p50_ms",
    "retrieval_p95_ms",
    "recall_at_k",
    "ndcg_at_k",
    "overall_score",
    "pareto_cost",
    "pareto_latency",
)
TOLERANCE = 1e-9  # a metric that moved less than this did not change


def _settings(board: pl.DataFrame) -> list[str]:
    """The columns that name a config's settings, the index type apart."""
    return [c for c in board.columns if "." in c and c != ANN]


def _changes(row: dict, twin: dict) -> list[str]:
    moved = []
    for m in RETRIEVAL_METRICS:
        a, b = row.get(m), twin.get(m)
        if a is not None and b is not None and abs(a - b) > TOLERANCE:
            moved.append(f"{m} {b:.3f} → {a:.3f}")
    return moved


def index_changes(board: pl.DataFrame) -> list[str]:
    """One line per approximate config that has its exact twin on the board (every other setting equal):
    which retrieval metrics the index changed, or that it changed none."""
    if ANN not in board.columns:
        return []
    name = "label" if "label" in board.columns else "config_key"
    settings = _settings(board)
    rows = board.to_dicts()
    exact = {tuple(r[c] for c in settings): r for r in rows if r[ANN] is None}
    lines = []
    for r in rows:
        if r[ANN] is None:
            continue
        twin = exact.get(tuple(r[c] for c in settings))
        if twin is None:
            continue
        moved = _changes(r, twin)
        what = f"changed {', '.join(moved)}" if moved else "did not change the retrieval metrics"
        lines.append(f"- {r[name]}: the index {r[ANN]} {what} against the exact index ({twin[name]})")
    return lines


def ann_sections(board: pl.DataFrame) -> list[tuple[str, str | None, pl.DataFrame | None]]:
    """The report's section (title, text, table); none when every config searches exactly."""
    if ANN not in board.columns or board[ANN].drop_nulls().is_empty():
        return []
    name = "label" if "label" in board.columns else "config_key"
    table = board.select([name, *(c for c in COLUMNS if c in board.columns)]).with_columns(
        pl.col(ANN).fill_null("exact")
    )
    changes = index_changes(board)
    recall = (
        "ann_recall_at_k: the share of the exact search's top k that the approximate index returns for the "
        "same question at the same k; build time and peak memory are the index build's."
    )
    changed = (
        "\n".join(changes) or "No approximate config has its exact twin (every other setting equal) here."
    )
    return [
        ("Approximate vector indexes: what they cost and lose", recall, table),
        ("What each index setting changed in retrieval", changed, None),
    ]
