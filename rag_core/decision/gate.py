"""A gate for change: is each candidate config not worse than a baseline (the registered champion) by more
than a margin, on the same questions? (pure numpy and scipy)

Each comparison is a paired one-sided t-test on the per-question differences, candidate minus baseline:
- non-inferiority (the default): H0 "worse by the margin or more" (d <= -margin). Rejected: **pass**.
  The reverse test, H0 d >= -margin, rejected: **fail** (worse by more than the margin). Neither:
  **inconclusive**, with the questions a test of 80% power would need at the observed spread.
- equivalence (two one-sided tests): pass when -margin < d < margin is shown, fail when the difference is
  shown outside that band, on either side.
Holm's adjustment runs over the candidates, for each test (the overall score; each metric with its own
margin). A candidate fails when any of its tests fails, passes when all pass.

The overall score's per-question difference is its exact linearization: a metric's mean over the questions
where both configs define it (a question without gold documents defines no recall) enters the weighted mean
as each such question's share, so the mean of the per-question values is the difference of the two
configs' overall scores over those questions (when nothing is undefined: each question's weighted score).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
import polars as pl

from rag_core.decision.qualification import failed_stages, outage_reason
from rag_core.metrics import needs
from rag_core.metrics.stats import holm, min_questions_for_claim, questions_for_power

OVERALL = "overall_score"
VERDICTS = ("pass", "fail", "inconclusive")
EXIT_CODES = {"pass": 0, "fail": 1, "inconclusive": 3}  # 2 stays a usage error


@dataclass(frozen=True)
class GateSettings:
    margin: float  # in overall score: how much worse than the baseline still passes
    metric_margins: dict[str, float] = field(default_factory=dict)  # e.g. {"recall_at_k": 0.02}
    alpha: float = 0.05
    power: float = 0.8  # of the test whose size an inconclusive verdict reports
    equivalence: bool = False

    @classmethod
    def of(cls, spec) -> GateSettings:
        """From a sweep's `gate:` section (rag_core.planning.spec.GateSpec)."""
        return cls(spec.margin, dict(spec.metric_margins), spec.alpha, spec.power, spec.equivalence)

    @property
    def level(self) -> float:
        """The confidence of the interval shown: 1 - 2 alpha (its bounds are the one-sided tests' bounds)."""
        return 1 - 2 * self.alpha


@dataclass
class Test:
    """One candidate's test on the overall score or on one metric."""

    candidate: str
    metric: str
    margin: float
    n: int  # questions on which both configs define it
    difference: float | None  # mean of candidate - baseline
    ci_low: float | None  # the unadjusted (1 - 2 alpha) interval
    ci_high: float | None
    p_pass: float = 1.0  # raw p of the test whose rejection passes (non-inferiority; TOST)
    p_fail: float = 1.0  # raw p of the test whose rejection fails (worse than the margin; outside the band)
    p_pass_holm: float = 1.0
    p_fail_holm: float = 1.0
    verdict: str = "inconclusive"
    questions_needed: int | None = None  # an inconclusive test: the questions a decisive test would need
    why: str = ""
    decidable: bool = True  # False: no test can be run (too few questions, undefined, an outage)
    # the interval the Holm-adjusted verdict used: each bound at the level Holm gave its test (`holm_bounds`)
    holm_ci_low: float | None = None
    holm_ci_high: float | None = None


@dataclass
class Candidate:
    key: str
    label: str
    verdict: str
    tests: list[Test]
    score: float | None = None  # overall score over the compared questions
    why: str = ""


@dataclass
class GateResult:
    baseline: str  # the baseline's label
    baseline_score: float | None
    settings: GateSettings
    candidates: list[Candidate]
    questions: int

    @property
    def verdict(self) -> str:
        """fail if any candidate fails, else inconclusive if any is, else pass."""
        found = {c.verdict for c in self.candidates}
        return "fail" if "fail" in found else "inconclusive" if "inconclusive" in found else "pass"

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def to_dict(self) -> dict:
        return {
            "verdict": self.verdict,
            "baseline": self.baseline,
            "baseline_score": self.baseline_score,
            "questions": self.questions,
            "settings": asdict(self.settings),
            "candidates": [asdict(c) for c in self.candidates],
        }


def _matrix(frame: pl.DataFrame, metrics: list[str]) -> np.ndarray:
    return frame.sort("query_id").select(metrics).cast(pl.Float64).fill_null(float("nan")).to_numpy()


