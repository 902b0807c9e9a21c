"""Tiers with Holm's correction, the detectable difference, constraints, the CI-aware Pareto front and the
recommendation, on hand-built per-query scores."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rag_core.decision.recommendation import (
    Constraints,
    bootstrap_scores,
    decide,
    holm,
    min_detectable_difference,
    pareto_front,
    tiers,
)

W = {"token_f1": 1.0}
W_PLAIN, W_JUDGED = W, {"token_f1": 0.9, "faithfulness_judge": 0.1}


def per_query(correct: list[int], latency_ms: float = 10.0) -> pl.DataFrame:
    n = len(correct)
    return pl.DataFrame(
        {
            "query_id": [f"q{i:03d}" for i in range(n)],
            "token_f1": [float(c) for c in correct],
            "retrieval_ms": [latency_ms] * n,
            "generation_ms": [0.0] * n,
        }
    )


def wrong_on(k: int, n: int = 100, offset: int = 0) -> list[int]:
    """Right on every question but k (at offset, offset+1, ...)."""
    return [0 if offset <= i < offset + k else 1 for i in range(n)]


def test_holm_adjusts_step_down():
    np.testing.assert_allclose(holm([0.01, 0.04, 0.03]), [0.03, 0.06, 0.06])
    np.testing.assert_allclose(holm([0.5]), [0.5])
    assert holm([0.4, 0.6]).tolist() == [0.8, 0.8]  # monotone and capped at 1


def test_tiers_group_configs_that_cannot_be_told_apart():
    runs = {
        "a": per_query(wrong_on(20)),
        "a_twin": per_query(wrong_on(21)),  # one question worse: indistinguishable
        "c": per_query(wrong_on(60)),
        "c_twin": per_query(wrong_on(61)),
    }
    tier, _ = tiers(bootstrap_scores(runs, W))
    assert tier.tolist() == [1, 1, 2, 2]


def test_holm_keeps_a_borderline_config_tied_when_several_are_compared():
    """Worse on 4 of 100 questions: p ≈ 0.03 against the leader. Alone, that is 'worse'; next to two more
    configs like it, Holm multiplies the smallest p by 3 and all three stay in the top tier."""
    leader = per_query([1] * 100)
    alone = tiers(bootstrap_scores({"best": leader, "b1": per_query(wrong_on(4))}, W))[0]
    assert alone.tolist() == [1, 2]
    many = {"best": leader, **{f"b{i}": per_query(wrong_on(4, offset=10 * i)) for i in range(3)}}
    tier, p_adj = tiers(bootstrap_scores(many, W))
    assert tier.tolist() == [1, 1, 1, 1] and (p_adj[1:] >= 0.05).all()


def test_the_detectable_difference_shrinks_with_more_questions():
    def mde(n: int) -> float:
        rng = np.random.default_rng(1)
        runs = {k: per_query(rng.integers(0, 2, n).tolist()) for k in ("x", "y", "z")}
        return min_detectable_difference(bootstrap_scores(runs, W), 0)

    small, large = mde(100), mde(400)
    assert 0.15 < small < 0.3  # binary scores, 100 questions: about 2.8 × sqrt(2 · 0.25 / 100)
    assert large == pytest.approx(small / 2, rel=0.2)


def test_a_cheaper_config_not_significantly_worse_dominates_on_the_front():
    runs = {
        "pricey": per_query(wrong_on(20)),
        "cheap_tied": per_query(wrong_on(22)),  # 2 questions worse: not significant
        "cheapest_bad": per_query(wrong_on(70)),  # far worse, but the cheapest: stays on the front
    }
    scores = bootstrap_scores(runs, W)
    front = pareto_front(scores, np.array([5.0, 1.0, 0.1]))
    assert front.tolist() == [False, True, True]
    # at equal cost only a significantly better config dominates
    assert pareto_front(scores, np.zeros(3)).tolist() == [True, True, False]


def _board(runs: dict[str, pl.DataFrame], cost_usd: dict[str, float]) -> pl.DataFrame:
    rows = [
        {
            "config_key": k,
            "overall_score": float(q["token_f1"].mean()),
            "token_f1": float(q["token_f1"].mean()),
            "recall_at_k": 0.9 if k != "slow_good" else 0.5,
            "cost_usd": cost_usd[k],
            "n_queries": float(q.height),
            "too_many_errors": False,
        }
        for k, q in runs.items()
    ]
    return pl.DataFrame(rows).sort("overall_score", descending=True)


def test_constraints_exclude_and_the_preference_picks_within_the_top_tier():
    runs = {
        "best": per_query(wrong_on(20), latency_ms=300.0),
        "tied_cheap": per_query(wrong_on(21), latency_ms=50.0),
        "tied_cheapest_slow": per_query(wrong_on(22), latency_ms=900.0),
        "worse_free": per_query(wrong_on(60), latency_ms=5.0),
    }
    board = _board(runs, {"best": 1.0, "tied_cheap": 0.5, "tied_cheapest_slow": 0.1, "worse_free": 0.0})
    out, summary = decide(board, runs, W, Constraints(max_p95_latency_ms=500))
    assert summary["top_tier"] == ["best", "tied_cheap", "tied_cheapest_slow"]
    # the cheapest of the top tier is too slow; the free one is not in the top tier
    assert summary["recommended"] == "tied_cheap"
    assert "top tier" in summary["why"] and "cheapest" in summary["why"]
    row = out.filter(pl.col("config_key") == "tied_cheapest_slow").row(0, named=True)
    assert not row["meets_constraints"] and row["violations"] == "p95 latency 900 ms > 500"
    assert out.filter(pl.col("recommended"))["config_key"].to_list() == ["tied_cheap"]
    assert decide(board, runs, W, Constraints(prefer="fastest"))[1]["recommended"] == "tied_cheap"
    assert decide(board, runs, W, Constraints(prefer="best"))[1]["recommended"] == "best"
    assert "statistically tied at the top" in summary["advice"]


def test_when_no_top_tier_config_qualifies_the_next_tier_is_used_and_said():
    runs = {
        "best": per_query(wrong_on(20), latency_ms=900.0),
        "worse": per_query(wrong_on(60), latency_ms=50.0),
    }
    board = _board(runs, {"best": 1.0, "worse": 1.0})
    _, summary = decide(board, runs, W, Constraints(max_p95_latency_ms=500))
    assert summary["recommended"] == "worse" and "tier 2" in summary["why"]
    _, none = decide(board, runs, W, Constraints(max_p95_latency_ms=1))
    assert none["recommended"] is None and "no config meets the constraints" in none["why"]


def test_the_ship_report_is_self_contained_and_says_what_to_ship():
    from rag_core.decision.report import effects, missed_questions, ship_report

    runs = {
        "best": per_query(wrong_on(20), latency_ms=300.0),
        "tied_cheap": per_query(wrong_on(21, offset=1), latency_ms=50.0),
        "worse_free": per_query(wrong_on(60), latency_ms=5.0),
    }
    for k, frame in runs.items():
        runs[k] = frame.with_columns(pl.lit(k).alias("answer"))
    board = _board(runs, {"best": 1.0, "tied_cheap": 0.5, "worse_free": 0.0}).with_columns(
        pl.Series("retrieval.mode", ["vector", "hybrid", "bm25"]),
        pl.Series("overall_ci_low", [0.7, 0.7, 0.3]),
        pl.Series("overall_ci_high", [0.9, 0.9, 0.5]),
        pl.Series("overall_ci95", ["0.7–0.9"] * 2 + ["0.3–0.5"]),
        pl.Series("rank", [1, 2, 3]),
    )
    out, decision = decide(board, runs, W, Constraints())
    qa = pl.DataFrame(
        {
            "query_id": [f"q{i:03d}" for i in range(100)],
            "question": [f"Q{i}?" if i != 20 else "<script>alert(1)</script>Q20?" for i in range(100)],
            "answers": [["a"]] * 100,
        }
    )
    md, page, plots = ship_report("demo", out, decision, runs, qa, W, {"prefer": "cheapest"})
    # the data's HTML is escaped in both reports (the Markdown one is rendered by MLflow's artifact view)
    assert "<script>" not in md and "&lt;script&gt;alert(1)&lt;/script&gt;Q20?" in md
    assert "<script>" not in page
    assert decision["recommended"] == "tied_cheap"
    assert "**tied_cheap**" in md and "## Top tier" in md and "## What each setting did" in md
    assert 'src="http' not in page and page.count('src="data:image/png;base64,') == len(plots) == 2
    # tied_cheap is wrong on q001..q021, best on q000..q019: best answers q020 and q021 that it misses
    missed = missed_questions(runs, qa, W, "tied_cheap")
    assert (
        missed["query_id"].to_list() == ["q020", "q021"] and missed["other_config"].to_list() == ["best"] * 2
    )
    assert missed["question"].to_list() == ["<script>alert(1)</script>Q20?", "Q21?"]
    modes = effects(out).filter(pl.col("setting") == "retrieval.mode")
    assert modes["value"].to_list() == ["vector", "hybrid", "bm25"]  # by mean overall score
    assert "Dropped by the search" not in md
    halved = {**decision, "questions": 100, "not_ranked": {"early": 10, "later": 40}}
    md, _, _ = ship_report("demo", out, halved, runs, qa, W, {})
    dropped = md.split("## Dropped by the search")[1]
    assert "not ranked on all 100" in dropped and dropped.index("later") < dropped.index("early")
    assert "Scores per language" not in md  # one language: no slices
    # a QA set in several languages: each config's score per language, with each language's questions
    slices = out.with_columns(
        pl.Series("score_lang_de", [0.61234, 0.5, 0.2]),
        pl.Series("n_questions_lang_de", [40, 40, 40]),
        pl.Series("score_lang_en", [0.9, 0.8, 0.4]),
        pl.Series("n_questions_lang_en", [60, 60, 60]),
    )
    md, page, _ = ship_report("demo", slices, decision, runs, qa, W, {})
    section = md.split("## Scores per language")[1].split("## ")[0]
    assert "(questions: de 40, en 60)" in section and "0.6123" in section
    assert section.index("| de | en |") < section.index("tied_cheap")
    assert "<h2>Scores per language</h2><p>Each language&#x27;s score" in page  # its note, then its table
    assert "The judge against the labels" not in md  # no judge measured: no section
    judged = {
        **decision,
        "judge": {
            "model": "openai/small",
            "labels": "/data/judge_labels.jsonl",
            "reason": "reported, not weighted: kappa undefined on 20 labels (the judge gave one verdict only)",
            "n": 20,
            "failures": 4,
            "accuracy": 0.55,
            "accuracy_low": 0.342,
            "accuracy_high": 0.742,
            "base_rate": 0.55,
            "judge_rate": 1.0,
            "confusion": {"both_supported": 11, "human_only": 0, "judge_only": 9, "both_unsupported": 0},
        },
    }
    md, page, _ = ship_report("demo", out, judged, runs, qa, W, {})
    section = md.split("## The judge against the labels")[1].split("## ")[0]
    assert (
        "openai/small on the labels of judge_labels.jsonl: reported, not weighted: kappa undefined" in section
    )
    assert "On 20 labels (4 more gave no verdict): accuracy 0.55 (95% 0.34–0.74)" in section
    assert "| supported | 11 | 9 |" in section and "| not supported | 0 | 0 |" in section
    assert "<h2>The judge against the labels</h2><p>openai/small on the labels of judge_labels.jsonl" in page


def test_one_question_and_identical_scores_give_advice_not_a_crash():
    runs = {"a": per_query([1]), "b": per_query([1])}
    board = _board(runs, {"a": 0.0, "b": 0.0})
    out, summary = decide(board, runs, W, Constraints())
    assert out["tier"].to_list() == [1, 1] and summary["recommended"] in {"a", "b"}
    # one question supports no claim about more questions either: it says how many a claim takes
    assert "would not change the choice" not in summary["advice"]
    assert "at least 6 questions" in summary["advice"] and summary["min_detectable_difference"] is None


@pytest.mark.parametrize("n", [1, 2, 5])
def test_too_few_questions_for_any_test_claim_nothing(n):
    """Right on every question against wrong on every one: on fewer than 6 questions even that cannot
    reach p < 0.05 in a paired test (its smallest p is 2/2^n), so no config is 'worse', no power figure
    is stated and no p-value of 0 from a bootstrap of identical resamples is shown."""
    runs = {"right": per_query([1] * n), "wrong": per_query([0] * n)}
    board = _board(runs, {"right": 0.0, "wrong": 0.0})
    out, summary = decide(board.with_columns(pl.lit("x").alias("vs_leader")), runs, W, Constraints())
    assert out["tier"].to_list() == [1, 1] and "worse" not in out["vs_leader"].to_list()
    assert summary["min_detectable_difference"] is None and not summary["enough_questions"]
    assert f"with {n} question(s)" in summary["advice"] and "at least 6 questions" in summary["advice"]
    assert "detects overall-score differences" not in summary["advice"]


def test_six_questions_are_enough_to_call_a_config_worse():
    runs = {"right": per_query([1] * 6), "wrong": per_query([0] * 6)}
    out, summary = decide(_board(runs, {"right": 0.0, "wrong": 0.0}), runs, W, Constraints())
    assert out["tier"].to_list() == [1, 2] and summary["enough_questions"]


def test_min_questions_follow_the_smallest_paired_p_value():
    from rag_core.metrics.stats import min_questions_for_claim, smallest_paired_p

    assert smallest_paired_p(5) == 2 / 32 and smallest_paired_p(6) == 2 / 64
    assert [min_questions_for_claim(a) for a in (0.05, 0.01, 0.1)] == [6, 8, 5]


def test_no_config_is_recommended_when_every_config_failed():
    """Every LLM call failed: each config is over the error threshold. None is tiered or recommended
    (today's board ranked them anyway and recommended one), and the summary says why."""
    runs = {"a": per_query([0] * 20), "b": per_query([0] * 20)}
    board = _board(runs, {"a": 0.0, "b": 0.0}).with_columns(pl.lit(True).alias("too_many_errors"))
    out, summary = decide(board, runs, W, Constraints())
    assert summary["recommended"] is None and summary["top_tier"] == []
    assert out["tier"].to_list() == [None, None] and not out["recommended"].any()
    assert summary["why"].startswith("no config qualifies: of 2 configs, 2 had LLM calls fail")


def test_a_config_without_a_score_never_ranks_or_is_recommended():
    """A NaN overall score (an undefined metric that slipped through) sorts above every number in a
    descending sort: it must instead rank last, untiered, and never be recommended."""
    from rag_core.decision.leaderboard import compare_to_leader, rank_configs

    runs = {"nan": per_query(wrong_on(10)), "ok": per_query(wrong_on(30))}
    summaries = pl.DataFrame(
        {
            "config_key": ["nan", "ok"],
            "token_f1": [float("nan"), 0.7],
            "cost_usd": [0.0, 0.0],
            "n_queries": [100.0, 100.0],
            "n_generation_errors": [0.0, 0.0],
            "retrieval_p50_ms": [1.0, 1.0],
            "generation_p50_ms": [0.0, 0.0],
        }
    )
    board = compare_to_leader(rank_configs(summaries, W), runs, W)
    assert board["config_key"].to_list() == ["ok", "nan"] and board["vs_leader"].to_list() == [
        "leader",
        "no score",
    ]
    out, summary = decide(board, runs, W, Constraints())
    assert summary["recommended"] == "ok" and out["tier"].to_list() == [1, None]


@pytest.mark.parametrize(
    ("stage", "failed", "calls"),
    [
        ("hops", "n_hop_fallbacks", "hop_llm_calls"),
        ("query_transform", "n_query_transform_fallbacks", "n_query_transform_calls"),
        ("rerank", "n_rerank_fallbacks", "n_rerank_calls"),
        ("context_compression", "n_context_compression_fallbacks", "n_context_compression_calls"),
        ("generation", "n_generation_errors", "n_generation_calls"),
        ("judge", "n_judge_failures", "n_judge_calls"),
    ],
)
def test_a_config_over_the_threshold_in_any_llm_stage_is_not_tiered_or_recommended(stage, failed, calls):
    """A hop model that failed all 80 calls made its config search more and score best: it ranked first in
    tier 1. Any LLM-backed stage over the threshold keeps a config out, whatever its score."""
    from rag_core.decision.leaderboard import compare_to_leader, rank_configs, terminal_columns

    runs = {"down": per_query(wrong_on(0)), "ok": per_query(wrong_on(30)), "flaky": per_query(wrong_on(31))}
    summaries = pl.DataFrame(
        {
            "config_key": ["down", "ok", "flaky"],
            "token_f1": [1.0, 0.7, 0.69],
            "cost_usd": [0.0, 0.0, 0.0],
            "n_queries": [100.0] * 3,
            "n_generation_errors": [0.0] * 3,
            "retrieval_p50_ms": [1.0] * 3,
            "generation_p50_ms": [0.0] * 3,
        }
    ).with_columns(pl.Series(failed, [80.0, 0.0, 10.0]), pl.Series(calls, [80.0, 100.0, 100.0]))
    W = W_JUDGED if stage == "judge" else W_PLAIN  # a judge counts where its metric is weighted
    if stage == "judge":  # the same verdict on every answer: no config's score moves
        runs = {k: f.with_columns(pl.lit(1.0).alias("faithfulness_judge")) for k, f in runs.items()}
        summaries = summaries.with_columns(pl.lit(1.0).alias("faithfulness_judge"))
    board = compare_to_leader(rank_configs(summaries, W), runs, W)
    assert board["config_key"].to_list() == ["ok", "flaky", "down"]
    assert board["too_many_errors"].to_list() == [False, False, True]  # 10 of 100 is 10%: not more
    assert board["failed_stages"].to_list() == ["", "", f"{stage} 80 of 80 calls"]
    assert board[f"failed_share_{stage}"].to_list() == [0.0, 0.1, 1.0]
    assert board["vs_leader"][2] == "too many errors" and "failed_stages" in terminal_columns(board)
    out, summary = decide(board, runs, W, Constraints())
    assert summary["recommended"] == "ok" and out["tier"][2] is None and not out["recommended"][2]


def test_latency_noise_within_the_band_does_not_decide_between_free_configs():
    def pick(slow_ms: float) -> str:
        runs = {
            "better": per_query(wrong_on(20), latency_ms=slow_ms),
            "quick": per_query(wrong_on(21, offset=1), latency_ms=10.0),
        }
        board = _board(runs, {"better": 0.0, "quick": 0.0})
        return decide(board, runs, W, Constraints())[1]["recommended"]

    assert pick(15.0) == "better"  # 1.5x the fastest: equally fast, so the better score decides
    assert pick(30.0) == "quick"  # 3x: really slower


def test_tiers_follow_the_score_order_a_noisy_tie_keeps_the_steadier_configs_above_it():
    """On a 10-question sweep rank 4 was "worse" while ranks 5 and 6 were "tied" with the leader: a steady
    small gap is significant, a larger noisy one is not. The tie now keeps every config above it in tier 1,
    so tiers never go up as the score goes down."""
    from rag_core.decision.recommendation import Scores

    rng = np.random.default_rng(0)
    base = rng.normal(0.8, 0.02, 2000)
    samples = np.stack(
        [
            base,  # the leader
            base - 0.01,  # steady: always 0.01 below, significantly worse on its own
            base - 0.05 + rng.normal(0, 0.1, 2000),  # noisy: not significantly worse
            base - 0.3,  # far below, steady: worse
        ],
        axis=1,
    )
    scores = Scores(["lead", "steady", "noisy", "far"], np.array([0.8, 0.79, 0.75, 0.5]), samples)
    tier, p_adj = tiers(scores)
    assert p_adj[1] < 0.05 <= p_adj[2]  # what the test alone says
    assert tier.tolist() == [1, 1, 1, 2]
    assert (np.diff(tier[np.argsort(-scores.observed)]) >= 0).all()


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 7), st.integers(0, 10_000))
def test_tiers_never_go_up_as_the_score_goes_down(n_configs, seed):
    from rag_core.decision.recommendation import Scores

    rng = np.random.default_rng(seed)
    spread = rng.uniform(0.0, 0.2, n_configs)
    samples = rng.normal(0.5, 0.05, (500, 1)) + rng.normal(
        rng.uniform(-0.1, 0.1, n_configs), spread, (500, n_configs)
    )
    scores = Scores([f"c{i}" for i in range(n_configs)], samples.mean(axis=0), samples)
    tier, _ = tiers(scores)
    ordered = tier[np.argsort(-scores.observed, kind="stable")]
    assert ordered[0] == 1 and set(np.diff(ordered)) <= {0, 1}


