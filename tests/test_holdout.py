"""The holdout: a seeded split that never changes, the finalists, and the confirmation of the recommendation
on questions the choice never saw (a case built so that the selection winner is worse on the holdout)."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from rag_core.decision.holdout import (
    HOLDOUT,
    SELECTION,
    confirm,
    finalists,
    holdout_ids,
    holdout_share,
    is_holdout_key,
    selection_key,
    split_rows,
    unsupported_claim,
)
from rag_core.decision.recommendation import Constraints, decide
from rag_core.planning.plan import Plan
from rag_core.planning.spec import sweep_from_dict
from tests.test_decision import W, _board, per_query, wrong_on


@pytest.mark.parametrize("n,seed", [(1, 0), (2, 1), (7, 0), (60, 2), (101, 3)])
def test_the_split_is_seeded_exact_in_size_and_blind_to_row_order(n, seed):
    ids = [f"q{random.Random(n).randrange(10**6)}-{i}" for i in range(n)]
    held = holdout_ids(ids, 0.3, seed)
    assert len(held) == round(0.3 * len(ids)) and held <= set(ids)
    shuffled = list(ids)
    random.Random(7).shuffle(shuffled)
    assert holdout_ids(shuffled, 0.3, seed) == held  # the same questions, whatever the file's order
    assert holdout_ids(ids, 0.0, seed) == set()
    qa = pl.DataFrame({"query_id": ids, "question": ids})
    sel, hold = split_rows(qa, SELECTION, 0.3, seed), split_rows(qa, HOLDOUT, 0.3, seed)
    assert set(sel["query_id"]) | set(hold["query_id"]) == set(ids)
    assert not set(sel["query_id"]) & set(hold["query_id"])
    assert sel["query_id"].to_list() == [q for q in ids if q not in held]  # the file's order kept


def test_holdout_keys_name_their_selection_partition():
    assert is_holdout_key("a__b~holdout") and selection_key("a__b~holdout") == "a__b"
    assert not is_holdout_key("a__b") and selection_key("a__b") == "a__b" and not is_holdout_key(None)


def _decided(runs: dict[str, pl.DataFrame], constraints: Constraints | None = None):
    board = _board(runs, dict.fromkeys(runs, 0.0)).with_columns(
        pl.Series("rank", list(range(1, len(runs) + 1)))
    )
    return decide(board, runs, W, constraints or Constraints())


def test_a_selection_winner_worse_on_the_holdout_is_not_confirmed_and_the_better_finalist_is_named():
    # on 100 selection questions: `lucky` and `steady` tie at the top, `weak` is far behind
    runs = {
        "lucky": per_query(wrong_on(20)),
        "steady": per_query(wrong_on(22, offset=1)),
        "weak": per_query(wrong_on(70)),
    }
    board, decision = _decided(runs, Constraints(prefer="best"))
    assert decision["top_tier"] == ["lucky", "steady"] and decision["recommended"] == "lucky"
    assert finalists(board, decision) == ["lucky", "steady"]
    # on 40 holdout questions `lucky` is wrong on 20, `steady` on 2: significantly worse, not confirmed
    holdout = {"lucky": per_query(wrong_on(20, n=40)), "steady": per_query(wrong_on(2, n=40))}
    table, summary = confirm(board, holdout, W, decision["recommended"])
    assert summary["confirmed"] is False and summary["instead"] == "steady"
    assert summary["holdout_best"] == "steady" and summary["n_questions"] == 40
    row = table.filter(pl.col("config_key") == "lucky").row(0, named=True)
    assert row["holdout_overall_score"] == 0.5 and abs(row["winners_curse_drop"] - 0.3) < 1e-12
    assert row["holdout_ci_low"] < 0.5 < row["holdout_ci_high"]
    assert row["holdout_p_holm_vs_best"] < 0.05 and not row["holdout_tied_with_best"]
    assert "NOT confirmed" in summary["verdict"] and "steady instead" in summary["verdict"]


def test_a_recommendation_tied_on_the_holdout_is_confirmed():
    runs = {"a": per_query(wrong_on(20)), "b": per_query(wrong_on(21, offset=1))}
    board, decision = _decided(runs)
    holdout = {"a": per_query(wrong_on(10, n=40)), "b": per_query(wrong_on(9, n=40, offset=3))}
    table, summary = confirm(board, holdout, W, decision["recommended"])
    assert summary["confirmed"] is True and summary["instead"] is None
    assert table["holdout_tied_with_best"].to_list() == [True, True]
    assert summary["verdict"].startswith("confirmed:")


def _failing(per: pl.DataFrame, k: int) -> pl.DataFrame:
    """The per-query frame with the first k questions' LLM calls failed (scored 0, error kept)."""
    errors = [f"AuthenticationError: 401 #{i}" if i < k else None for i in range(per.height)]
    return per.with_columns(
        pl.Series("error", errors, pl.String),
        pl.when(pl.Series(errors).is_not_null()).then(0.0).otherwise(pl.col("token_f1")).alias("token_f1"),
    )


