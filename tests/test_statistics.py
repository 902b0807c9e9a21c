"""The statistics module on scipy and statsmodels computes what the product computed before it moved there:
the code it replaced is kept here, verbatim, as the reference; and what the libraries compute."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rag_core.metrics import stats

# ---- the implementations before (rag_core/metrics/stats.py and rag_core/search/halving.py) -----------------


def _old_resample_means(values, idx):
    sample = values[idx]
    present = ~np.isnan(sample)
    counts = present.sum(axis=1)
    sums = np.where(present, sample, 0.0).sum(axis=1)
    return np.divide(sums, counts, out=np.zeros_like(sums, dtype=np.float64), where=counts > 0)


def _old_bootstrap_ci(values, n_boot=2000, seed=0, level=0.95):
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return (0.0, 0.0)
    idx = np.random.default_rng(seed).integers(0, len(v), size=(n_boot, len(v)))
    means = _old_resample_means(v, idx)
    lo, hi = np.percentile(means, [(1 - level) / 2 * 100, (1 + level) / 2 * 100])
    return float(lo), float(hi)


def _old_holm(p_values):
    p = np.asarray(p_values, dtype=float)
    order = np.argsort(p, kind="stable")
    m = len(p)
    adjusted = np.empty(m)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adjusted[i] = running
    return adjusted


def _old_sign_flip_p(diffs, rng):
    d = np.asarray(diffs, dtype=float)
    d = d[d != 0]
    if d.size == 0:
        return 1.0
    if d.size <= 12:
        signs = 1 - 2 * ((np.arange(2**d.size)[:, None] >> np.arange(d.size)) & 1)
        return float((np.abs(signs @ d) >= abs(d.sum()) - 1e-12).mean())
    signs = rng.choice([-1.0, 1.0], size=(10_000, d.size))
    return float((1 + (np.abs(signs @ d) >= abs(d.sum()) - 1e-12).sum()) / (10_000 + 1))


# ---- before and after ----------------------------------------------------------------------------------

scores = st.lists(
    st.one_of(st.sampled_from([0.0, 0.5, 1.0, float("nan")]), st.floats(0, 1)), min_size=1, max_size=60
)


@settings(max_examples=150, deadline=None)
@given(scores, st.integers(0, 10**6), st.sampled_from([0.9, 0.95]))
def test_the_bootstrap_interval_is_the_one_computed_before(values, seed, level):
    before = _old_bootstrap_ci(values, seed=seed, level=level)
    after = stats.bootstrap_ci(values, seed=seed, level=level)
    defined = int(np.count_nonzero(~np.isnan(values)))  # the questions that define it, not the rows
    reason = stats.why_no_estimate(defined, stats.values_spread(values), 1 - level)
    if reason:  # too few defined values or no spread: no interval, where one was given before
        assert after is None
    else:
        assert after == pytest.approx(before, abs=1e-12)


def test_the_bootstrap_interval_is_scipys():
    from scipy import stats as scipy_stats

    v = np.random.default_rng(3).uniform(size=40)
    ours = stats.bootstrap_ci(v, seed=7)
    theirs = scipy_stats.bootstrap(
        (v,), np.mean, n_resamples=2000, method="percentile", rng=np.random.default_rng(7)
    ).confidence_interval
    assert ours == pytest.approx((theirs.low, theirs.high), abs=1e-12)
    # and the leaderboard's shared resamples are the ones scipy draws
    idx = stats.resample_indices(40, seed=7)
    assert np.percentile(stats.resample_means(v, idx), 2.5) == pytest.approx(theirs.low, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.lists(scores, min_size=1, max_size=6), st.integers(1, 40), st.integers(0, 10**6))
def test_several_metrics_intervals_in_one_call_are_each_ones_own(rows, n, seed):
    """`bootstrap_cis` (one scipy call for a config's metrics) gives each row what `bootstrap_ci` gives it
    alone (the same resamples), constant and undefined rows among them."""
    rows = [np.resize(np.asarray(r, dtype=float), n) for r in rows]
    together = stats.bootstrap_cis(rows, seed=seed)
    alone = [stats.bootstrap_ci(r, seed=seed) for r in rows]
    assert [t is None for t in together] == [a is None for a in alone]
    given_ = [(t, a) for t, a in zip(together, alone, strict=True) if a is not None]
    for t, a in given_:
        assert t == pytest.approx(a, abs=1e-12)  # float rounding apart


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=9))
def test_holm_is_the_one_computed_before(p):
    assert np.allclose(stats.holm(p), _old_holm(p), rtol=0, atol=1e-15)


def test_holm_is_statsmodels():
    """On fixed p-values with ties, zeros, ones and unsorted order (statsmodels' Holm collects garbage on
    each call: seconds each in a long test session, so a few calls, not a property test)."""
    from statsmodels.stats.multitest import multipletests

    rng = np.random.default_rng(4)
    cases = [[0.5], [0.0, 1.0], [0.01, 0.04, 0.03, 0.2], [0.02, 0.02, 0.02], list(rng.uniform(size=9))]
    for p in cases:
        assert np.allclose(stats.holm(p), multipletests(p, method="holm")[1], rtol=0, atol=1e-12), p


def test_the_t_tests_sample_size_is_statsmodels_rounded_up():
    """The gate's questions for a decision (without statsmodels in the install): statsmodels' continuous
    solution, rounded up, and the smallest count whose power reaches the goal."""
    from statsmodels.stats.power import TTestPower

    for effect, alpha, power in [(0.2, 0.05, 0.8), (0.5, 0.025, 0.8), (1.3, 0.05, 0.9), (0.05, 0.0167, 0.8)]:
        n = stats.questions_for_power(effect, alpha, power)
        expected = TTestPower().solve_power(
            effect_size=effect, alpha=alpha, power=power, alternative="larger"
        )
        assert n == max(2, int(np.ceil(float(np.atleast_1d(expected)[0]) - 1e-6))), (effect, alpha, power)
        assert stats.t_test_power(effect, n, alpha) >= power > stats.t_test_power(effect, n - 1, alpha)
        official = TTestPower().power(effect, n, alpha, alternative="larger")
        assert stats.t_test_power(effect, n, alpha) == pytest.approx(official, rel=1e-9)
    with pytest.raises(ValueError, match="never reaches"):
        stats.questions_for_power(0.0, 0.05, 0.8)


def test_kappa_and_the_wilson_interval_are_statsmodels():
    from statsmodels.stats.inter_rater import cohens_kappa
    from statsmodels.stats.proportion import proportion_confint

    for table in (
        [[7, 3], [2, 8]],
        [[9, 1], [0, 10]],
        [[0, 10], [9, 1]],
        [[30, 4], [11, 2]],
        [[3, 1, 0], [1, 4, 2], [0, 1, 5]],
    ):
        raw = cohens_kappa(np.array(table), return_results=True)
        assert stats.cohens_kappa(table) == pytest.approx(
            (raw.kappa, raw.kappa_low, raw.kappa_upp), rel=1e-12
        )
    for count, n in [(0, 5), (3, 10), (10, 10), (41, 47), (1, 1)]:
        expected = proportion_confint(count, n, alpha=0.05, method="wilson")
        assert stats.wilson_interval(count, n) == pytest.approx(expected, rel=1e-12, abs=1e-15)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([-1.0, -0.5, -0.25, 0.0, 0.1, 1 / 3, 0.5, 1.0]), min_size=0, max_size=12))
def test_the_exact_sign_flip_test_is_the_one_computed_before(diffs):
    before = _old_sign_flip_p(diffs, np.random.default_rng(0))
    assert stats.sign_flip_p(diffs, np.random.default_rng(0)) == pytest.approx(before, abs=1e-12)


def test_the_drawn_sign_flip_test_agrees_within_its_sampling_error():
    """Above 12 questions both draw 10,000 sign vectors, each its own: they agree within a few standard
    errors of a proportion, sqrt(p(1-p)/10,000) <= 0.005."""
    rng = np.random.default_rng(5)
    for _ in range(10):
        d = rng.normal(0.05, 0.3, int(rng.integers(13, 60)))
        before = _old_sign_flip_p(d, np.random.default_rng(1))
        after = stats.sign_flip_p(d, np.random.default_rng(1))
        assert abs(before - after) <= 4 * max(np.sqrt(before * (1 - before) / 10_000), 1e-4)


def test_an_interval_needs_defined_values_not_rows():
    """3 defined values of 10 are 3 questions of evidence: no interval (it was given from the row count)."""
    values = [0.0, 1.0, 0.5] + [float("nan")] * 7
    assert stats.bootstrap_ci(values) is None
    assert stats.bootstrap_ci([0.0, 1.0, 0.5, 0.2, 0.9, 0.4] + [float("nan")] * 4) is not None


@pytest.mark.parametrize("alpha", [0.05, 0.01])
def test_the_floor_under_holm_is_where_an_exact_test_first_reaches_holms_first_step(alpha):
    """For m comparisons Holm tests the smallest p at alpha / m: the floor is the fewest questions whose
    most extreme sign pattern (p = 2 / 2**n) gets there, about log2(2m / alpha), checked against an exact
    sign-flip test by enumeration and Holm by hand."""
    import itertools
    import math

    for m in (1, 3, 10):
        need = stats.min_questions_for_claim(alpha, m)
        assert need == math.ceil(math.log2(2 * m / alpha) - 1e-12)
        for n in (need - 1, need):
            d = np.ones(n)  # the most lopsided data there is: every question favours one config
            flips = np.array(list(itertools.product([-1, 1], repeat=n)))
            p = float((np.abs(flips @ d) >= abs(d.sum()) - 1e-12).mean())
            holm_p = min(1.0, m * p)  # the smallest of m equal p's, Holm's first step
            assert (holm_p <= alpha) == (n >= need), (m, n, holm_p)