def test_the_ship_report_names_configs_by_label_and_gives_each_full_key_once():
    """A board with labels (every sweep's): the report's tables, titles and sentences name configs by label
    (a 60-character key made the tables unreadable), the recommendation with its key beside it, and one
    last table gives every label's key; the recommended row is still highlighted."""
    from rag_core.decision.report import ship_report

    keys = {"best": "chunks-a__model__store__vector-k5", "tied_cheap": "chunks-a__model__store__bm25-k5",
            "worse_free": "chunks-b__model__store__bm25-k2"}  # fmt: skip
    runs = {
        keys["best"]: per_query(wrong_on(20), latency_ms=300.0),
        keys["tied_cheap"]: per_query(wrong_on(21, offset=1), latency_ms=50.0),
        keys["worse_free"]: per_query(wrong_on(60), latency_ms=5.0),
    }
    runs = {k: frame.with_columns(pl.lit("x").alias("answer")) for k, frame in runs.items()}
    board = _board(runs, {keys["best"]: 1.0, keys["tied_cheap"]: 0.5, keys["worse_free"]: 0.0}).with_columns(
        pl.Series("overall_ci_low", [0.7, 0.7, 0.3]),
        pl.Series("overall_ci_high", [0.9, 0.9, 0.5]),
        pl.Series("overall_ci95", ["0.7–0.9"] * 2 + ["0.3–0.5"]),
        pl.Series("rank", [1, 2, 3]),
    )
    out, decision = decide(board, runs, W, Constraints())
    labels = {keys["best"]: "a·vector·k5", keys["tied_cheap"]: "a·bm25·k5", keys["worse_free"]: "b·bm25·k2"}
    out = out.with_columns(pl.col("config_key").replace_strict(labels).alias("label"))
    qa = pl.DataFrame(
        {"query_id": [f"q{i:03d}" for i in range(100)], "question": ["?"] * 100, "answers": [["a"]] * 100}
    )
    md, page, _ = ship_report("demo", out, decision, runs, qa, W, {})
    rec = decision["recommended"]
    assert rec == keys["tied_cheap"]
    assert f"**a·bm25·k5** (config {rec})" in md
    body, key_table = md.split("## The configs by label: their full keys")
    # before the last section, no key at all: each config by its label
    assert not any(k in body.split("\n\n", 3)[-1] for k in keys.values())
    assert "| config |" in body and "| a·vector·k5 |" in body and "## Questions a·bm25·k5 misses" in body
    assert all(f"| {labels[k]} | {k} |" in key_table for k in keys.values())
    assert "<tr class=\"rec\"><td>2</td><td class='one-line'>a·bm25·k5</td>" in page
    # a board without labels names configs by key, as before
    md, _, _ = ship_report("demo", out.drop("label"), decision, runs, qa, W, {})
    assert f"**{rec}**" in md and "full keys" not in md


