"""Which configs a leaderboard may tier, recommend and confirm: those whose score measures their quality."""

from __future__ import annotations

import polars as pl

# A config whose generations failed for more than this share of the queries is not ranked among the others:
# its failed answers would count as wrong answers, i.e. an outage would read as low quality.
MAX_ERROR_SHARE = 0.1


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
