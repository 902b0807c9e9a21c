"""The gate's statistics on constructed per-question scores whose answer is known, checked against an
independent computation (scipy's one-sample t-test, Holm by hand)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from scipy import stats

from rag_core.decision.gate import (
    OVERALL,
    GateSettings,
    gate,
    paired_differences,
)
from rag_core.decision.gate_report import junit_xml, markdown
from rag_core.metrics import overall_score, summarize

WEIGHTS = {"recall_at_k": 0.4, "token_f1": 0.6}


def frame(recall, f1, errors=None) -> pl.DataFrame:
    n = len(f1)
    return pl.DataFrame(
        {
            "query_id": [f"q{i:03d}" for i in range(n)],
            "answer": ["a"] * n,
            "error": errors or [None] * n,
            "recall_at_k": recall,
            "token_f1": f1,
            "citation_accuracy": [None] * n,
            "retrieval_ms": [1.0] * n,
            "generation_ms": [1.0] * n,
        },
        schema_overrides={"recall_at_k": pl.Float64, "token_f1": pl.Float64, "citation_accuracy": pl.Float64},
    )


def noisy(n: int, seed: int = 0) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    return frame(rng.uniform(0.3, 1.0, n).round(3).tolist(), rng.uniform(0.2, 0.9, n).round(3).tolist())


def shifted(base: pl.DataFrame, delta: float, noise: float = 0.0, seed: int = 1) -> pl.DataFrame:
    """`base` with every score moved by delta (plus per-question noise): its overall score moves by delta."""
    rng = np.random.default_rng(seed)
    n = base.height
    return base.with_columns(
        (pl.col("recall_at_k") + delta + pl.Series(rng.normal(0, noise, n))).alias("recall_at_k"),
        (pl.col("token_f1") + delta + pl.Series(rng.normal(0, noise, n))).alias("token_f1"),
    )


def independent(c: pl.DataFrame, b: pl.DataFrame, margin: float) -> tuple[float, float]:
    """(p pass, p fail) of a non-inferiority test of the weighted per-question score, by scipy."""
    w = np.array([WEIGHTS["recall_at_k"], WEIGHTS["token_f1"]]) / sum(WEIGHTS.values())
    d = (
        c.select("recall_at_k", "token_f1").to_numpy() @ w
        - b.select("recall_at_k", "token_f1").to_numpy() @ w
    )
    greater = stats.ttest_1samp(d + margin, 0.0, alternative="greater").pvalue
    less = stats.ttest_1samp(d + margin, 0.0, alternative="less").pvalue
    return float(greater), float(less)


def holm(p: list[float]) -> list[float]:
    order = sorted(range(len(p)), key=lambda i: p[i])
    out, running = [0.0] * len(p), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[i]))
        out[i] = running
    return out


SETTINGS = GateSettings(margin=0.02)


def test_a_candidate_equal_to_the_baseline_passes():
    base = noisy(60)
    result = gate({"same": base.clone()}, base, WEIGHTS, SETTINGS)
    (c,) = result.candidates
    assert c.verdict == "pass" and result.exit_code == 0
    t = c.tests[0]
    assert t.metric == OVERALL and t.difference == 0.0 and t.n == 60


def test_a_candidate_worse_by_twice_the_margin_fails():
    base = noisy(60)
    worse = shifted(base, -0.04, noise=0.01)
    result = gate({"worse": worse}, base, WEIGHTS, SETTINGS)
    t = result.candidates[0].tests[0]
    assert result.candidates[0].verdict == "fail" and result.exit_code == 1
    assert t.difference == pytest.approx(-0.04, abs=0.005)
    assert t.ci_high < -0.02  # the whole interval below -margin
    p_pass, p_fail = independent(worse, base, 0.02)
    assert t.p_pass == pytest.approx(p_pass, rel=1e-9) and t.p_fail == pytest.approx(p_fail, rel=1e-9)


def test_worse_by_half_the_margin_on_few_noisy_questions_is_inconclusive_with_a_sample_size():
    base = noisy(12)
    near = shifted(base, -0.01, noise=0.08, seed=3)
    result = gate({"near": near}, base, WEIGHTS, SETTINGS)
    t = result.candidates[0].tests[0]
    assert result.candidates[0].verdict == "inconclusive" and result.exit_code == 3
    assert t.ci_low < -0.02 < t.ci_high
    assert t.questions_needed is not None and t.questions_needed > 12
    assert f"{t.questions_needed - 12} more" in t.why
    # the sample size is a power figure: a t-test on that many questions with this spread would decide
    d = paired_differences(near, base, WEIGHTS, [])[OVERALL]
    effect = (d.mean() + 0.02) / d.std(ddof=1)
    from statsmodels.stats.power import TTestPower

    assert TTestPower().power(effect, t.questions_needed, 0.05, alternative="larger") >= 0.8


def test_holm_over_three_candidates_agrees_with_an_independent_computation():
    base = noisy(40, seed=5)
    cands = {
        "clear": shifted(base, 0.0, noise=0.01, seed=6),
        "borderline": shifted(base, -0.012, noise=0.03, seed=7),
        "bad": shifted(base, -0.05, noise=0.02, seed=8),
    }
    result = gate(cands, base, WEIGHTS, SETTINGS)
    raw = {k: independent(c, base, 0.02) for k, c in cands.items()}
    adj_pass = dict(zip(cands, holm([raw[k][0] for k in cands]), strict=True))
    adj_fail = dict(zip(cands, holm([raw[k][1] for k in cands]), strict=True))
    for c in result.candidates:
        t = c.tests[0]
        assert t.p_pass_holm == pytest.approx(adj_pass[c.key], rel=1e-9)
        assert t.p_fail_holm == pytest.approx(adj_fail[c.key], rel=1e-9)
        expected = "fail" if adj_fail[c.key] < 0.05 else "pass" if adj_pass[c.key] < 0.05 else "inconclusive"
        assert c.verdict == expected
    verdicts = {c.key: c.verdict for c in result.candidates}
    assert verdicts["clear"] == "pass" and verdicts["bad"] == "fail"
    assert result.exit_code == 1  # one candidate fails: the gate fails


def test_holm_can_withdraw_a_pass_a_single_test_would_give():
    base = noisy(30, seed=11)
    cands = {f"c{i}": shifted(base, -0.01, noise=0.05, seed=20 + i) for i in range(3)}
    raw = [independent(c, base, 0.02)[0] for c in cands.values()]
    result = gate(cands, base, WEIGHTS, SETTINGS)
    single = [gate({k: c}, base, WEIGHTS, SETTINGS).candidates[0].verdict for k, c in cands.items()]
    adjusted = holm(raw)
    for c, p, a, alone in zip(result.candidates, raw, adjusted, single, strict=True):
        assert (alone == "pass") == (p < 0.05)
        assert (c.verdict == "pass") == (a < 0.05)
    assert any(p < 0.05 <= a for p, a in zip(raw, adjusted, strict=True))  # one pass withdrawn


def test_a_metric_with_its_own_margin_fails_the_candidate_the_overall_score_passes():
    base = noisy(80, seed=2)
    rng = np.random.default_rng(4)
    # recall drops by 0.1, token F1 rises so that the overall score is unchanged
    cand = base.with_columns(
        (pl.col("recall_at_k") - 0.1 + pl.Series(rng.normal(0, 0.01, 80))).alias("recall_at_k"),
        (pl.col("token_f1") + 0.4 * 0.1 / 0.6).alias("token_f1"),
    )
    settings = GateSettings(margin=0.02, metric_margins={"recall_at_k": 0.02})
    c = gate({"trade": cand}, base, WEIGHTS, settings).candidates[0]
    overall, recall = c.tests
    assert overall.verdict == "pass" and recall.verdict == "fail"
    assert c.verdict == "fail" and c.why.startswith("recall_at_k: worse by more than 0.02")


def test_equivalence_passes_a_cheaper_equal_config_and_fails_a_better_one():
    base = noisy(60, seed=9)
    settings = GateSettings(margin=0.03, equivalence=True)
    same = gate({"same": shifted(base, 0.0, noise=0.005)}, base, WEIGHTS, settings).candidates[0]
    better = gate({"better": shifted(base, 0.1, noise=0.005)}, base, WEIGHTS, settings).candidates[0]
    assert same.verdict == "pass" and "within ±0.03" in same.why
    assert better.verdict == "fail" and "better by more than 0.03" in better.why


def test_an_outage_is_no_evidence_either_way():
    base = noisy(40)
    failed = shifted(base, -0.5).with_columns(pl.lit("RateLimitError").alias("error"))
    c = gate({"outage": failed}, base, WEIGHTS, SETTINGS).candidates[0]
    assert c.verdict == "inconclusive" and "generation 40 of 40 calls" in c.why
    assert all(not t.decidable for t in c.tests)


@pytest.mark.parametrize(
    ("stage", "failed", "calls"),
    [
        ("hops", "n_hop_fallbacks", "hop_llm_calls"),
        ("query_transform", "n_query_transform_fallbacks", "n_query_transform_calls"),
        ("rerank", "n_rerank_fallbacks", "n_rerank_calls"),
        ("context_compression", "n_context_compression_fallbacks", "n_context_compression_calls"),
        ("judge", "n_judge_failures", "n_judge_calls"),
    ],
)
def test_an_outage_in_any_llm_stage_is_no_evidence_either_way(stage, failed, calls):
    """A hop model down for every call made a config search more and score higher: the gate, given the
    evaluations' summaries, passes neither it nor a config gated against it."""
    base = noisy(40)
    better = shifted(base, 0.2)
    weights = WEIGHTS
    if stage == "judge":  # a judge counts where its metric is weighted; the same verdict on every answer
        weights = {"recall_at_k": 0.4, "token_f1": 0.5, "faithfulness_judge": 0.1}
        base, better = (f.with_columns(pl.lit(1.0).alias("faithfulness_judge")) for f in (base, better))
    healthy = {"n_queries": 40.0, "n_generation_errors": 0.0, "n_generation_calls": 40.0}
    down = {**healthy, failed: 80.0, calls: 80.0}
    c = gate(
        {"down": better}, base, weights, SETTINGS, summaries={"down": down, "b": healthy}, baseline_key="b"
    ).candidates[0]
    assert c.verdict == "inconclusive" and f"{stage} 80 of 80 calls" in c.why
    assert all(not t.decidable for t in c.tests)
    flaky = {**healthy, failed: 8.0, calls: 80.0}  # 10%: not more than the threshold
    ok = gate({"ok": better}, base, weights, SETTINGS, summaries={"ok": flaky}).candidates[0]
    assert ok.verdict == "pass"
    against = gate(
        {"c": better}, base, weights, SETTINGS, summaries={"c": healthy, "b": down}, baseline_key="b"
    ).candidates[0]
    assert against.verdict == "inconclusive" and "the baseline's LLM calls" in against.why
    if stage == "judge":  # not weighted, the judge's failures change no score: the gate decides
        from rag_core.decision.qualification import judge_is_weighted

        unweighted = gate(
            {"down": better},
            base,
            WEIGHTS,
            SETTINGS,
            summaries={"down": down, "b": healthy},
            baseline_key="b",
            count_judge=judge_is_weighted(WEIGHTS),
        ).candidates[0]
        assert unweighted.verdict == "pass", unweighted.why


