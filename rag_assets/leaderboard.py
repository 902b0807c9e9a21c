"""Leaderboard: every evaluated config of the sweep ranked by weighted overall score (unpartitioned).
Besides its content-addressed artifact it writes `<data_dir>/leaderboards/<sweep>.parquet` and `.png`."""

from __future__ import annotations

import base64
from pathlib import Path

import dagster as dg
import polars as pl

from rag_assets.stage_asset import Check, StageLogic, StageRun
from rag_core.leaderboard import DISPLAY_COLUMNS, compare_to_leader, rank_configs, score_plot_png, to_markdown
from resources.artifacts import atomic_write_parquet


def leaderboard_path(data_dir, sweep_name: str) -> Path:
    return Path(data_dir) / "leaderboards" / f"{sweep_name}.parquet"


class Leaderboard(StageLogic):
    description = "Configs ranked by weighted overall score with 95% intervals and ties vs the leader."
    resources = ("tracking",)
    checks = (Check("complete", "Every config of the sweep is evaluated and on the board."),)

    def kinds(self, plan) -> set[str]:
        return {"parquet", "mlflow"}

    def identity(self, run: StageRun):
        return run.plan.sweep.weights

    def compute(self, run: StageRun) -> pl.DataFrame:
        refs = run.inputs["evaluations"]
        if not refs:
            raise dg.Failure(f"no evaluation of sweep {run.plan.sweep.name} is materialized yet")
        missing = [k for k in run.plan.config_keys if k not in refs]
        if missing:
            run.context.log.warning(f"{len(missing)} configs not evaluated yet: {missing[:5]}")
        keys = [k for k in run.plan.config_keys if k in refs]
        summaries = pl.concat([refs[k].read() for k in keys], how="diagonal_relaxed")
        per_query = {k: refs[k].read("per_query") for k in keys}
        weights = run.plan.sweep.weights
        return compare_to_leader(rank_configs(summaries, weights), per_query, weights)

    def report(self, run: StageRun, frame: pl.DataFrame, reused: bool) -> dict:
        sweep = run.plan.sweep
        path = atomic_write_parquet(frame, leaderboard_path(run.resources.artifacts.data_dir, sweep.name))
        png = score_plot_png(frame)
        path.with_suffix(".png").write_bytes(png)
        markdown = to_markdown(frame)
        if not reused:  # one leaderboard run per content: an unchanged rerun logs none
            run.resources.tracking.log_leaderboard(sweep.name, frame, markdown, png)
        cols = [c for c in DISPLAY_COLUMNS if c in frame.columns]
        kind = {pl.Float64: "float", pl.Int64: "int", pl.UInt32: "int"}
        return {
            "leaderboard": dg.MetadataValue.md(markdown),
            "table": dg.MetadataValue.table(
                records=[dg.TableRecord(r) for r in frame.select(cols).to_dicts()],
                schema=dg.TableSchema(
                    columns=[dg.TableColumn(c, kind.get(frame[c].dtype, "string")) for c in cols]
                ),
            ),
            "plot": dg.MetadataValue.md(f"![scores](data:image/png;base64,{base64.b64encode(png).decode()})"),
            "board_path": dg.MetadataValue.path(str(path)),
            "dagster/row_count": frame.height,
            "configs_missing": len(run.plan.config_keys) - frame.height,
            "best_config": frame["config_key"][0],
            "best_score": float(frame["overall_score"][0]),
            "tied_with_leader": int(frame["tied_with_leader"].sum()) - 1,
            "weights": dg.MetadataValue.json(sweep.weights),
        }

    def check(self, run: StageRun, frame: pl.DataFrame) -> list[dg.AssetCheckResult]:
        missing = sorted(set(run.plan.config_keys) - set(frame["config_key"].to_list()))
        return [
            dg.AssetCheckResult(
                check_name="complete",
                passed=not missing,
                severity=dg.AssetCheckSeverity.WARN,
                metadata={
                    "configs": len(run.plan.config_keys),
                    "missing": len(missing),
                    "examples": ", ".join(missing[:3]),
                },
            )
        ]