def test_a_holdout_with_failed_calls_confirms_nothing_and_says_so():
    """Every holdout call of the recommended config failed: its 0.0 is an outage, not a score. Today the
    verdict read 'confirmed … (drop +0.6290, the winner's curse)'; it must confirm nothing, count the
    failures, and block shipping."""
    runs = {"a": per_query(wrong_on(20)), "b": per_query(wrong_on(21, offset=1))}
    board, decision = _decided(runs)
    rec = decision["recommended"]
    holdout = {k: per_query(wrong_on(10, n=40)) for k in runs}
    holdout[rec] = _failing(holdout[rec], 40)
    table, summary = confirm(board, holdout, W, rec)
    assert summary["confirmed"] is None and summary["status"] == "failed"
    assert summary["failed_calls"] == {rec: 40}
    assert table.filter(pl.col("config_key") == rec)["n_holdout_errors"][0] == 40
    assert "confirmed:" not in summary["verdict"] and "winner's curse" not in summary["verdict"]
    assert (
        "40 LLM call(s)" in summary["verdict"] and "rerun asks the failed calls again" in summary["verdict"]
    )
    assert unsupported_claim({**decision, "holdout": summary}) == summary["verdict"]
    # one failed call of another finalist is enough: the comparison is not of quality
    holdout = {k: per_query(wrong_on(10, n=40)) for k in runs}
    other = next(k for k in runs if k != rec)
    holdout[other] = _failing(holdout[other], 1)
    assert confirm(board, holdout, W, rec)[1]["status"] == "failed"


@pytest.mark.parametrize("n", [1, 2, 5])
def test_a_holdout_too_small_for_any_paired_test_confirms_nothing(n):
    runs = {"a": per_query(wrong_on(20)), "b": per_query(wrong_on(21, offset=1))}
    board, decision = _decided(runs)
    holdout = {k: per_query([1] * n) for k in runs}
    _, summary = confirm(board, holdout, W, decision["recommended"])
    assert summary["confirmed"] is None and summary["status"] == "too few questions"
    assert (
        f"on {n} question(s)" in summary["verdict"] and "at least 6 holdout questions" in summary["verdict"]
    )
    assert not summary["verdict"].startswith("confirmed")
    assert unsupported_claim({**decision, "holdout": summary}) is None  # inconclusive is no failure


def test_a_config_better_on_the_holdout_is_no_winners_curse():
    runs = {"a": per_query(wrong_on(50)), "b": per_query(wrong_on(51, offset=1))}
    board, decision = _decided(runs)
    holdout = {k: per_query(wrong_on(4, n=40)) for k in runs}
    _, summary = confirm(board, holdout, W, decision["recommended"])
    assert summary["drop"] < 0 and summary["confirmed"] is True
    assert "winner's curse" not in summary["verdict"] and "higher on the holdout" in summary["verdict"]


def test_the_printed_holdout_size_is_the_split_not_the_setting():
    """`holdout: 0.99` on 3 questions holds out 2 (one stays to choose on): '2 of 3', not '99%'."""
    held = holdout_ids(["q1", "q2", "q3"], 0.99, 0)
    assert len(held) == 2
    assert holdout_share({"questions": 1, "holdout": {"share": 0.99, "questions": 2}}) == "2 of 3 questions"


def test_no_finalist_and_nothing_to_ship_when_no_config_qualifies():
    runs = {"a": per_query([0] * 20), "b": per_query([0] * 20)}
    board = _board(runs, {"a": 0.0, "b": 0.0}).with_columns(pl.lit(True).alias("too_many_errors"))
    board, decision = decide(board, runs, W, Constraints())
    assert finalists(board, decision) == []
    assert unsupported_claim(decision).startswith("no config qualifies")


def test_the_finalists_add_the_best_config_that_meets_the_constraints():
    runs = {
        "fast_bad": per_query(wrong_on(60), latency_ms=5.0),
        "slow_good": per_query(wrong_on(10), latency_ms=900.0),
    }
    board, decision = _decided(runs, Constraints(max_p95_latency_ms=100))
    assert decision["top_tier"] == ["slow_good"] and decision["recommended"] == "fast_bad"
    assert finalists(board, decision) == ["slow_good", "fast_bad"]


def _sweep(holdout: float):
    from pathlib import Path

    raw = {
        "name": "s",
        "data": {"corpus": "c.parquet", "qa": "q.parquet"},
        "chunking": {"method": "fixed", "chunk_size": 200, "chunk_overlap": 0},
        "retrieval": {"mode": ["vector", "bm25"], "top_k": 3},
        "decision": {"holdout": holdout},
    }
    return sweep_from_dict(raw, Path("/tmp/s.yaml"))


