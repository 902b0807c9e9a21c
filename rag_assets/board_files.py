"""Where a sweep's leaderboard files are, and its recommendation read back: Dagster-free, so the CLI prints
an unchanged rerun's leaderboard without importing Dagster (rag_sweep/runner/up_to_date.py)."""

from __future__ import annotations

import json
from pathlib import Path

from resources.storage import data_root


def leaderboard_path(data_dir, sweep_name: str) -> Path:
    return data_root(data_dir) / "leaderboards" / f"{sweep_name}.parquet"


def read_decision(data_dir, sweep_name: str) -> dict:
    """The recommendation the last leaderboard of a sweep made (see rag_core.decision.recommendation.decide)."""
    return json.loads(leaderboard_path(data_dir, sweep_name).with_suffix(".decision.json").read_text())