def paired_differences(
    candidate: pl.DataFrame, baseline: pl.DataFrame, weights: dict[str, float], metrics: list[str]
) -> dict[str, np.ndarray]:
    """Per-question differences candidate - baseline: `overall_score` (its linearization, module doc) and
    each of `metrics`, each over the questions where both define it. The frames are the configs'
    per-query evaluations of the same questions."""
    ids_a, ids_b = sorted(candidate["query_id"].to_list()), sorted(baseline["query_id"].to_list())
    if ids_a != ids_b:
        raise ValueError(
            f"the configs were evaluated on other questions ({len(ids_a)} and {len(ids_b)}): not paired"
        )
    names = list(dict.fromkeys([*weights, *metrics]))
    names = [m for m in names if m in candidate.columns and m in baseline.columns]
    a, b = _matrix(candidate, names), _matrix(baseline, names)
    both = ~np.isnan(a) & ~np.isnan(b)
    diff = np.where(both, a - b, 0.0)
    out = {m: diff[both[:, j], j] for j, m in enumerate(names) if m in metrics}
    scored = [j for j, m in enumerate(names) if m in weights and both[:, j].any() and weights[m] > 0]
    rows = both[:, scored].any(axis=1) if scored else np.zeros(len(a), dtype=bool)
    n = int(rows.sum())
    if n == 0:
        out[OVERALL] = np.zeros(0)
        return out
    total = sum(weights[names[j]] for j in scored)
    contrib = sum(weights[names[j]] * diff[:, j] * n / both[:, j].sum() for j in scored) / total
    out[OVERALL] = np.asarray(contrib, dtype=float)[rows]
    return out


def overall_over_shared(frame: pl.DataFrame, other: pl.DataFrame, weights: dict[str, float]) -> float | None:
    """`frame`'s overall score over the questions where it and `other` both define each metric: the score
    the gate's differences are differences of."""
    names = [m for m in weights if m in frame.columns and m in other.columns and weights[m] > 0]
    a, b = _matrix(frame, names), _matrix(other, names)
    both = ~np.isnan(a) & ~np.isnan(b)
    used = [j for j in range(len(names)) if both[:, j].any()]
    if not used:
        return None
    total = sum(weights[names[j]] for j in used)
    return float(sum(weights[names[j]] * a[both[:, j], j].mean() for j in used) / total)


def _t_test(d: np.ndarray, margin: float, settings: GateSettings) -> tuple[float, float, float, float, float]:
    """(mean, interval low, interval high, p_pass, p_fail) of the differences `d` against the margin."""
    from scipy import stats

    n, mean = len(d), float(d.mean())
    se = float(d.std(ddof=1) / math.sqrt(n))
    df = n - 1
    half = float(stats.t.ppf(1 - settings.alpha, df)) * se

    def above(bound: float) -> float:  # p of H0 d <= bound (small: d shown above it)
        if se == 0:
            return 0.0 if mean > bound else 1.0
        return float(stats.t.sf((mean - bound) / se, df))

    def below(bound: float) -> float:  # p of H0 d >= bound (small: d shown below it)
        if se == 0:
            return 0.0 if mean < bound else 1.0
        return float(stats.t.cdf((mean - bound) / se, df))

    if settings.equivalence:
        p_pass = max(above(-margin), below(margin))  # TOST
        p_fail = _outside_band(mean, se, df, margin)
    else:
        p_pass, p_fail = above(-margin), below(-margin)
    return mean, mean - half, mean + half, p_pass, p_fail


def _outside_band(mean: float, se: float, df: int, margin: float) -> float:
    """p of H0 "the difference lies within ±margin" against "outside it, on either side": the chance, at the
    worst case for H0 (a true difference on the band's edge), of a mean at least as far outside the band as
    the observed one, on EITHER side. The smaller of the two one-sided p's alone erred up to twice alpha at
    the edge of a band that is narrow against the spread (both tails reject)."""
    from scipy import stats

    beyond = abs(mean) - margin  # how far outside the band the mean lies (negative: inside)
    if se == 0:
        return 0.0 if beyond > 0 else 1.0
    # true d = +margin (by symmetry the same as -margin): the mean beyond +margin + beyond, or below -margin - beyond
    return float(min(1.0, stats.t.sf(beyond / se, df) + stats.t.cdf((-2 * margin - beyond) / se, df)))


