"""Questions the choice never saw: a seeded split of the QA set into a selection split (everything that
chooses a config sees only it) and a holdout split, on which the finalists are confirmed afterwards.

The config that wins on a sample is, on average, worse on new questions (the winner's curse): the
holdout measures that drop and tells whether the recommended config is still tied with the best finalist
on questions no selection step saw (paired bootstrap, Holm). Pure polars/numpy, no Dagster.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from rag_core.common.fingerprint import fingerprint

SELECTION, HOLDOUT = "selection", "holdout"
# A holdout partition's key, at every stage that reads the questions: its config's key and this suffix (the
# config's settings up to that stage, on the other questions)
HOLDOUT_SUFFIX = "~holdout"
# The holdout's stages are assets of their own, `holdout_<stage>`: their partitions are the finalists, added
# when a leaderboard names them, so no partition exists that is not meant to be materialized
HOLDOUT_ASSET_PREFIX = "holdout_"


def is_holdout_key(key: str | None) -> bool:
    return bool(key) and key.endswith(HOLDOUT_SUFFIX)


def selection_key(key: str) -> str:
    """The config a holdout partition evaluates (a selection key is returned as it is)."""
    return key[: -len(HOLDOUT_SUFFIX)] if is_holdout_key(key) else key


def holdout_key(config_key: str) -> str:
    """A config's partition key in the holdout's assets."""
    return config_key + HOLDOUT_SUFFIX


def asset_name(stage: str, key: str | None = None) -> str:
    """The asset that holds a stage's partition `key`: the holdout's own asset for a holdout key."""
    return HOLDOUT_ASSET_PREFIX + stage if is_holdout_key(key) else stage


def stage_of_asset(name: str) -> str:
    """The stage an asset (its last key component) materializes: `holdout_answers` is the answers stage."""
    return name.removeprefix(HOLDOUT_ASSET_PREFIX)


def holdout_ids(query_ids: list[str], share: float, seed: int) -> set[str]:
    """The holdout's question ids: round(share × n) of them (at least 1, at most n − 1), in an order seeded by `seed` and each id alone,
    so the same QA set always splits the same way, on any machine and in any row order."""
    order = sorted(query_ids, key=lambda q: (fingerprint("holdout", seed, q), q))
    return set(order[: holdout_size(len(query_ids), share)])


def holdout_size(n: int, share: float) -> int:
    """How many of `n` questions the holdout takes (the selection keeps the rest)."""
    # at least one question on each side when there are two or more (a tiny QA set still confirms)
    return min(max(int(round(share * n)), 1), n - 1) if share > 0 and n >= 2 else 0


def split_rows(qa: pl.DataFrame, split: str, share: float, seed: int) -> pl.DataFrame:
    """The QA set's rows of one split, in the file's order."""
    held = holdout_ids(qa["query_id"].to_list(), share, seed)
    member = pl.col("query_id").is_in(list(held))
    return qa.filter(member if split == HOLDOUT else ~member)


def split_fingerprint(qa_fp: str, split: str, share: float, seed: int) -> str:
    """The fingerprint of one split of a QA snapshot: every artifact computed from it is told apart."""
    return fingerprint("qa-split", qa_fp, split, float(share), int(seed))


def holdout_share(decision: dict) -> str:
    """The holdout's real size, e.g. "2 of 3 questions" (a share rounds: 0.99 of 3 questions is 2)."""
    state = decision.get("holdout") or {}
    held = state.get("questions", state.get("n_questions"))
    if held is None or decision.get("questions") is None:
        return f"{state.get('share', 0):.0%} of the QA set"
    return f"{held} of {int(decision['questions']) + int(held)} questions"


def finalists(board: pl.DataFrame, decision: dict) -> list[str]:
    """The configs confirmed on the holdout, in board order: the top tier, the recommended config, and the
    best-ranked config that meets the constraints when it is neither; never a config that does not
    qualify (too many failed calls, no score)."""
    from rag_core.decision.qualification import qualified

    if not decision.get("recommended") and not decision.get("top_tier"):
        return []
    keys = set(decision.get("top_tier") or [])
    if decision.get("recommended"):
        keys.add(decision["recommended"])
    ok = qualified(board).filter(pl.col("meets_constraints"))
    if ok.height:
        keys.add(ok["config_key"][0])
    return [k for k in board["config_key"] if k in keys]


