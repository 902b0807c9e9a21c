"""Every statistic the product decides with, in one module, on scipy.

- Uncertainty over queries: `bootstrap_ci` is `scipy.stats.bootstrap` (percentile, 2,000 resamples, seeded;
  `bootstrap_cis`: several metrics' in one call, each the same);
  `resample_indices` draws the very resamples it draws (`rng.integers(0, n, (B, n))`), shared by every config
  of a leaderboard (rag_core/decision/recommendation.py: paired, so tiers, front and recommendation agree),
  and `bootstrap_p` is the two-sided p-value of such paired differences.
- Paired tests on few questions: `sign_flip_p` is `scipy.stats.permutation_test` over the signs of the
  per-question differences (exact up to EXACT_UP_TO questions, every sign vector enumerated; N_FLIPS drawn
  above), used by halving, the holdout and drift; `smallest_paired_p` and `min_questions_for_claim` say
  what such a test can ever reach; `why_no_estimate` says when no interval or detectable difference may be
  given at all (below that minimum, or no spread to estimate one from).
- Many comparisons: `holm` is Holm's step-down, checked against statsmodels' (which is too slow to call in
  a loop: see `holm`).
- The gate's t-tests (rag_core/decision/gate.py) call scipy directly; `questions_for_power` is the sample
  size of its one-sided t-test, and `cohens_kappa` and `wilson_interval` the judge's agreement
  (rag_core/metrics/judge_agreement.py): each computes what statsmodels' `TTestPower`, `cohens_kappa` and
  `proportion_confint(method="wilson")` compute (tests/test_statistics.py holds them equal), without
  statsmodels in the install.

Per-query values may be missing (NaN inside these functions only: a metric undefined for a query); a
resample's mean skips them, and a resample in which every value is missing counts as 0.0.
"""

from __future__ import annotations

import math

import numpy as np

N_BOOT = 2000
N_FLIPS = 10_000
EXACT_UP_TO = 12  # questions: every sign vector (4,096) is enumerated, above that N_FLIPS are drawn


def resample_means(values: np.ndarray, idx: np.ndarray, axis: int = 1) -> np.ndarray:
    """values: (n_queries,) or (n_queries, m) with NaN = missing; idx: (B, n) -> means (B,) or (B, m)."""
    return nan_mean(values[idx], axis=axis)


def nan_mean(sample: np.ndarray, axis: int = -1) -> np.ndarray:
    """The mean along `axis` skipping NaN; 0.0 where every value is NaN."""
    present = ~np.isnan(sample)
    counts = present.sum(axis=axis)
    sums = np.where(present, sample, 0.0).sum(axis=axis)
    return np.divide(sums, counts, out=np.zeros_like(sums, dtype=np.float64), where=counts > 0)


def resample_indices(n: int, n_boot: int = N_BOOT, seed: int = 0) -> np.ndarray:
    """(n_boot, n) query indices: the resamples `scipy.stats.bootstrap` draws with this seed."""
    return np.random.default_rng(seed).integers(0, n, size=(n_boot, n))