def test_the_ship_report_of_a_sweep_where_no_config_qualifies_lists_them_and_names_no_winner():
    from rag_core.decision.leaderboard import compare_to_leader, rank_configs
    from rag_core.decision.report import ship_report

    runs = {"a": per_query([0] * 20), "b": per_query([1] * 10 + [0] * 10)}
    summaries = pl.DataFrame(
        {
            "config_key": ["a", "b"],
            "token_f1": [0.0, 0.5],
            "cost_usd": [0.0, 0.0],
            "n_queries": [20.0, 20.0],
            "n_generation_errors": [20.0, 20.0],
            "retrieval_p50_ms": [1.0, 1.0],
            "generation_p50_ms": [0.0, 0.0],
        }
    )
    board, decision = decide(compare_to_leader(rank_configs(summaries, W), runs, W), runs, W, Constraints())
    board = board.with_columns(pl.col("config_key").alias("label"))
    decision.update(weights=W, undefined_metrics=[], questions=20)
    qa = pl.DataFrame(
        {"query_id": [f"q{i:03d}" for i in range(20)], "question": ["?"] * 20, "answers": [["x"]] * 20}
    )
    md, _, _ = ship_report("outage", board, decision, runs, qa, W, {}, None, [])
    assert "**none**" in md and "no config qualifies" in md and "None" not in md
    others = md.split("## The other configs")[1]
    assert "too many errors" in others and "| b |" in others and "| a |" in others


