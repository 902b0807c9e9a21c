"""The champion model: the leaderboard's recommendation shipped as an MLflow pyfunc model (resources/shipping/) and
registered under the sweep's name with the alias `champion`, so the registry always holds the current
winner. It follows the leaderboard (and the holdout confirmation, when the sweep holds questions out); a
leaderboard that recommends the same evaluation again registers nothing."""

import shlex

import dagster as dg
import polars as pl

from rag_assets.board_files import leaderboard_path, read_decision
from rag_assets.stage_asset import FOLLOWS_INPUTS, asset_key
from rag_core.decision.holdout import unsupported_claim
from rag_core.planning.plan import Plan
from resources.storage import read_parquet

CHAMPION = "champion_model"


def champion_due(plan: Plan, data, tracking) -> bool:
    """Whether the registry's champion is not the current recommendation's evaluation (what the runner
    asks before materializing the champion: an unchanged rerun launches no run for it)."""
    from resources.shipping.registry import champion_of

    board_file = leaderboard_path(data, plan.sweep.name)
    if not tracking.enabled or not board_file.exists():
        return False
    decision = read_decision(data, plan.sweep.name)
    recommended = decision.get("recommended")
    if unsupported_claim(decision):
        return False
    now = champion_of(tracking, plan.sweep.name)
    return recommendation_due(read_parquet(board_file), recommended, now)


def recommendation_due(board: pl.DataFrame, key: str, now) -> bool:
    """Whether the champion `now` is to be replaced by the board's evaluation of `key` (resources.shipping.registry
    `due`; a key the board does not hold: yes, and registering says why it cannot)."""
    from resources.shipping.registry import due

    row = board.filter(pl.col("config_key") == key)
    return row.height == 0 or due(now, row["fingerprint"][0])


GATE_CHECK = "not_worse_than_champion"


def gate_against_champion(
    plan: Plan, data, board: pl.DataFrame, key: str, now, decision: dict | None = None
) -> dict:
    """The recommendation `key` against the registered champion `now` (a model version), both as the
    leaderboard evaluated them, by the sweep's `gate:` test (rag_core/decision/gate.py) with the board's
    effective weights (its `decision`'s judge measurement) and its failed-call rule. Returns
    `{"verdict": pass|fail|inconclusive|not gated, "message", "result"}`."""
    from rag_core.decision.gate import GateSettings, gate
    from rag_core.decision.qualification import effective_weights, judge_is_weighted
    from resources.artifacts import ArtifactRef

    if now is None:
        return {"verdict": "not gated", "message": "no registered champion yet", "result": None}
    base = now.tags.get("config_key")
    where = f"models:/{plan.sweep.name}/{now.version}"
    if base == key:
        return {"verdict": "not gated", "message": f"the recommendation is {where}'s config", "result": None}
    rows = {r["config_key"]: r for r in board.filter(pl.col("config_key").is_in([key, base])).to_dicts()}
    if base not in rows:
        return {
            "verdict": "not gated",
            "message": f"{where}'s config {base} is not on this leaderboard (the sweep's configs changed): "
            f"compare them with `rag-sweep gate SPEC --against {where}`",
            "result": None,
            "compared": False,
        }
    frames = {k: ArtifactRef(data, "evaluations", rows[k]["fingerprint"], k).read("per_query") for k in rows}
    if sorted(frames[key]["query_id"]) != sorted(frames[base]["query_id"]):
        return {
            "verdict": "not gated",
            "message": f"{where}'s config was evaluated on other questions than the recommendation (a search "
            "dropped it early)",
            "result": None,
            "compared": False,
        }
    settings = GateSettings.of(plan.sweep.gate)
    labels = plan.labels
    weights, _ = effective_weights(plan.sweep.weights, board, (decision or {}).get("judge"))
    result = gate(
        {key: frames[key]},
        frames[base],
        weights,
        settings,
        labels,
        f"{where} ({labels.get(base, base)})",
        summaries=rows,
        baseline_key=base,
        count_judge=judge_is_weighted(plan.sweep.weights, (decision or {}).get("judge")),
    )
    c = result.candidates[0]
    return {"verdict": c.verdict, "message": f"{c.label} vs {result.baseline}: {c.why}", "result": result}


def serve_line(model_uri: str) -> str:
    """The shell line that serves the registered model from a private copy checked first (its URI quoted
    for the shell when it needs it)."""
    return f"rag-sweep serve {shlex.quote(model_uri)} -p 5001"


def follows_the_decision(plan: Plan) -> dg.AutomationCondition | None:
    """Without a holdout, the champion follows the leaderboard. With one, whoever requests the confirmation
    (the holdout driver, the search driver, `rag-sweep run`) requests the champion in the same run: a new
    leaderboard is not confirmed until its finalists' holdout evaluations are, and a gate that keeps the
    old champion fails that run once, not again on the automation's next tick."""
    return None if plan.holdout else FOLLOWS_INPUTS