def questions_needed(d: np.ndarray, margin: float, settings: GateSettings, tests: int) -> int | None:
    """The questions a paired one-sided t-test (at alpha / tests: Holm's first step, the strictest) needs to
    decide at `settings.power`, if the differences keep their observed mean and spread; None when the
    mean sits on a boundary (no number of questions decides it)."""
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    bounds = [-margin, margin] if settings.equivalence else [-margin]
    distance = min(abs(mean - b) for b in bounds)
    if distance == 0:
        return None
    if sd == 0:
        return max(len(d) + 1, 2)
    n = questions_for_power(distance / sd, settings.alpha / tests, settings.power)
    return max(n, len(d) + 1)


def per_query_failures(per_query: pl.DataFrame) -> dict[str, float]:
    """The failure counts a per-query evaluation holds itself (generation errors, judge failures), as an
    evaluation's summary has them: what the gate counts when it is given no summary."""
    out = {"n_queries": float(per_query.height), "n_generation_errors": 0.0}
    if "error" in per_query.columns:
        out["n_generation_errors"] = float(per_query["error"].drop_nulls().len())
    if "faithfulness_judge" in per_query.columns:
        out["n_judge_failures"] = float(per_query["faithfulness_judge"].null_count())
    return out


def gate(
    candidates: dict[str, pl.DataFrame],
    baseline: pl.DataFrame,
    weights: dict[str, float],
    settings: GateSettings,
    labels: dict[str, str] | None = None,
    baseline_label: str = "baseline",
    summaries: dict[str, dict] | None = None,
    baseline_key: str | None = None,
    count_judge: bool = True,
) -> GateResult:
    """Each candidate's verdict against the baseline (module doc). `candidates`: config key -> its
    per-query evaluation; `baseline`: the baseline's, on the same questions. `weights`: the effective ones
    (rag_core/decision/qualification.effective_weights, as the board scores). `summaries`: each config's
    evaluation summary by key (the baseline's under `baseline_key`): a config whose LLM calls failed in any
    stage over the board's threshold (qualification.failed_stages) is no evidence either way; without
    them, the failures the per-query frames hold are counted. A candidate that is `baseline_key` itself
    (an unchanged config) passes, saying so, unless its calls failed."""
    labels = labels or {}
    summaries = summaries or {}
    metrics = list(settings.metric_margins)
    floor = min_questions_for_claim(settings.alpha, max(1, len(candidates)))  # Holm over the candidates

    def outage(key: str | None, frame: pl.DataFrame) -> dict:
        return failed_stages(summaries.get(key) or per_query_failures(frame), count_judge)

    outage_base = outage(baseline_key, baseline)
    tests: dict[str, list[Test]] = {}
    diffs: dict[tuple[str, str], np.ndarray] = {}
    for key, frame in candidates.items():
        per = paired_differences(frame, baseline, weights, metrics)
        out = []
        outage_here = outage(key, frame)
        for metric, margin in [(OVERALL, settings.margin), *settings.metric_margins.items()]:
            d = per.get(metric, np.zeros(0))
            test = Test(key, metric, margin, len(d), None, None, None)
            if outage_base or outage_here:
                who, stages = (
                    ("the baseline's", outage_base) if outage_base else ("the candidate's", outage_here)
                )
                test.why = outage_reason(stages, who)
                test.decidable = False
            elif key == baseline_key:  # the same evaluation: nothing changed, nothing to test
                test.difference, test.verdict, test.decidable = 0.0, "pass", False
                test.why = f"unchanged: the candidate is the baseline's own config ({len(d)} questions)"
            elif len(d) == 0:
                need = needs(metric) or "values this evaluation computes"
                test.why = f"no question defines it for both configs (it needs {need})"
                test.decidable = False
            elif len(d) < floor:
                test.difference = float(d.mean())
                test.why = f"{len(d)} questions: a paired test reaches alpha {settings.alpha:g} with at least {floor}"
                test.questions_needed = floor
                test.decidable = False
            else:
                test.difference, test.ci_low, test.ci_high, test.p_pass, test.p_fail = _t_test(
                    d, margin, settings
                )
                diffs[(key, metric)] = d
            out.append(test)
        tests[key] = out
    # Holm over the candidates, per test: the undecidable ones count (their p of 1 changes no other)
    m = len(candidates)
    for j, metric in enumerate([OVERALL, *metrics]):
        column = [tests[k][j] for k in candidates]
        for t, pp, pf in zip(
            column, holm([t.p_pass for t in column]), holm([t.p_fail for t in column]), strict=True
        ):
            t.p_pass_holm, t.p_fail_holm = float(pp), float(pf)
            if not t.decidable:
                continue
            t.verdict = (
                "fail"
                if t.p_fail_holm < settings.alpha
                else "pass"
                if t.p_pass_holm < settings.alpha
                else "inconclusive"
            )
            d = diffs[(t.candidate, metric)]
            t.holm_ci_low, t.holm_ci_high = holm_bounds(d, t, settings)
            if t.verdict == "fail":
                t.why = _fail_why(t, settings)
            elif t.verdict == "pass":
                t.why = _pass_why(t, settings)
            else:
                t.questions_needed = questions_needed(d, t.margin, settings, m)
                t.why = _inconclusive_why(t, settings)
    results = []
    for key, frame in candidates.items():
        verdicts = {t.verdict for t in tests[key]}
        verdict = "fail" if "fail" in verdicts else "pass" if verdicts == {"pass"} else "inconclusive"
        first = next(t for t in tests[key] if t.verdict == verdict)
        results.append(
            Candidate(
                key,
                labels.get(key, key),
                verdict,
                tests[key],
                overall_over_shared(frame, baseline, weights),
                f"{first.metric}: {first.why}",
            )
        )
    any_frame = next(iter(candidates.values()), baseline)
    return GateResult(
        baseline_label,
        overall_over_shared(baseline, any_frame, weights),
        settings,
        results,
        baseline.height,
    )