def _noisy(correct: list[int], median_ms: float, load: float, seed: int) -> pl.DataFrame:
    """Per-question latencies around `median_ms` (a right-skewed spread, as measured), times a `load`
    factor that differs by config: a config measured while the machine was busier."""
    q = per_query(correct)
    rng = np.random.default_rng(seed)
    return q.with_columns(pl.Series("retrieval_ms", median_ms * load * rng.lognormal(0, 0.35, q.height)))


def test_a_latency_preference_rests_only_on_differences_beyond_the_p95s_intervals():
    """Three configs tied in score: `best` scores highest but its p95 is about 2.05x the fastest's, a hair
    past the band. Its p95's own interval overlaps the band, so it is equally fast and recommended, on
    every redraw of which questions happened to be slow and on a machine 1.5x slower or faster throughout
    (the band alone flipped with the draw). A config 6x slower is slower on every draw."""
    n = 100
    picks, band_alone = set(), set()
    for trial in range(12):
        load = (0.67, 1.0, 1.5)[trial % 3]
        runs = {
            "best": _noisy(wrong_on(20, n), 20.5, load, 10 + trial),
            "fast": _noisy(wrong_on(22, n), 10.0, load, 20 + trial),
            "other": _noisy(wrong_on(21, n), 12.0, load, 30 + trial),
        }
        board = _board(runs, {"best": 0.0, "fast": 0.0, "other": 0.0})
        out, summary = decide(board, runs, W, Constraints())
        assert set(summary["top_tier"]) == set(runs)
        picks.add(summary["recommended"])
        row = out.filter(pl.col("config_key") == "best").row(0, named=True)
        assert row["p95_latency_ci_low"] <= row["p95_latency_ms"] <= row["p95_latency_ci_high"]
        within = out["p95_latency_ms"].min() * 2.0 >= row["p95_latency_ms"]
        band_alone.add("best" if within else "other")
    assert picks == {"best"}
    assert band_alone == {"best", "other"}  # what the band on the point estimates alone would have done
    for seed in range(5):
        runs = {
            "best": _noisy(wrong_on(20, n), 60.0, 1.0, seed),
            "fast": _noisy(wrong_on(22, n), 10.0, 1.0, 9 + seed),
        }
        assert (
            decide(_board(runs, {"best": 0.0, "fast": 0.0}), runs, W, Constraints())[1]["recommended"]
            == "fast"
        )