def champion_asset(plan: Plan) -> dg.AssetsDefinition:
    upstream = ["leaderboard", *(["confirmation"] if plan.holdout else [])]

    @dg.asset(
        key=asset_key(plan, CHAMPION),
        deps=[asset_key(plan, s) for s in upstream],
        required_resource_keys={"artifacts", "tracking"},
        group_name=plan.prefix,
        kinds={"mlflow"},
        automation_condition=follows_the_decision(plan),
        check_specs=[
            dg.AssetCheckSpec(
                GATE_CHECK,
                asset=asset_key(plan, CHAMPION),
                blocking=True,
                description="A new recommendation replaces the registered champion only when it is not shown "
                "worse than it on the same questions (the sweep's `gate:` test: margin, Holm); when it is, "
                "the champion stays and this check fails.",
            )
        ],
        description=(
            f"The recommended config of sweep {plan.sweep.name} as an MLflow pyfunc model (its index rows "
            f"and vectors, settings, prompts and figures), registered as `models:/{plan.sweep.name}@champion`; "
            "a new version only when the recommendation changed."
        ),
    )
    def _champion(context):
        from resources.shipping.bundle import collect
        from resources.shipping.registry import current_champion, register_champion

        def checked(passed: bool, message: str, warn: bool = False, **metadata) -> dg.AssetCheckResult:
            """ERROR when failed: blocking; WARN: a comparison that could not be made (said, not blocking)."""
            return dg.AssetCheckResult(
                check_name=GATE_CHECK,
                passed=passed,
                severity=dg.AssetCheckSeverity.WARN if warn else dg.AssetCheckSeverity.ERROR,
                metadata={"message": message, **metadata},
            )

        tracking, data = context.resources.tracking, context.resources.artifacts.root
        if not tracking.enabled:
            yield dg.MaterializeResult(metadata={"registered": False, "why": "MLflow tracking is off"})
            yield checked(True, "not gated: MLflow tracking is off")
            return
        decision = read_decision(data, plan.sweep.name)
        key = decision.get("recommended")
        if why := unsupported_claim(decision):
            context.log.warning(f"no champion registered: {why}")
            yield dg.MaterializeResult(metadata={"registered": False, "why": why})
            yield checked(True, f"not gated: nothing to register ({why})")
            return
        board = read_parquet(leaderboard_path(data, plan.sweep.name))
        now = current_champion(tracking.client(), plan.sweep.name)
        gated = {"verdict": "not gated", "message": "the champion is this evaluation already", "result": None}
        if recommendation_due(board, key, now):
            gated = gate_against_champion(plan, data, board, key, now, decision)
        figures = _gate_figures(gated["result"])
        if gated["result"] is not None:  # the comparison, in MLflow too: a gate run naming the champion
            from rag_core.decision.gate_report import reports

            link = {"baseline_model_name": plan.sweep.name, "baseline_model_version": str(now.version)}
            run_id = tracking.log_gate(plan.sweep.name, gated["result"], reports(gated["result"], []), link)
            if url := tracking.run_url(run_id):
                figures["gate_run"] = dg.MetadataValue.url(url)
        if gated["verdict"] == "fail":
            message = f"{gated['message']}: the champion stays version {now.version}"
            context.log.warning(message)
            yield dg.MaterializeResult(
                metadata={
                    "registered": False,
                    "why": message,
                    "model_uri": f"models:/{plan.sweep.name}@champion",
                    "version": int(now.version),
                }
            )
            yield checked(False, message, verdict="fail", **figures)
            return
        bundle = collect(plan, data, context.instance, board, decision, key)
        held = register_champion(tracking, bundle)
        context.log.info(
            f"{held['model_uri']} is version {held['version']}: {bundle.label}"
            + (" (registered now)" if held["registered"] else " (already the champion)")
        )
        yield dg.MaterializeResult(
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
                    if isinstance(v, int | float | str)  # str: why an interval is withheld
                },
            }
        )
        # a champion the leaderboard cannot compare (its config left the sweep): a warning, not a pass
        unknown = gated["verdict"] == "not gated" and now is not None and gated.get("compared") is False
        yield checked(
            not unknown,
            f"{gated['verdict']}: {gated['message']}",
            unknown,
            verdict=gated["verdict"],
            **figures,
        )

    return _champion


def _gate_figures(result) -> dict:
    """The gate's figures as check metadata: each test's difference, its interval and the Holm-adjusted one."""
    if result is None:
        return {}
    out = {}
    for t in result.candidates[0].tests:
        for what in ("difference", "ci_low", "ci_high", "holm_ci_low", "holm_ci_high"):
            if (value := getattr(t, what)) is not None:
                out[f"{t.metric}/{what}"] = float(value)
    return out