def test_an_unchanged_config_passes_saying_so():
    base = noisy(40)
    (c,) = gate({"champ": base}, base, WEIGHTS, SETTINGS, baseline_key="champ").candidates
    assert c.verdict == "pass" and "unchanged: the candidate is the baseline's own config" in c.why
    tiny = noisy(3)  # too few questions for any test: unchanged is still a pass, not inconclusive
    assert gate({"champ": tiny}, tiny, WEIGHTS, SETTINGS, baseline_key="champ").verdict == "pass"
    down = {"n_queries": 40.0, "n_generation_errors": 40.0}
    outage = gate({"champ": base}, base, WEIGHTS, SETTINGS, summaries={"champ": down}, baseline_key="champ")
    assert outage.verdict == "inconclusive"


def test_the_printed_interval_is_the_one_the_holm_adjusted_verdict_used():
    """Holm can withhold a verdict whose unadjusted 90% interval lies wholly beyond the margin: the
    Holm-adjusted interval is printed too, and it lies beyond the margin exactly when the verdict says so."""
    withheld = None
    for seed in range(300):
        base = noisy(25, seed=seed)
        cands = {f"c{i}": shifted(base, -0.045, noise=0.08, seed=1000 * seed + i) for i in range(3)}
        for settings in (SETTINGS, GateSettings(margin=0.02, equivalence=True)):
            for c in gate(cands, base, WEIGHTS, settings).candidates:
                t = c.tests[0]
                assert t.holm_ci_low <= t.ci_low and t.holm_ci_high >= t.ci_high  # never narrower
                if settings.equivalence:
                    shown_outside = t.holm_ci_high < -0.02 or t.holm_ci_low > 0.02
                    assert (t.verdict == "fail") == shown_outside
                    assert (t.verdict == "pass") == (-0.02 < t.holm_ci_low and t.holm_ci_high < 0.02)
                else:
                    assert (t.verdict == "fail") == (t.holm_ci_high < -0.02)
                    assert (t.verdict == "pass") == (t.holm_ci_low > -0.02)
                if not settings.equivalence and t.verdict == "inconclusive" and t.ci_high < -0.02:
                    withheld = t
        if withheld is not None:
            break
    assert withheld is not None, "no case where Holm withholds a verdict the raw interval shows"
    assert "neither shown" in withheld.why
    holm_part = withheld.why.split("Holm-adjusted [", 1)[1].split("]", 1)[0]
    low, high = (float(x) for x in holm_part.split(", "))
    assert low <= -0.02 <= high  # the printed adjusted interval does not lie beyond the margin