def test_a_judge_failing_on_the_wrong_answers_neither_wins_nor_reads_as_perfect():
    """A judge failing on exactly 10% of calls (under the error threshold), all on the 6 wrong answers of 60:
    its mean over the rest is 1.000. The config is flagged (its failures fall where token F1 is lower), not
    tiered nor recommended, and compared with another config on the questions both define."""
    n = 60
    wrong = set(range(6))
    judged = pl.DataFrame(
        {
            "query_id": [f"q{i:03d}" for i in range(n)],
            "token_f1": [0.0 if i in wrong else 1.0 for i in range(n)],
            "faithfulness_judge": [None if i in wrong else 1.0 for i in range(n)],
            "retrieval_ms": [10.0] * n,
            "generation_ms": [0.0] * n,
        },
        schema_overrides={"faithfulness_judge": pl.Float64},
    )
    honest = judged.with_columns(
        pl.Series("faithfulness_judge", [0.0 if i in wrong else 1.0 for i in range(n)])
    )
    weights = {"faithfulness_judge": 1.0}
    runs = {"biased": judged, "honest": honest}
    board = pl.DataFrame(
        [
            {"config_key": k, "overall_score": float(q["faithfulness_judge"].mean()), "cost_usd": 0.0,
             "n_queries": float(n), "too_many_errors": False}
            for k, q in runs.items()
        ]
    ).sort("overall_score", descending=True)  # fmt: skip
    scores = bootstrap_scores(runs, weights)
    assert scores.observed.tolist() == [1.0, 0.9]
    assert np.all(scores.diff(0, 1) == 0.0)  # on the 54 questions both define they are the same
    out, summary = decide(board, runs, weights, Constraints())
    row = out.filter(pl.col("config_key") == "biased").row(0, named=True)
    assert "gave no verdict on 6 of 60 answers" in row["judge_failures_not_at_random"]
    assert row["tier"] is None and summary["recommended"] == "honest"
    assert out.filter(pl.col("config_key") == "honest")["judge_failures_not_at_random"].to_list() == [None]


