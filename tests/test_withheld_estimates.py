"""No figure from too little data: below the questions a claim needs, or with no spread to estimate from,
no interval or detectable difference is stored or printed; the reason is, instead."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from rag_core.decision.holdout import confirm
from rag_core.decision.leaderboard import compare_to_leader, rank_configs
from rag_core.decision.recommendation import (
    Constraints,
    bootstrap_scores,
    decide,
    min_detectable_difference,
)
from rag_core.decision.report import ship_report
from rag_core.metrics.stats import bootstrap_ci, bootstrap_cis, why_no_estimate
from tests.test_decision import W, per_query, wrong_on
from tests.test_holdout import _decided


def _summaries(runs: dict[str, pl.DataFrame]) -> pl.DataFrame:
    return pl.DataFrame(
        [
            {
                "config_key": k,
                "token_f1": float(q["token_f1"].mean()),
                "cost_usd": 0.0,
                "n_queries": float(q.height),
                "n_generation_errors": 0,
                "retrieval_p50_ms": 10.0,
                "generation_p50_ms": 0.0,
            }
            for k, q in runs.items()
        ]
    )


def test_an_interval_needs_enough_questions_and_some_spread():
    assert why_no_estimate(2, 1.0) == "2 question(s), below the 6 any claim at alpha 0.05 needs"
    assert "no spread" in why_no_estimate(18, 0.0) and why_no_estimate(18, 0.5) is None
    assert bootstrap_ci([1.0] * 18) is None and bootstrap_ci([1.0, 0.0]) is None
    assert bootstrap_ci([np.nan] * 10) is None
    lo, hi = bootstrap_ci([1.0, 0.0] * 9)
    assert 0 < lo < 0.5 < hi < 1
    assert bootstrap_cis([[1.0] * 18, [1.0, 0.0] * 9])[0] is None


def test_equal_scores_on_every_question_print_no_interval_and_no_detectable_difference():
    """18 questions, every config right on every one: the board printed "95% CI 1.000–1.000" and "the
    sweep detects differences of about 0.000"."""
    runs = {k: per_query([1] * 18) for k in ("a", "b", "c")}
    board = compare_to_leader(rank_configs(_summaries(runs), W), runs, W)
    out, decision = decide(board, runs, W, Constraints())
    assert out["overall_ci_low"].null_count() == 3 and out["overall_ci_high"].null_count() == 3
    assert set(out["overall_ci95"]) == {"n/a"}
    assert all("no spread" in r for r in out["overall_ci_withheld"])
    assert decision["min_detectable_difference"] is None
    assert "no spread" in decision["min_detectable_difference_withheld"]
    assert "0.000" not in decision["advice"] and "no spread" in decision["advice"]
    runs = {k: q.with_columns(pl.lit("yes").alias("answer")) for k, q in runs.items()}
    qa = pl.DataFrame({"query_id": runs["a"]["query_id"], "question": ["q?"] * 18, "answers": [["yes"]] * 18})
    md, page, _ = ship_report("demo", out, decision, runs, qa, W, {})
    assert "1.000–1.000" not in md and "0.000 in overall score" not in md


def test_too_few_questions_clear_the_overall_interval_at_the_sweeps_alpha():
    # 7 questions with spread: enough for alpha 0.05, not for alpha 0.01 (8 needed)
    runs = {"a": per_query([1, 0, 1, 1, 0, 1, 1]), "b": per_query([1, 0, 0, 1, 0, 1, 0])}
    board = compare_to_leader(rank_configs(_summaries(runs), W), runs, W)
    assert board["overall_ci_low"].null_count() == 0
    out, _ = decide(board, runs, W, Constraints(), alpha=0.01)
    assert out["overall_ci_low"].null_count() == 2 and set(out["overall_ci95"]) == {"n/a"}
    assert all("below the 8" in r for r in out["overall_ci_withheld"])


def test_the_detectable_difference_uses_the_tiers_holm_correction():
    """With 3 configs the leader is compared twice; Holm's first step tests at alpha / 2, so the
    detectable difference is (z(1 − 0.05/4) + z(0.8)) standard errors, not (z(0.975) + z(0.8))."""
    from scipy.stats import norm

    rng = np.random.default_rng(1)
    runs = {k: per_query(rng.integers(0, 2, 200).tolist()) for k in ("x", "y", "z")}
    scores = bootstrap_scores(runs, W)
    se = np.median([scores.diff(0, o).std(ddof=1) for o in (1, 2)])
    mde = min_detectable_difference(scores, 0, 0.05)
    assert mde == pytest.approx((norm.ppf(1 - 0.05 / 4) + norm.ppf(0.8)) * se)
    two = bootstrap_scores({k: runs[k] for k in ("x", "y")}, W)
    se2 = two.diff(0, 1).std(ddof=1)
    assert min_detectable_difference(two, 0, 0.05) == pytest.approx((norm.ppf(0.975) + norm.ppf(0.8)) * se2)


def test_a_holdout_of_two_questions_stores_no_interval_and_says_why(tmp_path):
    """A champion was registered with holdout CI 1.0–1.0 from 2 questions: in the table, the summary, the
    verdict, the MLflow runs."""
    from resources.tracking import MlflowTracking

    runs = {"a": per_query(wrong_on(20)), "b": per_query(wrong_on(21, offset=1))}
    board, decision = _decided(runs)
    table, summary = confirm(board, {k: per_query([1] * 2) for k in runs}, W, decision["recommended"])
    assert table["holdout_ci_low"].null_count() == 2 and table["holdout_ci_high"].null_count() == 2
    assert all("2 question(s), below the 6" in r for r in table["holdout_ci_withheld"])
    assert summary["holdout_ci"] is None and "below the 6" in summary["holdout_ci_withheld"]

    tracking = MlflowTracking(default_dir=str(tmp_path))
    client = tracking._client()
    ids = {}
    for k in runs:
        ids[k] = tracking.ensure_run(
            force=False,
            experiment="sweep",
            fingerprint=f"fp-{k}",
            tags={"config_key": k},
            run_name=k,
            params={},
            metrics={"token_f1": 0.5},
            per_query=pl.DataFrame({"query_id": ["q1"]}),
        )
    joined = board.with_columns(pl.format("fp-{}", "config_key").alias("fingerprint")).join(
        table.drop("selection_score"), on="config_key", how="left"
    )
    assert tracking.log_confirmation("sweep", joined, summary, "board-fp", {}) == 2
    for k in runs:
        data = client.get_run(ids[k]).data
        assert "holdout_overall_score" in data.metrics
        assert "holdout_ci_low" not in data.metrics and "holdout_ci_high" not in data.metrics
        assert "below the 6" in data.tags["holdout_ci_withheld"]


def test_a_holdout_whose_questions_all_score_alike_prints_no_interval():
    """18 holdout questions, every finalist right on every one: the verdict printed "95% CI 1.000–1.000"."""
    runs = {"a": per_query(wrong_on(20)), "b": per_query(wrong_on(21, offset=1))}
    board, decision = _decided(runs)
    table, summary = confirm(board, {k: per_query([1] * 18) for k in runs}, W, decision["recommended"])
    assert summary["status"] == "decided" and summary["confirmed"] is True
    assert "95% CI" not in summary["verdict"] and "no interval: no spread" in summary["verdict"]
    assert table["holdout_ci_low"].null_count() == 2
    # with spread, the interval is given as before
    spread = {k: per_query(wrong_on(5, n=18)) for k in runs}
    table, summary = confirm(board, spread, W, decision["recommended"])
    assert table["holdout_ci_low"].null_count() == 0 and "95% CI" in summary["verdict"]