def test_too_few_questions_make_no_claim():
    base = noisy(4)
    c = gate({"far": shifted(base, -0.3)}, base, WEIGHTS, SETTINGS).candidates[0]
    assert c.verdict == "inconclusive" and "at least 6" in c.why
    assert c.tests[0].ci_low is None  # no interval from 4 questions


def test_an_undefined_metric_is_named_with_what_it_needs():
    base = noisy(30)
    settings = GateSettings(margin=0.02, metric_margins={"citation_accuracy": 0.05})
    c = gate({"same": base.clone()}, base, WEIGHTS, settings).candidates[0]
    cited = c.tests[1]
    assert cited.verdict == "inconclusive" and "answers that cite their context" in cited.why


def test_the_linearized_difference_is_the_difference_of_overall_scores_with_undefined_values():
    base, cand = noisy(50, seed=1), noisy(50, seed=2)
    # questions without gold documents: recall undefined for both configs on the same questions
    gone = pl.Series([i % 7 == 0 for i in range(50)])
    base = base.with_columns(pl.when(gone).then(None).otherwise(pl.col("recall_at_k")).alias("recall_at_k"))
    cand = cand.with_columns(pl.when(gone).then(None).otherwise(pl.col("recall_at_k")).alias("recall_at_k"))
    d = paired_differences(cand, base, WEIGHTS, [])[OVERALL]

    def score(pq):
        s = summarize(pq.with_columns(pl.lit(None, pl.Float64).alias(m) for m in ("ndcg_at_k", "mrr")))
        return overall_score(s, WEIGHTS)

    assert d.mean() == pytest.approx(score(cand) - score(base), abs=1e-12)


