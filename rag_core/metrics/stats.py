"""Uncertainty over queries: bootstrap confidence intervals and a paired bootstrap test (numpy, vectorized).

Per-query values may be missing (NaN inside these functions only: a metric undefined for a query); a
resample's mean skips them, and a resample in which every value is missing counts as 0.0.
"""

from __future__ import annotations

import numpy as np

N_BOOT = 2000


def _resample_means(values: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """values: (n_queries,) or (n_queries, m) with NaN = missing; idx: (B, n) -> means (B,) or (B, m)."""
    sample = values[idx]  # (B, n[, m])
    present = ~np.isnan(sample)
    counts = present.sum(axis=1)
    sums = np.where(present, sample, 0.0).sum(axis=1)
    return np.divide(sums, counts, out=np.zeros_like(sums, dtype=np.float64), where=counts > 0)


def bootstrap_ci(values, n_boot: int = N_BOOT, seed: int = 0, level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean over queries."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return (0.0, 0.0)
    idx = np.random.default_rng(seed).integers(0, len(v), size=(n_boot, len(v)))
    means = _resample_means(v, idx)
    lo, hi = np.percentile(means, [(1 - level) / 2 * 100, (1 + level) / 2 * 100])
    return float(lo), float(hi)


def weighted_score(per_query: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Overall score from a (B, m) matrix of metric means: Σ w·mean / Σ w."""
    return per_query @ weights / weights.sum()


def paired_bootstrap(a: np.ndarray, b: np.ndarray, weights, n_boot: int = N_BOOT, seed: int = 0):
    """Paired bootstrap of the overall-score difference a − b over the same queries.

    a, b: (n_queries, m) per-query metric values in the order of `weights` (NaN = undefined). Returns
    (difference, ci_low, ci_high, p_value), p two-sided: 2 · min(P(diff <= 0), P(diff >= 0)), capped at 1.
    """
    a, b, w = np.asarray(a, float), np.asarray(b, float), np.asarray(weights, float)
    n = len(a)
    idx = np.random.default_rng(seed).integers(0, n, size=(n_boot, n))
    diffs = weighted_score(_resample_means(a, idx), w) - weighted_score(_resample_means(b, idx), w)
    observed = (
        weighted_score(_resample_means(a, np.arange(n)[None, :]), w)[0]
        - weighted_score(_resample_means(b, np.arange(n)[None, :]), w)[0]
    )
    lo, hi = np.percentile(diffs, [2.5, 97.5])
    p = min(1.0, 2 * min((diffs <= 0).mean(), (diffs >= 0).mean()))
    return float(observed), float(lo), float(hi), float(p)


def holm(p_values) -> np.ndarray:
    """Holm's step-down adjustment: controls the family-wise error rate over all the comparisons."""
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


def min_questions_for_claim(alpha: float) -> int:
    """The fewest questions on which a paired test can call two configs different at `alpha`: below it
    no data, however lopsided, reaches significance, and a bootstrap's p = 0 would be an artefact (with
    one question every resample is the same)."""
    n = 1
    while smallest_paired_p(n) > alpha:
        n += 1
    return n