def confirm(
    board: pl.DataFrame,
    holdout: dict[str, pl.DataFrame],
    weights: dict[str, float],
    recommended: str | None,
    alpha: float = 0.05,
    seed: int = 0,
    summaries: dict[str, dict] | None = None,
    count_judge: bool = True,
) -> tuple[pl.DataFrame, dict]:
    """Score the finalists (`holdout`: config key -> its per-query metrics on the holdout) and confirm the
    recommendation. Returns one row per finalist (holdout score, its 95% interval or why none is given
    (`holdout_ci_withheld`: stats.why_no_estimate), the drop from the
    selection score, the Holm-adjusted paired p-value against the best finalist on the holdout, tied or
    not, its failed LLM calls) and a summary: `confirmed` when the recommended config is still
    statistically tied with the best finalist on the holdout (a paired sign-flip test over the holdout's
    questions, Holm over the finalists); otherwise `instead`, the best finalist on the holdout that meets
    the constraints. `confirmed` is None, and `status` says why, when the holdout cannot confirm anything:
    a finalist's LLM call failed on it (its score is an outage, not quality: a rerun asks again), or it has
    fewer questions than any paired test needs to reach alpha. `summaries`: the finalists' holdout
    evaluation summaries by key: a stage whose calls failed or fell back over the board's threshold
    (rag_core/decision/qualification.failed_stages: query transform, hops, reranking, compression, the
    judge) fails the holdout too."""
    from rag_core.decision.qualification import describe, failed_stages
    from rag_core.decision.recommendation import bootstrap_scores
    from rag_core.metrics.stats import holm, min_questions_for_claim, sign_flip_p, why_no_estimate
    from rag_core.search.halving import question_scores

    keys = [k for k in board["config_key"] if k in holdout]
    scores = bootstrap_scores({k: holdout[k] for k in keys}, weights, seed=seed)
    best = int(np.argmax(scores.observed))
    others = [i for i in range(len(keys)) if i != best]
    p_adj = np.ones(len(keys))
    if others:  # a paired sign-flip test per question: valid on the few questions a holdout may have
        per_question = [question_scores(holdout[k], weights) for k in keys]
        ids = sorted(per_question[best])
        diff = [
            np.array([per_question[best][q] - per_question[i][q] for q in ids], dtype=float) for i in others
        ]
        rng = np.random.default_rng(seed)
        p_adj[others] = holm([sign_flip_p(d, rng) for d in diff])
    rows = board.filter(pl.col("config_key").is_in(keys)).select(
        "config_key", "overall_score", "meets_constraints"
    )
    selection = dict(zip(rows["config_key"], rows["overall_score"], strict=True))
    meets = dict(zip(rows["config_key"], rows["meets_constraints"], strict=True))
    errors = {k: _failed_calls(holdout[k]) for k in keys}
    lo, hi = np.percentile(scores.samples, [2.5, 97.5], axis=0)
    n = int(holdout[keys[0]].height)
    # no interval from fewer questions than a claim needs, or from no spread: say why instead
    withheld = [why_no_estimate(n, float(np.ptp(scores.samples[:, i])), alpha) for i in range(len(keys))]
    table = pl.DataFrame(
        {
            "config_key": keys,
            "selection_score": [float(selection[k]) for k in keys],
            "holdout_overall_score": scores.observed.astype(float),
            "holdout_ci_low": pl.Series(
                [None if w else float(x) for x, w in zip(lo, withheld, strict=True)], dtype=pl.Float64
            ),
            "holdout_ci_high": pl.Series(
                [None if w else float(x) for x, w in zip(hi, withheld, strict=True)], dtype=pl.Float64
            ),
            "holdout_ci_withheld": pl.Series(withheld, dtype=pl.String),
            "winners_curse_drop": [
                float(selection[k]) - float(s) for k, s in zip(keys, scores.observed, strict=True)
            ],
            "holdout_p_holm_vs_best": p_adj,
            "holdout_tied_with_best": [bool(i == best or p_adj[i] >= alpha) for i in range(len(keys))],
            "n_holdout_questions": [int(holdout[k].height) for k in keys],
            "n_holdout_errors": [errors[k] for k in keys],
        }
    )
    need = min_questions_for_claim(alpha, max(1, len(keys) - 1))  # Holm over the finalists against the best
    failed = {k: e for k, e in errors.items() if e}
    stages = {
        k: describe(o) for k in keys if (o := failed_stages((summaries or {}).get(k) or {}, count_judge))
    }
    status = "failed" if failed or stages else "too few questions" if n < need else "decided"
    confirmed = None
    instead = None
    if recommended in keys and status == "decided":
        confirmed = bool(table.filter(pl.col("config_key") == recommended)["holdout_tied_with_best"][0])
        if not confirmed:
            pool = table.filter(pl.col("config_key").is_in([k for k in keys if meets[k]]))
            pool = pool if pool.height else table
            instead = pool.sort(["holdout_overall_score", "config_key"], descending=[True, False])[
                "config_key"
            ][0]
    summary = {
        "finalists": keys,
        "recommended": recommended,
        "confirmed": confirmed,
        "status": status,
        "instead": instead,
        "holdout_best": keys[best],
        "n_questions": n,
        "min_questions": need,
        "failed_calls": failed,
        "failed_stages": stages,
        "alpha": alpha,
    }
    if recommended in keys:
        row = table.filter(pl.col("config_key") == recommended).row(0, named=True)
        summary.update(
            selection_score=row["selection_score"],
            holdout_score=row["holdout_overall_score"],
            holdout_ci=None
            if row["holdout_ci_withheld"]
            else [row["holdout_ci_low"], row["holdout_ci_high"]],
            holdout_ci_withheld=row["holdout_ci_withheld"],
            drop=row["winners_curse_drop"],
        )
    summary["verdict"] = verdict(summary)
    return table, summary