def holm_bounds(d: np.ndarray, t: Test, settings: GateSettings) -> tuple[float, float]:
    """The interval the Holm-adjusted verdict used: each one-sided bound at the level Holm gave its test,
    alpha · p / p_Holm (p_Holm < alpha exactly when p < that level), so a bound lies beyond the margin
    exactly when the verdict says it is shown. Non-inferiority: the lower bound is the passing test's, the
    upper bound the failing test's. Equivalence: both bounds at the passing test's level for a pass, at
    the failing test's for a fail, the wider of the two otherwise."""
    from scipy import stats
    from scipy.optimize import brentq

    n, mean = len(d), float(d.mean())
    se = float(d.std(ddof=1) / math.sqrt(n))

    def level(p: float, p_holm: float) -> float:  # p_Holm 0: p is 0 too (no spread), any level will do
        return settings.alpha * p / p_holm if p_holm > 0 else settings.alpha

    def half(a: float) -> float:
        return float(stats.t.ppf(1 - min(max(a, 1e-300), 0.5), n - 1)) * se

    a_pass, a_fail = level(t.p_pass, t.p_pass_holm), level(t.p_fail, t.p_fail_holm)
    if not settings.equivalence:
        return mean - half(a_pass), mean + half(a_fail)
    if se > 0 and 0 < a_fail < 1:  # the one-sided level at which a bound outside the band is the two-tailed
        # `_outside_band` rejecting at a_fail (it adds the far tail to the near one's p)
        def excess(q: float) -> float:
            beyond = float(stats.t.isf(q, n - 1)) * se
            return _outside_band(t.margin + beyond, se, n - 1, t.margin) - a_fail

        a_fail = brentq(excess, 1e-300, a_fail) if excess(a_fail) > 0 else a_fail
    a = a_pass if t.verdict == "pass" else a_fail if t.verdict == "fail" else min(a_pass, a_fail)
    return mean - half(a), mean + half(a)


def _band(t: Test, settings: GateSettings) -> str:
    band = (
        f"difference {t.difference:+.4f}, {settings.level:.0%} interval [{t.ci_low:+.4f}, {t.ci_high:+.4f}]"
    )
    if t.holm_ci_low is not None:
        band += f", Holm-adjusted [{t.holm_ci_low:+.4f}, {t.holm_ci_high:+.4f}]"
    return band


def _pass_why(t: Test, settings: GateSettings) -> str:
    shown = f"within ±{t.margin:g}" if settings.equivalence else f"not worse by {t.margin:g} or more"
    return f"{shown} ({_band(t, settings)}; p {t.p_pass_holm:.3g} Holm, {t.n} questions)"


def _fail_why(t: Test, settings: GateSettings) -> str:
    side = "better" if settings.equivalence and (t.difference or 0) > 0 else "worse"
    return f"{side} by more than {t.margin:g} ({_band(t, settings)}; p {t.p_fail_holm:.3g} Holm, {t.n} questions)"


def _inconclusive_why(t: Test, settings: GateSettings) -> str:
    need = (
        f"about {t.questions_needed} questions would decide it at this spread ({t.questions_needed - t.n} more)"
        if t.questions_needed
        else "the difference sits on the margin: no number of questions decides it"
    )
    return f"neither shown ({_band(t, settings)}, margin {t.margin:g}); {need}"
