"""Did anything change since the last evaluation? A forced re-evaluation (the nightly schedule) of a config
is compared with its previous evaluation on the same questions by a paired test, and a new leaderboard
with the previous one: a significant drop of the recommended config, a change of the top tier, or a lost
recommendation is a finding the leaderboard's `nightly_drift` check fails on and the alert sensor sends.
Pure numpy/polars."""

from __future__ import annotations

import numpy as np
import polars as pl

from rag_core.metrics.stats import bootstrap_ci, sign_flip_p
from rag_core.search.halving import question_scores


def compare(
    previous: pl.DataFrame, current: pl.DataFrame, weights: dict[str, float], seed: int = 0
) -> dict | None:
    """A config's evaluation against its previous one, question by question (paired sign-flip test):
    the overall scores before and after with their 95% intervals (None where none may be given), the change and its p-value; None when
    they are not on the same questions."""
    before, after = question_scores(previous, weights), question_scores(current, weights)
    if not before or set(before) != set(after):
        return None
    ids = sorted(before)
    b = np.array([before[q] for q in ids], dtype=float)
    a = np.array([after[q] for q in ids], dtype=float)
    p = sign_flip_p(a - b, np.random.default_rng(seed))
    # None: too few questions or no spread for an interval (stats.why_no_estimate)
    (blo, bhi), (alo, ahi) = bootstrap_ci(b) or (None, None), bootstrap_ci(a) or (None, None)
    return {
        "drift_before": float(b.mean()),
        "drift_before_ci_low": blo,
        "drift_before_ci_high": bhi,
        "drift_after": float(a.mean()),
        "drift_after_ci_low": alo,
        "drift_after_ci_high": ahi,
        "drift_change": float(a.mean() - b.mean()),
        "drift_p_value": float(p),
    }


def findings(previous: dict, decision: dict, board: pl.DataFrame, alpha: float) -> dict:
    """What changed between two leaderboards of one sweep on the same questions: `severity` None (nothing
    to report), "WARN" (the recommended config dropped significantly, the top tier changed, or the judge
    drifted from people's labels: judge_drift) or "ERROR"
    (the previous recommendation is no longer recommended), with a message and the alert's content."""
    rec, before_rec = decision.get("recommended"), previous.get("recommended")
    rows = {r["config_key"]: r for r in board.iter_rows(named=True)}
    problems, severity = [], None
    watched = before_rec or rec
    row = rows.get(watched, {})
    dropped = (
        row.get("drift_p_value") is not None and row["drift_p_value"] < alpha and row["drift_change"] < 0
    )
    if dropped:
        severity = "WARN"
        problems.append(
            f"{watched} dropped from {row['drift_before']:.4f} to {row['drift_after']:.4f} "
            f"(paired sign-flip test, p {row['drift_p_value']:.3g})"
        )
    tier_before, tier_now = set(previous.get("top_tier") or []), set(decision.get("top_tier") or [])
    if tier_before != tier_now:
        severity = severity or "WARN"
        gone, new = sorted(tier_before - tier_now), sorted(tier_now - tier_before)
        problems.append(
            "the top tier changed"
            + (f": left it {', '.join(gone)}" if gone else "")
            + (f"; joined it {', '.join(new)}" if new else "")
        )
    if before_rec and before_rec != rec:
        severity = "ERROR"
        problems.append(f"the recommendation changed from {before_rec} to {rec or 'none'}")
    judge = judge_drift(previous.get("judge"), decision.get("judge"))
    if judge:
        severity = severity or "WARN"
        problems.append(judge)
    alert = None
    if severity:
        alert = {
            "severity": severity,
            "config": watched,
            "message": "; ".join(problems),
            "before": _score(row, "drift_before"),
            "after": _score(row, "drift_after"),
            "p_value": row.get("drift_p_value"),
            "recommended_before": before_rec,
            "recommended_now": rec,
            **({"judge": _kappas(previous.get("judge"), decision.get("judge"))} if judge else {}),
        }
    return {"severity": severity, "message": "; ".join(problems) or "no significant change", "alert": alert}


def judge_drift(before: dict | None, now: dict | None) -> str | None:
    """What changed in the judge's agreement with people's labels between two leaderboards, or None: its
    metric stopped being weighted (its kappa fell below min_kappa, or became undefined), or its kappa fell
    below the previous measurement's 95% interval (a drop the labels' sampling does not explain)."""
    if not before or not now or before.get("labels") != now.get("labels"):
        return None  # no judge, or other labels: not the same measurement
    was, kappa = before.get("kappa"), now.get("kappa")
    figures = f"kappa {_kappa(was)} to {_kappa(kappa)} on {now.get('n', '?')} labels"
    if before.get("weighted") and now.get("n") is None:  # every call failed: an outage, not a measurement
        return f"the judge {now['model']} could not be measured on its labels: {now.get('reason', '')}"
    if before.get("weighted") and not now.get("weighted"):
        return f"the judge {now['model']} is no longer weighted ({figures}, min_kappa {now['min_kappa']:g})"
    if (
        was is not None
        and kappa is not None
        and before.get("kappa_low") is not None
        and kappa < before["kappa_low"]
    ):
        return f"the judge {now['model']}'s agreement with the labels dropped ({figures}, below the 95% interval)"
    return None


def _kappa(value) -> str:
    return "undefined" if value is None else f"{value:.3f}"


def _kappas(before: dict, now: dict) -> dict:
    keys = ("kappa", "kappa_low", "kappa_high", "weighted")
    return {
        "model": now.get("model"),
        "before": {k: before.get(k) for k in keys},
        "now": {k: now.get(k) for k in keys},
    }


def _score(row: dict, prefix: str) -> dict | None:
    if row.get(prefix) is None:
        return None
    return {"score": row[prefix], "ci95": [row[f"{prefix}_ci_low"], row[f"{prefix}_ci_high"]]}