def _failed_calls(per_query: pl.DataFrame) -> int:
    """The questions whose LLM call failed after retries (the evaluation's `error` column)."""
    return int(per_query["error"].drop_nulls().len()) if "error" in per_query.columns else 0


def verdict(s: dict) -> str:
    """One sentence on the holdout confirmation, for the terminal, the report and the metadata."""
    n = s["n_questions"]
    if s["recommended"] is None:
        return f"nothing to confirm: no config is recommended ({len(s['finalists'])} finalists on {n} holdout questions)"
    status = s.get("status", "decided")
    if status == "failed" and not s["failed_calls"]:  # another stage than generation
        who = "; ".join(f"{k}: {e}" for k, e in s["failed_stages"].items())
        return (
            f"not confirmed, the holdout failed: LLM calls of the finalists failed or fell back on the {n} "
            f"holdout questions ({who}); these scores measure the failure, not the pipeline. Run again: a "
            "rerun asks the failed calls again"
        )
    if status == "failed":
        calls = sum(s["failed_calls"].values())
        who = ", ".join(f"{k}: {e}" for k, e in s["failed_calls"].items())
        return (
            f"not confirmed, the holdout failed: {calls} LLM call(s) of the finalists failed on the "
            f"{n} holdout questions ({who}); a failed call scores as a wrong answer, so these scores say "
            "nothing of quality. Run again: a rerun asks the failed calls again"
        )
    if status == "too few questions":
        return (
            f"not confirmed, too few holdout questions: on {n} question(s) no paired test can tell the "
            f"finalists apart at alpha {s['alpha']:g} (its smallest p-value is 2/2^{n}); it takes at least "
            f"{s['min_questions']} holdout questions (a larger QA set or decision.holdout)"
        )
    interval = (
        f"95% CI {s['holdout_ci'][0]:.3f}–{s['holdout_ci'][1]:.3f}"
        if s.get("holdout_ci")
        else f"no interval: {s.get('holdout_ci_withheld')}"
    )
    drop = s["drop"]
    change = (
        f"drop {drop:+.4f}, the winner's curse"
        if drop > 0
        else f"{-drop:.4f} higher on the holdout"
        if drop < 0
        else "no change"
    )
    head = (
        f"on {n} holdout questions no selection step saw, {s['recommended']} scores "
        f"{s['holdout_score']:.4f} ({interval}) against {s['selection_score']:.4f} on the "
        f"selection split ({change})"
    )
    if s["confirmed"]:
        return f"confirmed: {head}; it is still statistically tied with the best of {len(s['finalists'])} finalists"
    return (
        f"NOT confirmed: {head}; it is significantly worse than {s['holdout_best']} on the holdout "
        f"(paired sign-flip test, Holm); the holdout would pick {s['instead']} instead"
    )


def unsupported_claim(decision: dict) -> str | None:
    """Why the sweep's evidence does not support shipping its recommendation (None: it does): no config
    qualifies or none is recommended, or the holdout that was to confirm it failed. Nothing is registered
    then, and `rag-sweep run` exits non-zero."""
    if not decision.get("recommended"):
        return decision.get("why") or "no config is recommended"
    held = decision.get("holdout") or {}
    if held.get("status") == "failed":
        return held["verdict"]
    return None