def test_the_reports_carry_each_verdict_and_its_figures():
    import xml.etree.ElementTree as ET

    base = noisy(60)
    cands = {
        "same": base.clone(),
        "worse": shifted(base, -0.05, noise=0.01),
        "near": shifted(base, -0.01, 0.2),
    }
    settings = GateSettings(margin=0.02, metric_margins={"recall_at_k": 0.05})
    result = gate(cands, base, WEIGHTS, settings, labels={"same": "same-label"}, baseline_label="champion v1")
    root = ET.fromstring(junit_xml(result))
    cases = root.findall(".//testcase")
    assert len(cases) == 6  # one per candidate and test
    by = {(c.get("classname"), c.get("name")): c for c in cases}
    assert by[("same-label", OVERALL)].find("failure") is None
    assert by[("same-label", OVERALL)].find("skipped") is None
    failure = by[("worse", OVERALL)].find("failure")
    assert failure is not None and "worse by more than 0.02" in failure.get("message")
    assert by[("near", OVERALL)].find("skipped") is not None
    assert int(root.get("failures")) == sum(t.verdict == "fail" for c in result.candidates for t in c.tests)
    md = markdown(result)
    assert "champion v1" in md and "| worse | overall_score |" in md and "**fail**" in md


# ---- the champion's gate check, on evaluations written as a leaderboard leaves them ----------------


