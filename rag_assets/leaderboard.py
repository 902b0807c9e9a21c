"""Leaderboard: every evaluated config of the sweep ranked by weighted overall score, grouped into tiers,
with the recommended config under the sweep's `decision` constraints (rag_core/decision/recommendation.py) and a ship
report (rag_core/decision/report.py). Besides its content-addressed artifact (side table `decision`: the
recommendation as JSON) it writes `<data_dir>/leaderboards/<sweep>.parquet`, `.png`, `.report.html` and
`.report.md`."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import dagster as dg
import polars as pl

from rag_assets.board_files import leaderboard_path
from rag_assets.stage_asset import Check, StageLogic, StageRun, split_inputs
from rag_core.decision.drift import findings
from rag_core.decision.holdout import SELECTION, finalists, holdout_ids, holdout_share, is_holdout_key
from rag_core.decision.leaderboard import (
    DISPLAY_COLUMNS,
    compare_to_leader,
    rank_configs,
    score_plot_png,
    to_markdown,
    with_language_scores,
    with_plugin_metrics,
)
from rag_core.decision.qualification import (
    JUDGE_METRIC,
    MAX_ERROR_SHARE,
    effective_weights,
    judge_is_weighted,
)
from rag_core.decision.recommendation import Constraints, bootstrap_scores, decide
from rag_core.decision.report import missed_questions, query_scores, ship_report
from rag_core.metrics import undefined_reasons
from resources.artifacts import Artifact
from resources.storage import atomic_write_bytes, atomic_write_parquet, modified, read_parquet

# The Dagster table: the short label for the key (the full keys are the `config_keys` metadata), the
# score with its interval and tier as the CLI shows them, then the display metrics.
TABLE_COLUMNS = [
    "rank",
    "label",
    "overall_score",
    "overall_ci95",
    "tier",
    "vs_leader",
    *[c for c in DISPLAY_COLUMNS if c not in ("rank", "config_key", "overall_score")],
    "failed_stages",
]
COLUMN_NOTES = {
    "label": "what differs between the sweep's configs; full keys in the config_keys metadata",
    "tier": "1: the best config, every config not significantly worse (paired bootstrap, Holm) and any "
    "scoring above one of them",
    "vs_leader": "leader; tied (in tier 1); worse (a lower tier); too many errors (failed LLM calls)",
    "failed_stages": f"the LLM-backed stages whose calls failed or fell back for more than {MAX_ERROR_SHARE:.0%} "
    "of them",
}


def _table(df: pl.DataFrame) -> dg.TableMetadataValue:
    """A Dagster table of a frame: lists joined by '; ', floats rounded to 3 decimals."""
    df = df.with_columns(
        [pl.col(c).list.join("; ") for c, t in df.schema.items() if t == pl.List(pl.String)]
        + [pl.col(c).round(3) for c, t in df.schema.items() if t == pl.Float64]
    )
    kind = {pl.Float64: "float", pl.Int64: "int", pl.Boolean: "bool"}
    return dg.MetadataValue.table(
        records=[dg.TableRecord(r) for r in df.to_dicts()],
        schema=dg.TableSchema(
            columns=[dg.TableColumn(c, kind.get(t, "string")) for c, t in df.schema.items()]
        ),
    )


def question_tables(board: pl.DataFrame, per_query: dict, qa: pl.DataFrame, decision: dict) -> dict:
    """The leader's results question by question, and the questions the recommended config misses that
    another config answers (by label), as Dagster tables."""
    label = dict(zip(board["config_key"], board["label"], strict=True))
    leader = board["config_key"][0]
    weights = decision["weights"]
    mine = per_query[leader]
    metrics = [m for m in ("recall_at_k", "exact_match", "token_f1") if m in mine.columns]
    rows = (
        qa.select("query_id", "question", pl.col("answers").alias("gold"))
        .join(
            mine.select("query_id", "answer", *metrics).with_columns(
                query_scores(mine, weights).alias("score")
            ),
            on="query_id",
        )
        .sort("score", "query_id")
    )
    out = {"leader_questions": _table(rows.drop("query_id")), "leader_label": label[leader]}
    rec = decision.get("recommended")
    if rec:
        missed = missed_questions(per_query, qa, weights, rec)
        if missed.height:
            missed = missed.with_columns(pl.col("other_config").replace_strict(label, default=None))
            out["missed_by_recommended"] = _table(missed.drop("query_id"))
    return out


def publish_board(
    run: StageRun,
    frame: pl.DataFrame,
    decision: dict,
    per_query: dict,
    qa: pl.DataFrame,
    holdout: pl.DataFrame | None = None,
) -> tuple[Path, str, bytes, dict[str, str]]:
    """Write the sweep's leaderboard files (`<sweep>.parquet`, `.png`, `.decision.json`, the ship report
    and its plots); `holdout`: the finalists' confirmation on the holdout (rag_core/decision/holdout.py).
    Returns (the board's path, its Markdown table, its plot, the ship report by MLflow artifact name)."""
    sweep = run.plan.sweep
    plan = run.plan
    optimized = [
        {
            "key": key,
            "label": plan.labels[key],
            "base_key": base,
            "base_label": plan.labels[base],
            "seed": {c: plan.config(base).text(c) for c in sweep.optimize.components},
            "best": {c: plan.config(key).text(c) for c in sweep.optimize.components},
        }
        for key, base in plan.optimized_from.items()
        if key in set(frame["config_key"])
    ]
    md, page, plots = ship_report(
        sweep.name,
        frame,
        decision,
        per_query,
        qa,
        decision["weights"],
        sweep.decision.model_dump(),
        holdout,
        optimized,
    )
    path = atomic_write_parquet(frame, leaderboard_path(run.resources.artifacts.data_dir, sweep.name))
    png = score_plot_png(frame)
    files = {
        path.with_suffix(".png"): png,
        path.with_suffix(".decision.json"): json.dumps(decision, indent=2).encode(),
        path.with_suffix(".report.md"): md.encode(),
        path.with_suffix(".report.html"): page.encode(),
        **{path.with_name(f"{sweep.name}.{name}"): data for name, data in plots.items()},
    }
    for file, data in files.items():
        atomic_write_bytes(file, data)
    return path, to_markdown(frame), png, {"ship_report.html": page, "ship_report.md": md}


def judge_agreement(run: StageRun, previous: dict | None, evaluations: list) -> dict | None:
    """The sweep's judge against its labels (evaluation.judge_labels): Cohen's kappa and accuracy with their
    intervals, and whether faithfulness_judge may be weighted: only a judge whose kappa reaches min_kappa is
    (an undefined kappa is not). The judge is asked through the LLM call cache, as `rag-sweep
    calibrate-judge` asks it, so a rerun pays nothing; but when an evaluation this board ranks was computed
    since the judge was last measured (`previous`: the last board's decision; the nightly re-evaluation asks
    the judge again), the labelled answers are asked again too: the agreement is as fresh as the scores it
    weighs, and a judge that drifted is seen (rag_core/decision/drift.py)."""
    sweep = run.plan.sweep
    if sweep.judge_labels is None:
        return None
    last = (previous or {}).get("judge")  # None: no earlier measurement on this board's questions
    measured = (last or {}).get(
        "measured_at", 0.0
    )  # a board from before measurements were dated: asked again
    fresh = last is not None and any(modified(r.path()) > measured for r in evaluations)
    return measure_judge(sweep, run.llm, fresh)


def measure_judge(sweep, llm, fresh: bool = False) -> dict | None:
    """The sweep's judge against its labels (`judge_agreement`), asked through `llm` (again, not from the
    call cache, when `fresh`); None without labels. What the board weighs the judge's metric by, and the
    gate too (rag_core/decision/qualification.effective_weights)."""
    if sweep.judge_labels is None:
        return None
    from rag_core.evaluation.evaluate import judge_labelled
    from rag_core.metrics.judge_agreement import agreement, read_labels
    from rag_core.metrics.judge_alignment import leaked
    from resources.llm import Reasking

    ev = sweep.evaluation
    rows, labels = read_labels(sweep.judge_labels)
    prompt = sweep.judge.prompt  # the prompt the evaluations ask it with (evaluation.judge_prompt)
    scores = judge_labelled(Reasking(llm) if fresh else llm, sweep.judge_model, rows, prompt)
    base = {
        "model": sweep.judge_model,
        "labels": str(sweep.judge_labels),
        "min_kappa": ev.min_kappa,
        "measured_at": time.time(),
        "asked_again": fresh,
    }
    if sweep.judge.custom:
        base["prompt"] = sweep.judge.prompt_version
    shown = len(leaked(prompt, rows))  # labels its prompt carries as worked examples: not held out
    if shown:
        base["labels_in_prompt"] = shown
    try:
        result = agreement(labels, scores, [len(r["answer"]) for r in rows], ev.judge_threshold)
    except ValueError as e:  # every call failed: nothing measured
        return {**base, "verdict": "undefined", "weighted": False, "reason": f"not weighted: {e}"}
    verdict = result.verdict(ev.min_kappa)
    figures = {k: v for k, v in result.as_dict().items() if k != "length_bias"}
    if verdict == "trusted":
        reason = f"weighted: kappa {result.kappa:.3f} on {result.n} labels reaches min_kappa {ev.min_kappa:g}"
    elif verdict == "undefined":
        reason = f"reported, not weighted: kappa undefined on {result.n} labels ({result.undefined})"
    else:
        reason = (
            f"reported, not weighted: kappa {result.kappa:.3f} (95% {result.kappa_low:.3f} to "
            f"{result.kappa_high:.3f}) on {result.n} labels is below min_kappa {ev.min_kappa:g}"
        )
    if shown:
        reason += f" ({shown} of the labels are worked examples in the judge's prompt)"
    return {**base, **figures, "verdict": verdict, "weighted": verdict == "trusted", "reason": reason}


class Leaderboard(StageLogic):
    description = (
        "Configs ranked by weighted overall score with 95% intervals, grouped into Holm-corrected tiers, with "
        "the recommended config under the sweep's decision constraints and a ship report."
    )
    # llm: the judge, measured against people's labels when the sweep has them (evaluation.judge_labels)
    resources = ("tracking", "llm")
    checks = (
        Check("complete", "Every config of the sweep is evaluated and on the board."),
        Check(
            "nightly_drift",
            "Against the previous leaderboard on the same questions: the recommended config did not drop "
            "significantly (WARN), the top tier did not change (WARN), the judge did not drift from people's "
            "labels (WARN), the recommendation was not lost (ERROR).",
        ),
    )

    def kinds(self, plan) -> set[str]:
        return {"parquet", "mlflow"}

    def identity(self, run: StageRun):
        return run.plan.board_identity

    def reusable(self, run: StageRun) -> bool:
        """Not when an evaluation it ranks was computed again since (a forced re-evaluation keeps its
        fingerprint: the nightly schedule's, followed by this step through the automation sensor)."""
        return super().reusable(run) and not newer_inputs(run.ref, run.inputs["evaluations"].values())

    def compute(self, run: StageRun) -> Artifact:
        refs = run.inputs["evaluations"]
        if not refs:
            raise dg.Failure(f"no evaluation of sweep {run.plan.sweep.name} is materialized yet")
        missing = [k for k in run.plan.config_keys if k not in refs]
        if missing and not run.plan.sweep.search.adaptive:
            run.context.log.warning(f"{len(missing)} configs not evaluated yet: {missing[:5]}")
        keys = [k for k in run.plan.config_keys if k in refs]
        every = {k: refs[k].read() for k in keys}
        # Configs are compared on the same questions: those evaluated on the most of them (the full set,
        # unless a halving search stopped early); the ones a halving rung dropped are listed, not ranked.
        answered = {k: int(f["n_queries"][0]) for k, f in every.items()}
        most = max(answered.values())
        partial = {k: n for k, n in answered.items() if n < most}
        keys = [k for k in keys if k not in partial]
        summaries = pl.concat([every[k] for k in keys], how="diagonal_relaxed")
        per_query = {k: refs[k].read("per_query") for k in keys}
        spec = run.plan.sweep.decision
        # ranked again on the same questions: the last board's decision, what changed since
        previous = json.loads(run.ref.read("decision")["json"][0]) if run.ref.intact() else None
        judged = judge_agreement(run, previous, [refs[k] for k in keys])  # None: no labels to measure against
        if judged and not judged["weighted"]:
            run.context.log.warning(f"{JUDGE_METRIC}: {judged['reason']}")
        try:  # the gate and the champion's check score with the same rule
            weights, undefined = effective_weights(run.plan.sweep.weights, summaries, judged)
        except ValueError as e:
            raise dg.Failure(f"sweep {run.plan.sweep.name}: {e}") from None
        if undefined:
            run.context.log.warning(
                f"{', '.join(undefined)} are undefined for every config (no question has what they need: "
                f"{undefined_reasons(undefined)}): left out of the overall score, the other weights keep their "
                "proportions"
            )
        scores = bootstrap_scores(per_query, weights)  # one set of resamples for every comparison
        count_judge = judge_is_weighted(run.plan.sweep.weights, judged)  # its failures set configs aside
        board = compare_to_leader(
            rank_configs(summaries, weights, count_judge), per_query, weights, scores=scores
        )
        constraints = Constraints(
            spec.max_p95_latency_ms, spec.max_cost_per_1k_queries, spec.min, spec.prefer
        )
        board, decision = decide(board, per_query, weights, constraints, alpha=spec.alpha, scores=scores)
        decision["questions"] = most
        decision["weights"] = weights  # the weights the overall score used
        decision["undefined_metrics"] = undefined
        if judged:
            decision["judge"] = judged
        decision["not_ranked"] = partial  # config -> questions it answered before halving dropped it
        if run.plan.holdout:  # confirmed afterwards on the questions no selection step saw
            everything = run.inputs["qa_set"].source.read()["query_id"].to_list()
            if held := holdout_ids(everything, spec.holdout, spec.holdout_seed):
                decision["finalists"] = finalists(board, decision)
                decision["holdout"] = {"share": spec.holdout, "questions": len(held), "pending": True}
                if not decision["finalists"]:
                    decision["holdout"] = {
                        "share": spec.holdout,
                        "questions": len(held),
                        "verdict": "nothing to confirm: no config qualifies",
                    }
            else:
                decision["finalists"] = []
                decision["holdout"] = {
                    "share": spec.holdout,
                    "verdict": f"none: {len(everything)} question(s) are too few to hold any out",
                }
        if "mean_hops" in board.columns:  # a single-shot config searched once per question
            board = board.with_columns(pl.col("mean_hops").fill_null(1.0))
        board = board.with_columns(
            pl.col("config_key").replace_strict(run.plan.labels, default=None).alias("label")
        )
        board = board.select("rank", "label", pl.exclude("rank", "label"))
        decision["evaluated_at"] = time.time()
        if previous is not None:
            decision["drift"] = findings(previous, decision, board, spec.alpha)
        run.notes["per_query"] = per_query
        return Artifact(run.ref, board, {"decision": pl.DataFrame({"json": [json.dumps(decision)]})})

    def narrow(self, context, plan, inputs: dict) -> dict:
        """With a holdout: the selection split only (its questions, its evaluations)."""
        if not plan.holdout:
            return inputs
        evaluations = {k: r for k, r in inputs["evaluations"].items() if not is_holdout_key(k)}
        return {**split_inputs(plan, SELECTION, inputs), "evaluations": evaluations}

    def publish(self, run: StageRun, frame: pl.DataFrame, reused: bool) -> dict:
        decision = json.loads(run.part("decision")["json"][0])
        per_query = run.notes.get("per_query") or {
            k: r.read("per_query")
            for k, r in run.inputs["evaluations"].items()
            if k in set(frame["config_key"])
        }
        qa = run.read("qa_set")
        path, markdown, png, report = publish_board(run, frame, decision, per_query, qa)
        history = record_history(path, frame, decision, append=not reused)
        trend = trend_plot_png(history)
        atomic_write_bytes(path.with_suffix(".trend.png"), trend)
        # every config run carries its place, its score at this evaluation's night the step of its history
        # (a config run logged again since gets it back) ...
        run.resources.tracking.log_ranking(run.plan.sweep.name, frame, decision.get("evaluated_at"))
        # ... and one leaderboard run per content: an unchanged rerun logs none, unless MLflow lost it
        tracking = run.resources.tracking
        if not reused or (
            tracking.enabled and not tracking.find_run(run.plan.sweep.name, run.ref.fp, "board_fingerprint")
        ):
            tracking.log_leaderboard(
                run.plan.sweep.name,
                frame,
                markdown,
                png,
                report=report,
                decision=decision,
                fingerprint=run.ref.fp,
                images={"trend.png": trend},
            )
        tracking.mark_current_board(run.plan.sweep.name, run.ref.fp)  # earlier boards: superseded
        shown = with_language_scores(with_plugin_metrics(TABLE_COLUMNS, frame), frame)
        cols = [c for c in shown if c in frame.columns]
        kind = {pl.Float64: "float", pl.Int64: "int", pl.UInt32: "int"}
        table = frame.select(cols).with_columns(pl.selectors.float().round(4))
        return {  # what to ship first: the UI lists metadata in this order
            "recommended": decision["recommended"] or "none",
            "recommendation": dg.MetadataValue.md(
                f"**{decision['recommended'] or 'none'}**\n\n{decision['why']}\n\n{decision['advice']}"
            ),
            **(
                {"min_detectable_difference": float(decision["min_detectable_difference"])}
                if decision["min_detectable_difference"] is not None
                # too few questions or no spread: why, in place of a figure the data cannot give
                else {
                    "min_detectable_difference": decision.get("min_detectable_difference_withheld")
                    or "no other config to compare"
                }
            ),
            "top_tier_size": len(decision["top_tier"]),
            **(
                {
                    "holdout": dg.MetadataValue.md(
                        f"pending: {len(decision['finalists'])} finalists are confirmed on the holdout "
                        f"({holdout_share(decision)}, never seen here) by the confirmation asset"
                    )
                }
                if decision.get("finalists")
                else {}
            ),
            **(
                {"dropped_by_halving": dg.MetadataValue.json(decision["not_ranked"])}
                if decision.get("not_ranked")
                else {}
            ),
            "ship_report": dg.MetadataValue.path(str(path.with_suffix(".report.html"))),
            "leaderboard": dg.MetadataValue.md(markdown),
            "table": dg.MetadataValue.table(
                records=[dg.TableRecord(r) for r in table.to_dicts()],
                schema=dg.TableSchema(
                    columns=[
                        dg.TableColumn(c, kind.get(frame[c].dtype, "string"), description=COLUMN_NOTES.get(c))
                        for c in cols
                    ]
                ),
            ),
            "config_keys": dg.MetadataValue.json(dict(zip(frame["label"], frame["config_key"], strict=True))),
            "plot": dg.MetadataValue.md(f"![scores](data:image/png;base64,{base64.b64encode(png).decode()})"),
            "trend": dg.MetadataValue.md(
                f"Overall score per evaluation ({history['evaluated_at'].n_unique()} so far)\n\n"
                f"![trend](data:image/png;base64,{base64.b64encode(trend).decode()})"
            ),
            **(
                {
                    "drift": dg.MetadataValue.md(
                        f"**{decision['drift']['severity'] or 'ok'}**: {decision['drift']['message']}"
                    )
                }
                if decision.get("drift")
                else {}
            ),
            **question_tables(frame, per_query, qa, decision),
            "board_path": dg.MetadataValue.path(str(path)),
            "dagster/row_count": frame.height,
            "configs_missing": len(run.plan.config_keys) - frame.height,
            "best_config": frame["config_key"][0],
            "best_score": float(frame["overall_score"][0]),
            "tied_with_leader": int(frame["tied_with_leader"].sum()) - 1,
            "weights": dg.MetadataValue.json(decision["weights"]),
            **(
                {"undefined_metrics": dg.MetadataValue.json(decision["undefined_metrics"])}
                if decision["undefined_metrics"]
                else {}
            ),
            # the judge against people's labels: its kappa, and whether its metric is weighted and why
            **(
                {
                    "judge_agreement": dg.MetadataValue.json(decision["judge"]),
                    "judge_weighted": decision["judge"]["weighted"],
                    **(
                        {"judge_kappa": decision["judge"]["kappa"]}
                        if decision["judge"].get("kappa") is not None
                        else {}
                    ),
                }
                if decision.get("judge")
                else {}
            ),
        }

    def check(self, run: StageRun, frame: pl.DataFrame) -> list[dg.AssetCheckResult]:
        decision = json.loads(run.part("decision")["json"][0])
        return [self._complete(run, frame), drift_check(run.plan.sweep.name, decision)]

    def _complete(self, run: StageRun, frame: pl.DataFrame) -> dg.AssetCheckResult:
        missing = sorted(set(run.plan.config_keys) - set(frame["config_key"].to_list()))
        sequential = run.plan.sweep.search.sequential
        return dg.AssetCheckResult(
            check_name="complete",
            # an adaptive search evaluates some configs of the plan by design: bayesian its budget,
            # halving its survivors (the rest it dropped on a share of the questions)
            passed=(frame.height >= run.plan.trial_budget if sequential else frame.height >= 1)
            if run.plan.sweep.search.adaptive
            else not missing,
            severity=dg.AssetCheckSeverity.WARN,
            metadata={
                "configs": len(run.plan.config_keys),
                "missing": len(missing),
                "examples": ", ".join(missing[:3]),
            },
        )


def drift_check(sweep: str, decision: dict) -> dg.AssetCheckResult:
    """The `nightly_drift` check: passed unless the findings against the previous leaderboard
    (rag_core/decision/drift.py) name a problem; its metadata `alert` is what the alert sensor sends."""
    drift = decision.get("drift") or {
        "severity": None,
        "message": "no earlier leaderboard on these questions",
    }
    alert = drift.get("alert")
    return dg.AssetCheckResult(
        check_name="nightly_drift",
        passed=drift["severity"] is None,
        severity=dg.AssetCheckSeverity.ERROR if drift["severity"] == "ERROR" else dg.AssetCheckSeverity.WARN,
        metadata={
            "message": drift["message"],
            **({"alert": dg.MetadataValue.json({"sweep": sweep, **alert})} if alert else {}),
        },
    )


def newer_inputs(ref, inputs) -> bool:
    """Whether any input artifact was written after `ref` (which exists)."""
    if not ref.exists():
        return False
    mine = modified(ref.path())
    return any(r.exists() and modified(r.path()) > mine for r in inputs)


HISTORY_COLUMNS = [
    "evaluated_at",
    "config_key",
    "label",
    "overall_score",
    "overall_ci_low",
    "overall_ci_high",
    "recommended",
]


def record_history(path: Path, frame: pl.DataFrame, decision: dict, append: bool) -> pl.DataFrame:
    """`<sweep>.history.parquet`: every config's overall score at each evaluation of the board (a night
    of the schedule, a forced or changed run); `append`: this board is new (a reused one is there)."""
    file = path.with_suffix(".history.parquet")
    history = read_parquet(file) if file.exists() else pl.DataFrame()
    if append or history.is_empty():
        rows = frame.select([c for c in HISTORY_COLUMNS if c != "evaluated_at"]).with_columns(
            pl.lit(float(decision.get("evaluated_at") or time.time())).alias("evaluated_at")
        )
        history = pl.concat([history, rows.select(HISTORY_COLUMNS)], how="diagonal_relaxed")
        atomic_write_parquet(history, file)
    return history


def trend_plot_png(history: pl.DataFrame) -> bytes:
    """Each config's overall score at each evaluation (the recommended config of the latest in bold)."""
    import io
    from datetime import UTC, datetime

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    latest = history.filter(pl.col("evaluated_at") == history["evaluated_at"].max())
    rec = set(latest.filter(pl.col("recommended"))["config_key"])
    times = sorted(history["evaluated_at"].unique().to_list())  # one x position per evaluation
    at = {t: i for i, t in enumerate(times)}
    fig, ax = plt.subplots(figsize=(8, 4.2), dpi=90)
    for (key,), rows in history.sort("evaluated_at").group_by("config_key", maintain_order=True):
        bold = key in rec
        ax.plot(
            [at[t] for t in rows["evaluated_at"]],
            rows["overall_score"].to_list(),
            marker="o",
            lw=2.5 if bold else 1,
            alpha=1 if bold else 0.5,
            label=f"{rows['label'][-1]}{' (recommended)' if bold else ''}",
        )
    ax.set_xticks(
        range(len(times)),
        [datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M") for t in times],
        fontsize=7,
    )
    ax.set_xlim(-0.5, len(times) - 0.5)
    ax.set_ylabel("overall score")
    ax.set_title("Overall score per evaluation")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.autofmt_xdate()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()
