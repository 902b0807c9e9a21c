"""The champion model: the leaderboard's recommendation shipped as an MLflow pyfunc model (shipping/) and
registered under the sweep's name with the alias `champion`, so the registry always holds the current
winner. It follows the leaderboard (and the holdout confirmation, when the sweep holds questions out); a
leaderboard that recommends the same evaluation again registers nothing."""

import shlex

import dagster as dg
import polars as pl

from rag_assets.leaderboard import leaderboard_path, read_decision
from rag_assets.stage_asset import FOLLOWS_INPUTS, asset_key
from rag_core.decision.holdout import unsupported_claim
from rag_core.planning.plan import Plan
from resources.storage import read_parquet

CHAMPION = "champion_model"


def champion_due(plan: Plan, data, tracking) -> bool:
    """Whether the registry's champion is not the current recommendation's evaluation (what the runner
    asks before materializing the champion: an unchanged rerun launches no run for it)."""
    from shipping.registry import current_champion, due

    board_file = leaderboard_path(data, plan.sweep.name)
    if not tracking.enabled or not board_file.exists():
        return False
    decision = read_decision(data, plan.sweep.name)
    recommended = decision.get("recommended")
    if unsupported_claim(decision):
        return False
    board = read_parquet(board_file)
    row = board.filter(pl.col("config_key") == recommended)
    now = current_champion(tracking.client(), plan.sweep.name)
    return row.height == 0 or due(now, row["fingerprint"][0])


def serve_line(model_uri: str) -> str:
    """The shell line that serves the registered model (its URI quoted for the shell when it needs it)."""
    return f"mlflow models serve -m {shlex.quote(model_uri)} --env-manager local -p 5001"


def follows_the_decision(plan: Plan) -> dg.AutomationCondition:
    """With a holdout, the champion follows the confirmation alone: a new leaderboard is not confirmed
    until its finalists' holdout evaluations are (the holdout driver then requests the confirmation)."""
    if not plan.holdout:
        return FOLLOWS_INPUTS
    _A = dg.AutomationCondition
    return (
        _A.any_deps_updated()
        .allow(dg.AssetSelection.assets(asset_key(plan, "confirmation")))
        .since(_A.newly_requested() | _A.newly_updated() | _A.initial_evaluation())
        & ~_A.any_deps_missing()
        & ~_A.any_deps_in_progress()
        & ~_A.in_progress()
    ).with_label("follows_the_confirmation")


def champion_asset(plan: Plan) -> dg.AssetsDefinition:
    upstream = ["leaderboard", *(["confirmation"] if plan.holdout else [])]

    @dg.asset(
        key=asset_key(plan, CHAMPION),
        deps=[asset_key(plan, s) for s in upstream],
        required_resource_keys={"artifacts", "tracking"},
        group_name=plan.prefix,
        kinds={"mlflow"},
        automation_condition=follows_the_decision(plan),
        description=(
            f"The recommended config of sweep {plan.sweep.name} as an MLflow pyfunc model (its index rows "
            f"and vectors, settings, prompts and figures), registered as `models:/{plan.sweep.name}@champion`; "
            "a new version only when the recommendation changed."
        ),
    )
    def _champion(context) -> dg.MaterializeResult:
        from shipping.bundle import collect
        from shipping.registry import register_champion

        tracking, data = context.resources.tracking, context.resources.artifacts.root
        if not tracking.enabled:
            return dg.MaterializeResult(metadata={"registered": False, "why": "MLflow tracking is off"})
        decision = read_decision(data, plan.sweep.name)
        key = decision.get("recommended")
        if why := unsupported_claim(decision):
            context.log.warning(f"no champion registered: {why}")
            return dg.MaterializeResult(metadata={"registered": False, "why": why})
        board = read_parquet(leaderboard_path(data, plan.sweep.name))
        bundle = collect(plan, data, context.instance, board, decision, key)
        held = register_champion(tracking, bundle)
        context.log.info(
            f"{held['model_uri']} is version {held['version']}: {bundle.label}"
            + (" (registered now)" if held["registered"] else " (already the champion)")
        )
        return dg.MaterializeResult(
            metadata={
                "registered": held["registered"],
                "model_uri": held["model_uri"],
                "version": held["version"],
                "config_key": key,
                "label": bundle.label,
                "evaluation_fingerprint": bundle.manifest["evaluation_fingerprint"],
                "serve": dg.MetadataValue.md(f"`{serve_line(held['model_uri'])}`"),
                **{
                    f"figure/{k}": v
                    for k, v in bundle.metadata["figures"].items()
                    if isinstance(v, int | float)
                },
            }
        )

    return _champion