def test_the_champion_check_gates_the_recommendation_against_the_champions_evaluation(slice_data, tmp_path):
    from types import SimpleNamespace

    from rag_assets.champion import gate_against_champion
    from rag_assets.orchestration.plans import load_plan
    from tests.conftest import write_sweep

    spec = write_sweep(
        tmp_path / "s.yaml",
        slice_data,
        chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        retrieval={"mode": "bm25", "top_k": [1, 4]},
        weights=WEIGHTS,
        gate={"margin": 0.02},
    )
    plan = load_plan(spec, data_dir=tmp_path)
    k1, k4 = plan.config_keys
    base = noisy(40, seed=3)
    frames = {k4: base, k1: shifted(base, -0.1, noise=0.01)}
    (tmp_path / "evaluations").mkdir()
    for i, pq in enumerate(frames.values()):
        pq.write_parquet(tmp_path / "evaluations" / f"fp{i}.per_query.parquet")
    board = _board(frames)
    champion = SimpleNamespace(version="3", tags={"config_key": k4})

    worse = gate_against_champion(plan, tmp_path, board, k1, champion)
    assert worse["verdict"] == "fail" and f"models:/{plan.sweep.name}/3" in worse["message"]
    assert "worse by more than 0.02" in worse["message"]
    back = gate_against_champion(
        plan, tmp_path, board, k4, SimpleNamespace(version="4", tags={"config_key": k1})
    )
    assert back["verdict"] == "pass"
    same = gate_against_champion(plan, tmp_path, board, k4, champion)
    assert same["verdict"] == "not gated" and same["result"] is None
    gone = gate_against_champion(
        plan, tmp_path, board, k1, SimpleNamespace(version="1", tags={"config_key": "x"})
    )
    assert (
        gone["verdict"] == "not gated" and gone["compared"] is False and "rag-sweep gate" in gone["message"]
    )
    assert gate_against_champion(plan, tmp_path, board, k1, None)["verdict"] == "not gated"


