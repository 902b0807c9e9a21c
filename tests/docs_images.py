"""The UI screenshots the docs show are the ones the browser tests take: a test that takes one hands it to
keep_for_docs, which copies it into docs/img/ when RAG_DOCS_SCREENSHOTS=1:

    RAG_DOCS_SCREENSHOTS=1 .venv/bin/python -m pytest -n 0 tests/test_ui.py \
        tests/test_sweep_end_to_end.py::test_the_ship_report_renders_in_a_real_browser

tests/test_docs_commands.py checks that every image the docs show is one of these, and exists."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

DOCS_IMG = Path(__file__).resolve().parents[1] / "docs" / "img"

# each screenshot the docs show -> the test that takes it
SCREENSHOTS = {
    "dagster_leaderboard.png": "tests/test_ui.py::"
    "test_opening_the_dagster_ui_on_a_finished_sweep_starts_nothing_and_shows_the_leaderboard",
    "mlflow_runs.png": "tests/test_ui.py::test_mlflow_ui_lists_config_runs_by_label_and_previews_their_questions",
    "mlflow_per_question.png": "tests/test_ui.py::"
    "test_mlflow_ui_lists_config_runs_by_label_and_previews_their_questions",
    "ship_report.png": "tests/test_sweep_end_to_end.py::test_the_ship_report_renders_in_a_real_browser",
}


def keep_for_docs(screenshot: Path) -> None:
    """Copy a browser test's screenshot into docs/img/ when RAG_DOCS_SCREENSHOTS=1 (else nothing)."""
    assert screenshot.name in SCREENSHOTS, f"{screenshot.name}: not a screenshot the docs show"
    if os.environ.get("RAG_DOCS_SCREENSHOTS") == "1":
        DOCS_IMG.mkdir(exist_ok=True)
        shutil.copy(screenshot, DOCS_IMG / screenshot.name)