def bootstrap_ci(
    values, n_boot: int = N_BOOT, seed: int = 0, level: float = 0.95
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the mean over queries (NaN: undefined, skipped); None where
    `why_no_estimate` gives a reason (too few questions for a claim at 1 − level, or no spread)."""
    return bootstrap_cis([values], n_boot, seed, level)[0]


def bootstrap_cis(
    rows, n_boot: int = N_BOOT, seed: int = 0, level: float = 0.95
) -> list[tuple[float, float] | None]:
    """`bootstrap_ci` of each row (one metric's per-query values; rows of one length), in one call of
    `scipy.stats.bootstrap` along the last axis: it draws one set of resamples for every row, the very ones
    each row's own call would draw with this seed, so each interval is that call's."""
    from scipy import stats

    rows = [np.asarray(v, dtype=np.float64) for v in rows]
    out: list[tuple[float, float] | None] = [None] * len(rows)
    spread = []
    for i, v in enumerate(rows):
        # the questions that define the value count, not the rows: 3 defined of 10 make no interval
        if why_no_estimate(int(np.count_nonzero(~np.isnan(v))), values_spread(v), 1 - level) is None:
            spread.append(i)
    if spread:
        result = stats.bootstrap(
            (np.stack([rows[i] for i in spread]),),
            nan_mean,
            n_resamples=n_boot,
            vectorized=True,
            axis=-1,
            method="percentile",
            confidence_level=level,
            rng=np.random.default_rng(seed),
        )
        lows = np.atleast_1d(result.confidence_interval.low)
        highs = np.atleast_1d(result.confidence_interval.high)
        for j, i in enumerate(spread):
            out[i] = (float(lows[j]), float(highs[j]))
    return out


def bootstrap_p(diffs: np.ndarray) -> float:
    """Two-sided bootstrap p-value of a difference being 0: 2 · min(P(d <= 0), P(d >= 0)), capped at 1."""
    return float(min(1.0, 2 * min((diffs <= 0).mean(), (diffs >= 0).mean())))


def weighted_score(per_query: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Overall score from a (B, m) matrix of metric means: Σ w·mean / Σ w."""
    return per_query @ weights / weights.sum()


def sign_flip_p(diffs: np.ndarray, rng: np.random.Generator) -> float:
    """Two-sided p-value of the paired per-question differences being centred on 0: the share of sign
    flips whose mean is at least as far from 0 as the observed one (a permutation test, valid on the few
    questions of an early rung, where a bootstrap is overconfident). With n questions the smallest
    p-value is 2 / 2**n: a rung of 5 questions can drop nothing at alpha 0.05."""
    from scipy import stats

    d = np.asarray(diffs, dtype=float)
    d = d[d != 0]  # questions the two configs score the same on carry no sign
    if d.size < 2:  # one sign flipped or not: both as far from 0
        return 1.0
    result = stats.permutation_test(
        (d,),
        _distance_from_zero,
        permutation_type="samples",  # one sample: each difference keeps or flips its sign
        vectorized=True,
        n_resamples=2**d.size if d.size <= EXACT_UP_TO else N_FLIPS,
        alternative="greater",  # of |mean|: at least as far from 0 on either side
        rng=rng,
    )
    return float(result.pvalue)


def _distance_from_zero(x: np.ndarray, axis: int = -1) -> np.ndarray:
    # rounded: sign patterns whose means are equal but for float noise (a sum that is 0 computed as 1e-17)
    # count as ties, at least as far from 0, as the enumeration counts them
    return np.round(np.abs(np.mean(x, axis=axis)), 12)


def holm(p_values) -> np.ndarray:
    """Holm's step-down adjustment: controls the family-wise error rate over all the comparisons. What
    statsmodels' `multipletests(p, method="holm")` returns (tests/test_statistics.py), computed here: it
    runs a full garbage collection on every call (47 ms in a small process, more in one holding a sweep),
    and the tiers call it once per tier, the halving once per rung."""
    p = np.asarray(p_values, dtype=float)
    order = np.argsort(p, kind="stable")
    m = len(p)
    adjusted = np.empty(m)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adjusted[i] = running
    return adjusted


def smallest_paired_p(n: int) -> float:
    """The smallest two-sided p-value an exact paired sign-flip test reaches with n questions: 2 / 2**n
    (all n differences of one sign, the most extreme of the 2**n sign patterns, on both sides)."""
    return min(1.0, 2.0 / 2.0**n) if n > 0 else 1.0


def values_spread(values) -> float:
    """max − min of the defined values (0.0 when fewer than two are defined): 0 means every resample's
    statistic is the same, so the resamples estimate no uncertainty at all."""
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    return float(v.max() - v.min()) if v.size > 1 else 0.0


def why_no_estimate(n: int, spread: float, alpha: float = 0.05, comparisons: int = 1) -> str | None:
    """Why no interval or detectable difference may be given from `n` questions whose values (or paired
    differences) spread over `spread` (None: one may). Below `min_questions_for_claim(alpha)` no test can
    make a claim at alpha, and an interval would claim more than the data can; with no spread every
    resample is alike and the interval (x–x) or detectable difference (0) would claim certainty. `n` counts
    the questions that define the value (an undefined one is no evidence); `comparisons`: the claims Holm
    adjusts together (a detectable difference against the best of several configs)."""
    need = min_questions_for_claim(alpha, comparisons)
    if n < need:
        among = f" with Holm over {comparisons} comparisons" if comparisons > 1 else ""
        return f"{n} question(s), below the {need} any claim at alpha {alpha:g}{among} needs"
    if not spread > 0:
        return f"no spread: every one of the {n} questions gives the same value"
    return None


def min_questions_for_claim(alpha: float, comparisons: int = 1) -> int:
    """The fewest questions on which a paired test can call two configs different at `alpha`, when it is
    one of `comparisons` adjusted by Holm: Holm's first step tests the smallest p at alpha / comparisons,
    so no claim is possible until an exact test can reach that (about log2(2 · comparisons / alpha)
    questions). Below it no data, however lopsided, reaches significance, and a bootstrap's p = 0 would be
    an artefact (with one question every resample is the same)."""
    level = alpha / max(1, comparisons)
    n = 1
    while smallest_paired_p(n) > level:
        n += 1
    return n


def t_test_power(effect: float, n: int, alpha: float) -> float:
    """The power of a one-sided one-sample (paired) t-test at `alpha` on `n` questions, where the true
    mean is `effect` standard deviations above the bound (statsmodels' `TTestPower().power(...,
    alternative="larger")`): the noncentral t's tail beyond the test's critical value."""
    from scipy import stats

    df = n - 1
    return float(stats.nct.sf(stats.t.isf(alpha, df), df, effect * math.sqrt(n)))


def questions_for_power(effect: float, alpha: float, power: float) -> int:
    """The fewest questions (at least 2) on which that test reaches `power`: the power grows with the
    questions, so a doubling then a bisection finds it (statsmodels' `solve_power`, rounded up)."""
    if not effect > 0:
        raise ValueError(f"effect {effect}: a test of a mean at its bound never reaches any power")
    low, high = 2, 2
    while t_test_power(effect, high, alpha) < power:
        low, high = high + 1, high * 2
    while low < high:
        mid = (low + high) // 2
        low, high = (low, mid) if t_test_power(effect, mid, alpha) >= power else (mid + 1, high)
    return high


def cohens_kappa(table) -> tuple[float, float, float]:
    """Cohen's kappa of a square agreement table (rows one rater, columns the other) with its asymptotic
    95% interval from the Fleiss-Cohen-Everitt variance (statsmodels' `cohens_kappa(table,
    return_results=True)`: kappa, kappa_low, kappa_upp; not clipped)."""
    from scipy import stats

    table = np.asarray(table, float)
    n = table.sum()
    probs = table / n
    rows, cols = probs.sum(1), probs.sum(0)
    chance = float((rows * cols).sum())
    kappa = (float(np.trace(probs)) - chance) / (1 - chance)
    term_a = (np.diag(probs) * (1 - (rows + cols) * (1 - kappa)) ** 2).sum()
    off = probs * (cols[:, None] + rows) ** 2
    np.fill_diagonal(off, 0)
    term_b = (1 - kappa) ** 2 * off.sum()
    term_c = (kappa - chance * (1 - kappa)) ** 2
    half = stats.norm.isf(0.025) * math.sqrt((term_a + term_b - term_c) / (1 - chance) ** 2 / n)
    return kappa, kappa - half, kappa + half


def wilson_interval(successes: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """The Wilson score interval of a proportion (statsmodels' `proportion_confint(..., method="wilson")`)."""
    from scipy import stats

    z2 = stats.norm.isf(alpha / 2) ** 2
    p = successes / n
    center = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = math.sqrt(z2) * math.sqrt(p * (1 - p) / n + z2 / (4 * n**2)) / (1 + z2 / n)
    return center - half, center + half