def _board(frames: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """A leaderboard's rows of these evaluations (fp0, fp1, ...): key, fingerprint and the summary."""
    rows = [
        {"config_key": k, "fingerprint": f"fp{i}", **summarize(pq)}
        for i, (k, pq) in enumerate(frames.items())
    ]
    return pl.DataFrame(rows)


def test_the_champion_check_weighs_the_judge_as_the_board_does(slice_data, tmp_path):
    """Two configs the board ties (the judge's kappa fell below the floor: its metric not weighted) are not
    told apart by the judge alone in the champion's check."""
    from types import SimpleNamespace

    from rag_assets.champion import gate_against_champion
    from rag_assets.orchestration.plans import load_plan
    from tests.conftest import write_sweep

    weights = {**WEIGHTS, "faithfulness_judge": 0.5}
    spec = write_sweep(
        tmp_path / "s.yaml",
        slice_data,
        chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        retrieval={"mode": "bm25", "top_k": [1, 4]},
        weights=weights,
        evaluation={"judge_model": "openai/stub-judge"},
        gate={"margin": 0.02},
    )
    plan = load_plan(spec, data_dir=tmp_path)
    k1, k4 = plan.config_keys
    base = noisy(40, seed=3).with_columns(pl.lit(1.0).alias("faithfulness_judge"))
    frames = {k4: base, k1: base.with_columns(pl.lit(0.2).alias("faithfulness_judge"))}
    (tmp_path / "evaluations").mkdir()
    for i, pq in enumerate(frames.values()):
        pq.write_parquet(tmp_path / "evaluations" / f"fp{i}.per_query.parquet")
    board, champion = _board(frames), SimpleNamespace(version="3", tags={"config_key": k4})
    untrusted = {"judge": {"weighted": False, "reason": "kappa 0.1 below min_kappa 0.6"}}
    gated = gate_against_champion(plan, tmp_path, board, k1, champion, untrusted)
    assert gated["verdict"] == "pass", gated["message"]
    assert "faithfulness_judge" not in gated["message"]
    trusted = gate_against_champion(plan, tmp_path, board, k1, champion, {"judge": {"weighted": True}})
    assert trusted["verdict"] == "fail"  # the same judge, trusted: its -0.8 counts


# ---- the command line: what it refuses before any work --------------------------------------------


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["--against", "no-such-config"],
            "not a registered model (models:/NAME@champion), a config key or label",
        ),
        (["--against", "models:/nothing@champion"], "--against models:/nothing@champion"),
        (["--against", "x", "--margin", "0"], "--margin: Input should be greater than 0"),
        (["--against", "x", "--metric-margin", "recall=0.1"], "unknown metric(s) ['recall']"),
        (["--against", "x", "--metric-margin", "recall_at_k"], "expected METRIC=NUMBER"),
        (
            ["--against", "x", "--junit", "/no/such/dir/j.xml"],
            "--junit /no/such/dir/j.xml: its folder does not exist",
        ),
    ],
)
def test_the_gate_refuses_what_it_cannot_run_before_any_work(slice_data, tmp_path, capsys, args, says):
    from rag_sweep.cli import main
    from tests.conftest import write_sweep

    spec = write_sweep(
        tmp_path / "s.yaml",
        slice_data,
        chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        retrieval={"mode": "bm25", "top_k": [1, 4]},
    )
    assert main(["gate", str(spec), "--data-dir", str(tmp_path / "data"), *args]) == 2
    err = capsys.readouterr().err
    assert says in err, err
    assert not (tmp_path / "data" / "dagster_home").exists()  # no run was started


def test_a_file_whose_only_config_is_the_baseline_passes_unchanged(slice_data, tmp_path):
    """A pull request that changed nothing gates the champion's own config: a pass (exit 0), saying so.
    As a user starts it, in a process of its own (a whole run in the test's process shares its captured
    streams with Dagster's)."""
    from rag_assets.orchestration.plans import load_plan
    from tests.conftest import cli, write_sweep

    spec = write_sweep(
        tmp_path / "s.yaml",
        slice_data,
        chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        retrieval={"mode": "bm25", "top_k": 2},
    )
    label = load_plan(spec).labels[load_plan(spec).config_keys[0]]
    r = cli("gate", spec, "--against", label, "--data-dir", tmp_path / "data")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "unchanged: the candidate is the baseline's own config" in out and "verdict: pass (exit 0)" in out


@pytest.mark.slow  # ~40 s a margin
@pytest.mark.parametrize("margin", [0.002, 0.2])  # a band narrow, and wide, against the spread (se 0.055)
def test_equivalence_fails_at_the_band_edge_at_the_stated_alpha(margin):
    """2,000 gates through `gate` with the true difference on the band's edge (-margin: within the band, so
    "fail" is an error): the share that fail is alpha (0.05), within the simulation's own error, whether the
    band is narrow or wide against the spread. The smaller one-sided p alone failed ~10% of narrow bands."""
    rng = np.random.default_rng(20261207)
    settings = GateSettings(margin=margin, equivalence=True)
    n, sims, fails = 30, 2000, 0
    base = np.full(n, 0.5)
    for _ in range(sims):
        d = rng.normal(-margin, 0.3, n)  # per-question differences around the edge
        cand = frame([None] * n, list(base + d))
        result = gate({"c": cand}, frame([None] * n, list(base)), {"token_f1": 1.0}, settings)
        fails += result.candidates[0].verdict == "fail"
    rate, se = fails / sims, (0.05 * 0.95 / sims) ** 0.5
    assert abs(rate - 0.05) < 3.5 * se, f"fail rate {rate:.4f} at the band's edge, alpha 0.05"
