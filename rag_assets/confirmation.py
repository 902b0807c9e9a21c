"""Confirmation: the leaderboard's finalists scored on the holdout, the questions no selection step saw
(rag_core/decision/holdout.py). It reads the leaderboard (which chose on the selection split) and the holdout
partitions of the finalists' evaluations, measures the winner's curse (selection score minus holdout
score) and tells whether the recommended config is still tied with the best finalist. It then rewrites the
sweep's leaderboard files with the holdout beside the selection, and puts the holdout scores on the
finalists' MLflow runs and the verdict on the leaderboard's run."""

from __future__ import annotations

import json

import dagster as dg
import polars as pl

from rag_assets.leaderboard import newer_inputs, publish_board
from rag_assets.stage_asset import Check, StageLogic, StageRun, split_inputs
from rag_core.decision.holdout import HOLDOUT, HOLDOUT_SUFFIX, SELECTION, confirm, selection_key
from rag_core.decision.qualification import judge_is_weighted
from resources.artifacts import Artifact, ArtifactRef


def board_decision(ref) -> dict:
    """The recommendation a leaderboard artifact made (its `decision` side table)."""
    return json.loads(ref.read("decision")["json"][0])


def _summary(run: StageRun) -> dict:
    return json.loads(run.part("summary")["json"][0])


class Confirmation(StageLogic):
    description = (
        "The finalists (top tier, recommended, best config that meets the constraints) scored on the holdout "
        "questions no selection step saw: the winner's curse measured, and the recommendation confirmed "
        "(still statistically tied with the best finalist, paired bootstrap, Holm) or not."
    )
    resources = ("tracking",)
    checks = (
        Check(
            "recommendation_confirmed",
            "The recommended config is still statistically tied with the best finalist on the holdout.",
        ),
    )

    def kinds(self, plan) -> set[str]:
        return {"parquet", "mlflow"}

    def automation(self, key: dg.AssetKey, plan) -> dg.AutomationCondition | None:
        """None: it needs the finalists' holdout evaluations of the current leaderboard, which no condition
        on its dependencies can tell apart from the other configs' (never materialized); the holdout
        driver (sensors/holdout.py) requests it once they are complete, as `rag-sweep run` does."""
        return None

    def reusable(self, run: StageRun) -> bool:
        """Not when the leaderboard or a finalist's holdout evaluation was computed again since (the
        nightly schedule re-asks them under the same fingerprints)."""
        inputs = [run.inputs["leaderboard"], *run.inputs["evaluations"].values()]
        return super().reusable(run) and not newer_inputs(run.ref, inputs)

    def identity(self, run: StageRun):
        return run.plan.confirmation_identity

    def narrow(self, context, plan, inputs: dict) -> dict:
        """The holdout's questions and the finalists' holdout evaluations (which the leaderboard names)."""
        decision = board_decision(inputs["leaderboard"])
        if not decision.get("finalists"):
            raise dg.Failure(
                f"nothing to confirm: {decision.get('holdout', {}).get('verdict', 'no finalists')}"
            )
        wanted = [k + HOLDOUT_SUFFIX for k in decision["finalists"]]
        missing = [k for k in wanted if k not in inputs["evaluations"]]
        if missing:
            raise dg.Failure(
                f"the holdout evaluations of {len(missing)} finalists are not materialized yet "
                f"({', '.join(missing[:3])}): materialize those partitions of holdout_evaluations first"
            )
        evaluations = {k: inputs["evaluations"][k] for k in wanted}
        return {**split_inputs(plan, HOLDOUT, inputs), "evaluations": evaluations}

    def compute(self, run: StageRun) -> Artifact:
        decision = board_decision(run.inputs["leaderboard"])
        holdout = {selection_key(k): r.read("per_query") for k, r in run.inputs["evaluations"].items()}
        table, summary = confirm(
            run.read("leaderboard"),
            holdout,
            decision["weights"],
            decision["recommended"],
            alpha=run.plan.sweep.decision.alpha,
            summaries={
                selection_key(k): r.read().row(0, named=True) for k, r in run.inputs["evaluations"].items()
            },
            count_judge=judge_is_weighted(run.plan.sweep.weights, decision.get("judge")),
        )
        summary["share"] = run.plan.sweep.decision.holdout
        return Artifact(run.ref, table, {"summary": pl.DataFrame({"json": [json.dumps(summary)]})})

    def publish(self, run: StageRun, frame: pl.DataFrame, reused: bool) -> dict:
        summary = _summary(run)
        board_ref = run.inputs["leaderboard"]
        decision = {**board_decision(board_ref), "holdout": summary}
        board = run.read("leaderboard").join(frame.drop("selection_score"), on="config_key", how="left")
        # the ship report's question tables are of the selection split, as the leaderboard's
        root = run.resources.artifacts.root
        selection = {
            k: ArtifactRef(root, "evaluations", fp, k).read("per_query")
            for k, fp in zip(board["config_key"], board["fingerprint"], strict=True)
        }
        qa = split_inputs(run.plan, SELECTION, {"qa_set": run.inputs["qa_set"].source})["qa_set"].read()
        path, _, _, report = publish_board(run, board, decision, selection, qa, holdout=frame)
        run.resources.tracking.log_confirmation(run.plan.sweep.name, board, summary, board_ref.fp, report)
        return {
            "verdict": dg.MetadataValue.md(f"**{summary['verdict']}**"),
            "confirmed": str(summary["confirmed"]),
            **({"instead": summary["instead"]} if summary.get("instead") else {}),
            "holdout_questions": summary["n_questions"],
            **(
                {
                    "holdout_score": float(summary["holdout_score"]),
                    "winners_curse_drop": float(summary["drop"]),
                }
                if summary.get("holdout_score") is not None
                else {}
            ),
            "finalists": dg.MetadataValue.table(
                records=[
                    dg.TableRecord(r) for r in frame.with_columns(pl.selectors.float().round(4)).to_dicts()
                ],
                schema=dg.TableSchema(
                    columns=[
                        dg.TableColumn(
                            c, {pl.Float64: "float", pl.Int64: "int", pl.Boolean: "bool"}.get(t, "string")
                        )
                        for c, t in frame.schema.items()
                    ]
                ),
            ),
            "ship_report": dg.MetadataValue.path(str(path.with_suffix(".report.html"))),
            "dagster/row_count": frame.height,
        }

    def check(self, run: StageRun, frame: pl.DataFrame) -> list[dg.AssetCheckResult]:
        summary = _summary(run)
        return [
            dg.AssetCheckResult(
                check_name="recommendation_confirmed",
                passed=summary["confirmed"] is not False,
                severity=dg.AssetCheckSeverity.WARN,
                metadata={"verdict": summary["verdict"], "instead": summary.get("instead") or ""},
            )
        ]
