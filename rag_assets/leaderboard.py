"""Leaderboard: every evaluated config of the sweep ranked by weighted overall score (unpartitioned)."""

import base64

import dagster as dg
import polars as pl

from rag_assets.common import EAGER
from rag_assets.lineage import Lineage
from rag_core.leaderboard import DISPLAY_COLUMNS, compare_to_leader, rank_configs, score_plot_png, to_markdown
from rag_core.spec import Sweep
from resources.artifacts import ArtifactStore, atomic_write_parquet
from resources.tracking import MlflowTracking


def leaderboard_path(artifacts: ArtifactStore, sweep: Sweep):
    return artifacts.root / "leaderboards" / f"{sweep.name}.parquet"


def collect_summaries(
    artifacts: ArtifactStore, sweep: Sweep, backend: str
) -> tuple[pl.DataFrame | None, dict[str, pl.DataFrame], list[str]]:
    """Summaries and per-query metrics of every evaluated config, and the keys not evaluated yet."""
    lineage = Lineage(sweep, backend)
    frames, per_query, missing = [], {}, []
    for c in sweep.configs:
        fp = lineage.evaluation_fp(c)
        if artifacts.exists("evaluation_summaries", fp):
            frames.append(artifacts.read("evaluation_summaries", fp, "evaluation summary"))
            per_query[c.config_key] = artifacts.read("evaluations", fp, "evaluation")
        else:
            missing.append(c.config_key)
    return (pl.concat(frames, how="diagonal_relaxed") if frames else None), per_query, missing


def build(sweep: Sweep, backend: str) -> dg.AssetsDefinition:
    @dg.asset(
        deps=[dg.AssetDep("evaluations", partition_mapping=dg.AllPartitionMapping())],
        group_name="evaluation",
        kinds={"parquet", "mlflow"},
        automation_condition=EAGER,
        description=f"Configs of sweep {sweep.name} ranked by weighted score {sweep.weights}; "
        "ties broken by cost, then latency.",
    )
    def leaderboard(
        context: dg.AssetExecutionContext, artifacts: ArtifactStore, tracking: MlflowTracking
    ) -> dg.MaterializeResult:
        summaries, per_query, missing = collect_summaries(artifacts, sweep, backend)
        if summaries is None:
            raise dg.Failure(f"no evaluation of sweep {sweep.name} is materialized yet")
        if missing:
            context.log.warning(f"{len(missing)} configs not evaluated yet: {missing[:5]}")
        board = compare_to_leader(rank_configs(summaries, sweep.weights), per_query, sweep.weights)
        path = atomic_write_parquet(board, leaderboard_path(artifacts, sweep))
        png = score_plot_png(board)
        path.with_suffix(".png").write_bytes(png)
        markdown = to_markdown(board)
        tracking.log_leaderboard(sweep.name, board, markdown, png)
        cols = [c for c in DISPLAY_COLUMNS if c in board.columns]
        return dg.MaterializeResult(
            metadata={
                "leaderboard": dg.MetadataValue.md(markdown),
                "table": dg.MetadataValue.table(
                    records=[dg.TableRecord(r) for r in board.select(cols).to_dicts()],
                    schema=dg.TableSchema(
                        columns=[
                            dg.TableColumn(
                                c,
                                "int"
                                if c == "rank"
                                else "float"
                                if board[c].dtype == pl.Float64
                                else "string",
                            )
                            for c in cols
                        ]
                    ),
                ),
                "plot": dg.MetadataValue.md(
                    f"![scores](data:image/png;base64,{base64.b64encode(png).decode()})"
                ),
                "path": dg.MetadataValue.path(str(path)),
                "dagster/row_count": board.height,
                "configs_missing": len(missing),
                "best_config": board["config_key"][0],
                "best_score": float(board["overall_score"][0]),
                "tied_with_leader": int(board["tied_with_leader"].sum()) - 1,
                "weights": dg.MetadataValue.json(sweep.weights),
            }
        )

    return leaderboard