def test_a_judge_that_is_not_weighted_sets_no_config_aside_for_its_failures():
    """A judge reported but not in the overall score changes no config's score: its failures (80 of 80)
    are counted on the board and set nothing aside; weighted, the same failures keep the config out. And
    a judge the labels do not trust is not weighted either."""
    from rag_core.decision.leaderboard import compare_to_leader, rank_configs
    from rag_core.decision.qualification import judge_is_weighted

    runs = {"judged": per_query(wrong_on(0)), "other": per_query(wrong_on(30))}
    runs = {k: f.with_columns(pl.lit(1.0).alias("faithfulness_judge")) for k, f in runs.items()}
    summaries = pl.DataFrame(
        {
            "config_key": ["judged", "other"],
            "token_f1": [1.0, 0.7],
            "faithfulness_judge": [1.0, 1.0],
            "cost_usd": [0.0, 0.0],
            "n_queries": [100.0] * 2,
            "n_generation_errors": [0.0] * 2,
            "retrieval_p50_ms": [1.0] * 2,
            "generation_p50_ms": [0.0] * 2,
            "n_judge_failures": [80.0, 0.0],
            "n_judge_calls": [80.0, 100.0],
        }
    )
    for weights, out_of_tiers in ((W_PLAIN, False), (W_JUDGED, True)):
        counts = judge_is_weighted(weights)
        assert counts == out_of_tiers
        board = compare_to_leader(rank_configs(summaries, weights, counts), runs, weights)
        row = board.filter(pl.col("config_key") == "judged").row(0, named=True)
        assert row["failed_share_judge"] == 1.0 and row["too_many_errors"] == out_of_tiers
        out, summary = decide(board, runs, weights, Constraints())
        assert (summary["recommended"] == "judged") != out_of_tiers, summary
    assert not judge_is_weighted(W_JUDGED, {"weighted": False}) and judge_is_weighted(
        W_JUDGED, {"weighted": True}
    )