def test_the_plan_mirrors_every_question_stage_on_the_holdout_and_zero_turns_it_off():
    plan, off = Plan.resolve(_sweep(0.3)), Plan.resolve(_sweep(0))
    assert plan.holdout and not off.holdout
    assert set(plan.holdout_partitions) == {"retrievals", "rerankings", "answers", "evaluations"}
    assert plan.config_keys == off.config_keys  # selection: the configs, as before
    key = plan.config_keys[0]
    steps = plan.holdout_steps(key)
    assert [s for s, _ in steps] == ["retrievals", "rerankings", "answers", "evaluations"]
    assert all(is_holdout_key(k) for _, k in steps)
    # a holdout retrieval reads the selection's index; everything after it reads the holdout's partitions
    ret = plan.partition("retrievals", steps[0][1])
    assert not is_holdout_key(ret.reads["vector_index"]) and ret.split == HOLDOUT
    assert plan.partition("evaluations", key).split == SELECTION
    inputs = {"corpus": "c1", "qa_set": "q1"}
    fps, fps_off = plan.fingerprints(inputs), off.fingerprints(inputs)
    # the index is shared; every partition that reads questions differs by split, and from the whole set
    assert (
        fps[("vector_index", plan.keys("vector_index")[0])]
        == fps_off[("vector_index", off.keys("vector_index")[0])]
    )
    assert (
        len(
            {fps[("evaluations", key)], fps[("evaluations", key + "~holdout")], fps_off[("evaluations", key)]}
        )
        == 3
    )
    # a halving rung narrows the selection only
    rung = plan.fingerprints(inputs, rung=5)
    assert rung[("evaluations", key)] != fps[("evaluations", key)]
    assert rung[("evaluations", key + "~holdout")] == fps[("evaluations", key + "~holdout")]
    assert plan.all_keys("evaluations") == [*plan.config_keys, *(k + "~holdout" for k in plan.config_keys)]
    # one holdout partition per config at every holdout stage, keyed by the config (the finalists'
    # partitions), whatever the stage's selection key
    for stage in plan.holdout_partitions:
        assert list(plan.holdout_partitions[stage]) == [k + "~holdout" for k in plan.config_keys]


def test_two_finalists_that_share_a_stage_share_its_holdout_artifact():
    """Two generation models over one retrieval: their holdout retrievals are two partitions (one per
    finalist) of one content, so the second reuses the first's artifact; their answers differ."""
    raw = {
        "name": "s",
        "data": {"corpus": "c.parquet", "qa": "q.parquet"},
        "chunking": {"method": "fixed", "chunk_size": 200, "chunk_overlap": 0},
        "retrieval": {"mode": "bm25", "top_k": 3},
        "generation": {"model": ["openai/a", "openai/b"]},
        "decision": {"holdout": 0.3},
    }
    plan = Plan.resolve(sweep_from_dict(raw, Path("/tmp/s.yaml")))
    a, b = (k + "~holdout" for k in plan.config_keys)
    fps = plan.fingerprints({"corpus": "c1", "qa_set": "q1"})
    assert (
        fps[("retrievals", a)] == fps[("retrievals", b)] and fps[("rerankings", a)] == fps[("rerankings", b)]
    )
    assert fps[("answers", a)] != fps[("answers", b)]


def test_samples_are_averaged_per_question_and_their_variance_is_split():
    from rag_core.evaluation.evaluate import mean_over_samples, variance_split

    # q1: right, wrong, right; q2: wrong three times; q3: right three times
    em = {"q1": [1.0, 0.0, 1.0], "q2": [0.0, 0.0, 0.0], "q3": [1.0, 1.0, 1.0]}
    per_sample = pl.DataFrame(
        [
            {
                "query_id": q,
                "sample": i,
                "answer": f"a{i}",
                "error": None,
                "exact_match": v,
                "recall_at_k": 0.5,
                "retrieval_ms": 1.0,
                "generation_ms": float(i),
            }
            for q, values in em.items()
            for i, v in enumerate(values)
        ],
        schema_overrides={"error": pl.String},
    )
    per_query = mean_over_samples(per_sample)
    assert per_query["exact_match"].to_list() == pytest.approx([2 / 3, 0.0, 1.0])
    assert per_query["n_samples"].to_list() == [3, 3, 3] and per_query["answer"].to_list() == ["a0"] * 3
    assert per_query["generation_ms"].to_list() == [1.0, 1.0, 1.0]
    split = variance_split(per_query, {"exact_match": 1.0})
    assert split["score_var_within_questions"] == pytest.approx((1 / 3 + 0 + 0) / 3)
    assert split["score_var_between_questions"] == pytest.approx(float(np.var([2 / 3, 0.0, 1.0], ddof=1)))
    assert variance_split(per_query.with_columns(pl.lit(1).alias("n_samples")), {"exact_match": 1.0}) is None
